"""Live questions to a homeserver, each answered within ``TIMEOUT_SECONDS`` or a failure
naming the host: its ``/versions``, who the access token is (``/account/whoami``), the
rooms the bot is in and which of them are encrypted, and a password login (for
``homing setup``). Plain aiohttp: these run before (or without) the adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from gateway.platforms.probe import TIMEOUT_SECONDS, ProbeError, TokenRefused, host_of

_TOKEN_FIX = ("log in again with homing setup (it keeps a new token as MATRIX_ACCESS_TOKEN), "
              "or copy an access token from your client's settings")
_NETWORK_FIX = "check platforms.matrix.homeserver, the network and any proxy (HTTPS_PROXY)"


@dataclass(frozen=True, slots=True)
class Identity:
    user_id: str
    device_id: str | None


@dataclass(frozen=True, slots=True)
class Login:
    user_id: str
    access_token: str
    device_id: str


async def versions(homeserver: str, *, timeout: float = TIMEOUT_SECONDS) -> list[str]:
    data = await _ask("GET", homeserver, "/_matrix/client/versions", timeout=timeout)
    return [str(v) for v in data.get("versions") or []]


async def whoami(homeserver: str, token: str, *, timeout: float = TIMEOUT_SECONDS
                 ) -> Identity:
    data = await _ask("GET", homeserver, "/_matrix/client/v3/account/whoami", token=token,
                      timeout=timeout)
    return Identity(str(data.get("user_id")), data.get("device_id"))


async def rooms(homeserver: str, token: str, *, timeout: float = TIMEOUT_SECONDS
                ) -> dict[str, bool]:
    """The rooms the bot is in -> whether each is end-to-end encrypted."""
    data = await _ask("GET", homeserver, "/_matrix/client/v3/joined_rooms", token=token,
                      timeout=timeout)
    found: dict[str, bool] = {}
    for room in data.get("joined_rooms") or []:
        try:
            await _ask("GET", homeserver, f"/_matrix/client/v3/rooms/{quote(room, safe='')}"
                       f"/state/m.room.encryption/", token=token, timeout=timeout)
            found[str(room)] = True
        except ProbeError:
            found[str(room)] = False
    return found


async def login(homeserver: str, user_id: str, password: str, device_id: str, *,
                timeout: float = TIMEOUT_SECONDS) -> Login:
    body = {"type": "m.login.password", "password": password, "device_id": device_id,
            "initial_device_display_name": "homing",
            "identifier": {"type": "m.id.user", "user": user_id}}
    data = await _ask("POST", homeserver, "/_matrix/client/v3/login", json=body,
                      timeout=timeout)
    return Login(str(data["user_id"]), str(data["access_token"]), str(data["device_id"]))


async def _ask(method: str, homeserver: str, path: str, *, token: str | None = None,
               json: Any = None, timeout: float) -> dict[str, Any]:
    host = host_of(homeserver)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)
                                         ) as http, http.request(
                method, homeserver.rstrip("/") + path, json=json, headers=headers) as answer:
            try:
                data = await answer.json(content_type=None)
            except ValueError:
                data = {}
            data = data if isinstance(data, dict) else {}
            if answer.status == 401 or data.get("errcode") in ("M_UNKNOWN_TOKEN",
                                                              "M_MISSING_TOKEN"):
                raise TokenRefused(f"{host} refused the token ({data.get('errcode')})",
                                   _TOKEN_FIX)
            if answer.status == 403 and path.endswith("/login"):
                raise TokenRefused(f"{host} refused the login ({data.get('error')})",
                                   "check the user id and the password")
            if answer.status >= 400:
                raise ProbeError(f"{host} answered {path} with {answer.status} "
                                 f"{data.get('errcode', '')}".rstrip(),
                                 "see the homeserver's answer")
            return data
    except TimeoutError:
        raise ProbeError(f"{host} did not answer within {timeout:g} s", _NETWORK_FIX) from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise ProbeError(f"cannot reach {host}: {exc}", _NETWORK_FIX) from None

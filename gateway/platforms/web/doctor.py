"""What ``homing doctor`` checks of the web chat: its port free (or the running homing's)
and its token long enough. Plain blocking code, run in a thread."""

from __future__ import annotations

import asyncio
import errno
import socket
import urllib.error
import urllib.request

from gateway.config.settings import secret
from gateway.platforms.checks import Check, DoctorContext, fail, ok, warn
from gateway.platforms.web.settings import WebConfig

#: a web token shorter than this is guessable
SHORT_TOKEN = 16
_HEALTH_TIMEOUT = 3.0


async def checks(settings: WebConfig, context: DoctorContext) -> list[Check]:
    """The registry's way in (gateway/platforms/web/spec.py)."""
    return await asyncio.to_thread(web_checks, settings)


def web_checks(web: WebConfig) -> list[Check]:
    return [_port_check(web), _token_check(web)]


def _port_check(web: WebConfig) -> Check:
    name = "web port"
    where = f"{web.host}:{web.port}"
    if web.port == 0:
        return ok(name, f"{web.host}:0 — a free port is picked at each start")
    try:
        # as the daemon binds it (asyncio sets SO_REUSEADDR too): free now means free then
        socket.create_server((web.host, web.port)).close()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return fail(name, f"cannot listen on {where}: {exc.strerror or exc}",
                        "set platforms.web.host to an address of this machine")
        if _homing_answers(web):
            return ok(name, f"{where} is in use by the running homing (its /healthz "
                            f"answers)")
        return fail(name, f"{where} is in use by another program",
                    f"stop that program (ss -ltnp 'sport = :{web.port}' names it), or set "
                    f"another platforms.web.port")
    return ok(name, f"{where} is free")


def _homing_answers(web: WebConfig) -> bool:
    host = f"[{web.host}]" if ":" in web.host else web.host
    request = urllib.request.Request(f"http://{host}:{web.port}/healthz")
    token = secret(web.token)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    # the port is on this machine: never through a proxy
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=_HEALTH_TIMEOUT) as response:
            return response.status == 200 and b'"ok"' in response.read(200)
    except (OSError, urllib.error.URLError):  # refused, timed out, not HTTP
        return False


def _token_check(web: WebConfig) -> Check:
    name = "web token"
    token = secret(web.token)
    if token is None:
        return ok(name, f"none, and none needed: {web.host} takes only this machine's "
                        f"connections")
    if len(token) < SHORT_TOKEN:
        return warn(name, f"{len(token)} characters: short enough to guess",
                    "use a random one of 32 characters: "
                    "python3 -c 'import secrets; print(secrets.token_urlsafe(24))'")
    return ok(name, f"{len(token)} characters")

"""Who may talk to the agent: the one rule. Adapters report facts — the user's id
and name, their Discord roles, the chat — and decide nothing; this decides.
Internal events never pass through here: the runner accepts them only from
inside the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.config.settings import Config
from gateway.messages.pairing import pairing_message
from gateway.words.events import MessageEvent

if TYPE_CHECKING:
    from gateway.cluster.lives import Acting
    from gateway.contract.adapter import Adapter
    from gateway.messages.pairing import Pairing

#: a message's metadata key for the Discord roles its author has (role ids)
ROLES = "roles"


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    #: let in by an ``@username`` entry: the runner pins that name to this user id
    by_username: str | None = None


def authorize(event: MessageEvent, config: Config, *, vouched: bool) -> Verdict:
    """``vouched``: the adapter authenticated the user itself (the web chat behind
    loopback or its token). Otherwise the chat must be one the bot serves
    (``allowed_chats``), and the user on ``allowed_users`` by id or @username, or
    (Discord) hold one of ``allowed_roles``."""
    if vouched:
        return Verdict(True)
    route = event.route
    settings = config.platforms.settings_for(route.platform)  # its own bot's (account's)
    chats = list(getattr(settings, "allowed_chats", None) or [])
    if route.chat_type == "group" and chats and route.chat_id not in chats:
        return Verdict(False)
    allowed = list(getattr(settings, "allowed_users", None) or [])
    if route.user_id is not None and route.user_id in allowed:
        return Verdict(True)
    roles = set(getattr(settings, "allowed_roles", None) or [])
    if roles & {str(r) for r in event.metadata.get(ROLES) or []}:
        return Verdict(True)
    names = {a.lower() for a in allowed if a.startswith("@")}
    name = f"@{route.user_name.lstrip('@')}".lower() if route.user_name else None
    if name is not None and name in names:
        return Verdict(True, by_username=name)
    return Verdict(False)


async def admitted(event: MessageEvent, config: Config, adapter: Adapter | None,
                   pairing: Pairing | None) -> bool:
    """:func:`authorize`, with what the store knows: paired users, and which user id an
    ``@username`` entry belongs to."""
    vouched = adapter is not None and adapter.authenticates_users
    verdict = authorize(event, config, vouched=vouched)
    if verdict.allowed and verdict.by_username is None:
        return True
    if pairing is None:
        return verdict.allowed
    if verdict.by_username is not None:
        # a username can change hands: the first user seen with it keeps it
        return await pairing.pin(event.route.platform, verdict.by_username,
                                 event.route.user_id)
    return await pairing.is_approved(event.route.platform, event.route.user_id)


async def offer_pairing(event: MessageEvent, adapter: Adapter | None,
                        pairing: Pairing | None, acting: Acting) -> None:
    """An unknown user in a direct message may ask to be let in; in groups: silence.
    (Not by a life that is over: a survivor handles that message.)"""
    route = event.route
    if (pairing is None or adapter is None or not adapter.supports_pairing
            or route.chat_type != "dm" or route.user_id is None or not await acting()):
        return
    request = await pairing.request(route.platform, route.user_id, route.user_name, route)
    if request is not None:
        await adapter.send(route, pairing_message(request), kind="system")

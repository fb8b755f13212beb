"""Interactions in the fake Discord: a user's click on a message's button (an
INTERACTION_CREATE on the gateway) and the bot's one answer to it (``POST
/interactions/{id}/{token}/callback``).

Kept apart from the REST handlers because an interaction has a life of its own — an id
and a token, answered exactly once — and its answers touch messages in their own way.
Mixed into :class:`~tests.fakes.discord_server.FakeDiscord`::

    view = discord.ui.View(); view.add_item(discord.ui.Button(label="Approve",
                                                              custom_id="approve:42"))
    message = await channel.send("Run job 42?", view=view)   # components stored
    interaction_id = await fake.press(CHANNEL, message.id, "approve:42")  # on_interaction
    # the bot: await interaction.response.edit_message(content="Approved", view=None)
    await fake.wait_for_interaction_responses(1)   # fake.interaction_responses

Answers as on Discord: type 4 (CHANNEL_MESSAGE_WITH_SOURCE; ``flags`` 64 makes it
ephemeral: only the clicking user sees it, so it is not among the channel's messages),
5 (DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE), 6 (DEFERRED_UPDATE_MESSAGE) and 7
(UPDATE_MESSAGE: the clicked message's content, embeds and components, as given, are
replaced; not recorded in ``edits``, which are PATCHes). discord.py asks
``?with_response=1`` and reads the callback object (``interaction`` and, when a message
was made or updated, ``resource``); without it the answer is 204. An unknown id or a
wrong token is 404/10062 "Unknown interaction", a second answer 400/40060 "Interaction
has already been acknowledged". Other types (modals, autocomplete) are not spoken: 400.
The first answer is due within ``answer_window`` seconds (3, as on Discord); a later
one is 404/10062, as Discord answers an interaction it has given up on.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.discord_components import component_type_of
from tests.fakes.discord_files import SentFile
from tests.fakes.discord_rest import (
    ApiError,
    check_components,
    check_content,
    json_response,
    now_iso,
    public_message,
)

__all__ = ["DiscordInteractions", "InteractionResponseRecord"]

JSON = dict[str, Any]

EPHEMERAL = 64
_ANSWER_TYPES = frozenset({4, 5, 6, 7})
_PERMISSIONS = "2248473465835073"  # what the test guild's roles grant


@dataclass
class InteractionResponseRecord:
    """One accepted ``POST /interactions/{id}/{token}/callback``."""

    id: int  # the interaction's id
    type: int  # the callback type: 4, 5, 6 or 7
    data: JSON = field(default_factory=dict)  # the callback's ``data`` as sent


@dataclass
class _Pressed:
    """An interaction a user started, until (and after) the bot answers it."""

    id: int
    token: str
    channel_id: int
    message_id: int
    user: JSON
    answered: bool = False
    #: when the click was dispatched (the event loop's clock)
    at: float = 0.0


class DiscordInteractions:
    """The interaction half of :class:`~tests.fakes.discord_server.FakeDiscord`."""

    # the state and helpers FakeDiscord keeps for it
    bot_id: int
    bot_user: JSON
    guild_id: int
    upload_limit: int
    _channels: dict[int, JSON]
    _messages: dict[int, JSON]
    _snowflake: Callable[[], int]
    _message: Callable[..., JSON]
    _dispatch: Callable[[str, JSON], Awaitable[None]]
    _read_payload: Callable[[web.Request], Awaitable[tuple[JSON, list[SentFile]]]]
    _wake: Callable[[str], None]
    _wait_for: Callable[[str, int, float], Awaitable[None]]

    def _init_interactions(self) -> None:
        self.interaction_responses: list[InteractionResponseRecord] = []
        self._interactions: dict[int, _Pressed] = {}
        #: seconds a bot has to answer a click (Discord: 3)
        self.answer_window = 3.0
        self._interaction_responses_changed = asyncio.Event()

    # ------------------------------------------------------------------ tests drive

    async def press(self, channel_id: int, message_id: int, custom_id: str, *,
                    user_id: int = 1, username: str = "alice",
                    roles: list[int] | None = None) -> int:
        """A user clicks the component ``custom_id`` on a message: dispatch the
        INTERACTION_CREATE Discord sends (type 3, MESSAGE_COMPONENT) and return the
        interaction's id. The message goes as it stands now; ``custom_id`` need not be
        on it (a stale client can send an old one)."""
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            raise KeyError(f"no message {message_id} in channel {channel_id} to press")
        channel = self._channels[channel_id]
        user = {"id": str(user_id), "username": username, "discriminator": "0",
                "global_name": None, "avatar": None, "bot": False, "public_flags": 0}
        interaction_id = self._snowflake()
        token = f"interaction-{secrets.token_urlsafe(16)}"
        in_guild = "guild_id" in channel
        interaction: JSON = {
            "id": str(interaction_id), "application_id": str(self.bot_id), "type": 3,
            "token": token, "version": 1, "channel_id": str(channel_id),
            "channel": {k: v for k, v in channel.items() if not k.startswith("_")},
            "message": public_message(message),
            "data": {"custom_id": custom_id,
                     "component_type": component_type_of(message["components"], custom_id)},
            "app_permissions": _PERMISSIONS, "locale": "en-US", "entitlements": [],
            "attachment_size_limit": self.upload_limit,
            "context": 0 if in_guild else 1,
            "authorizing_integration_owners": {"0": str(self.guild_id)} if in_guild
            else {"1": str(user_id)}}
        if in_guild:
            interaction["guild_id"] = channel["guild_id"]
            interaction["guild_locale"] = "en-US"
            interaction["member"] = {
                "user": user, "roles": [str(r) for r in roles or []], "joined_at": now_iso(),
                "nick": None, "avatar": None, "premium_since": None, "deaf": False,
                "mute": False, "flags": 0, "pending": False, "permissions": _PERMISSIONS}
        else:
            interaction["user"] = user
        self._interactions[interaction_id] = _Pressed(
            interaction_id, token, channel_id, message_id, user,
            at=asyncio.get_running_loop().time())
        await self._dispatch("INTERACTION_CREATE", interaction)
        return interaction_id

    async def wait_for_interaction_responses(
            self, count: int, timeout: float = 10) -> list[InteractionResponseRecord]:
        """Wait until at least ``count`` interactions were answered; return all answers."""
        await self._wait_for("interaction_responses", count, timeout)
        return list(self.interaction_responses)

    def message_components(self, channel_id: int, message_id: int) -> list[JSON] | None:
        """The current components of a message in that channel; None if deleted or
        unknown."""
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            return None
        return message["components"]

    # ------------------------------------------------------------------ handler

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        interaction_id = int(request.match_info["interaction_id"])
        pressed = self._interactions.get(interaction_id)
        if pressed is None or pressed.token != request.match_info["token"]:
            raise ApiError(404, 10062, "Unknown interaction")
        if pressed.answered:
            raise ApiError(400, 40060, "Interaction has already been acknowledged")
        if asyncio.get_running_loop().time() - pressed.at > self.answer_window:
            raise ApiError(404, 10062, "Unknown interaction")
        payload, _files = await self._read_payload(request)
        kind, data = payload.get("type"), payload.get("data") or {}
        if kind not in _ANSWER_TYPES:
            raise ApiError(400, 50035, "Invalid Form Body", extra={"errors": {"type": {
                "_errors": [{"code": "BASE_TYPE_CHOICES",
                             "message": "The fake answers types 4, 5, 6 and 7 only."}]}}})
        message: JSON | None = None
        if kind == 4:
            message = self._answer_message(pressed, data)
        elif kind == 7:
            message = self._update_message(pressed, data)
        pressed.answered = True
        self.interaction_responses.append(
            InteractionResponseRecord(id=interaction_id, type=kind, data=data))
        self._wake("interaction_responses")
        if request.query.get("with_response", "").lower() not in ("1", "true"):
            return web.Response(status=204)
        callback: JSON = {"interaction": {
            "id": str(interaction_id), "type": 3,
            "response_message_loading": kind == 5,
            "response_message_ephemeral": bool(int(data.get("flags") or 0) & EPHEMERAL)}}
        if message is not None:
            callback["interaction"]["response_message_id"] = message["id"]
            callback["resource"] = {"type": kind, "message": public_message(message)}
        return json_response(callback)

    def _answer_message(self, pressed: _Pressed, data: JSON) -> JSON:
        """Type 4: a new message from the bot in the channel (ephemeral: for the user only)."""
        content = data.get("content")
        components = check_components(data.get("components"))
        check_content(None if content is None else str(content),
                      has_more=bool(data.get("embeds") or components))
        message = self._message(pressed.channel_id, str(content or ""), self.bot_user,
                                mentions=[])
        flags = int(data.get("flags") or 0)
        message.update(embeds=data.get("embeds") or [], components=components, flags=flags,
                       application_id=str(self.bot_id), webhook_id=str(self.bot_id),
                       interaction_metadata={
                           "id": str(pressed.id), "type": 3, "user": pressed.user,
                           "authorizing_integration_owners": {},
                           "interacted_message_id": str(pressed.message_id)})
        if not flags & EPHEMERAL:
            self._messages[int(message["id"])] = message
        return message

    def _update_message(self, pressed: _Pressed, data: JSON) -> JSON:
        """Type 7: the clicked message changes; the fields not given stay."""
        message = self._messages.get(pressed.message_id)
        if message is None:
            raise ApiError(404, 10008, "Unknown Message")
        content = str(data["content"] or "") if "content" in data else message["content"]
        embeds = (data["embeds"] or []) if "embeds" in data else message["embeds"]
        components = check_components(data["components"]) if "components" in data \
            else message["components"]
        check_content(content, has_more=bool(embeds or components or message["attachments"]))
        message.update(content=content, embeds=embeds, components=components,
                       edited_timestamp=now_iso())
        return message

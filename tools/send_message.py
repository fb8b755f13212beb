"""The ``send_message`` tool: post to this conversation or a configured home channel.

The model names a target, never a chat id: "here" is the conversation of the
turn (from the task-local context), anything else must be the name of one of
``agent.home_channels``. There is no way to reach any other chat.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from gateway.config.settings import HomeChannel
from gateway.errors import RefusedInput
from gateway.words.context import current_session
from gateway.words.events import SendResult
from gateway.words.route import Route

log = structlog.get_logger(__name__)

HERE = "here"


class UnknownTarget(RefusedInput, ValueError):
    """The model named a place it may not post to."""


class Poster(Protocol):
    """What send_message asks of the gateway: a message posted to a route."""

    async def post(self, route: Route, text: str) -> SendResult: ...


class MessageSender:
    def __init__(self, runner: Poster, home_channels: list[HomeChannel]) -> None:
        self.runner = runner
        self.homes = {h.name: _route(h) for h in home_channels}

    @property
    def targets(self) -> list[str]:
        return [HERE, *self.homes]

    async def send(self, text: str, target: str,
                   here: Callable[[str], Awaitable[SendResult]]) -> SendResult:
        """Send ``text``; ``here`` posts into the current conversation's transcript."""
        if target == HERE:
            return await here(text)
        route = self.homes.get(target)
        if route is None:
            raise UnknownTarget(f"no target {target!r}; send_message can post to: "
                                f"{', '.join(self.targets)}")
        log.info("send_message_home", target=target, platform=route.platform,
                 from_session_key=current_session().session_key)
        return await self.runner.post(route, text)


def _route(home: HomeChannel) -> Route:
    return Route(platform=home.platform, chat_type=home.chat_type, chat_id=home.chat_id,
                 thread_id=home.thread_id)

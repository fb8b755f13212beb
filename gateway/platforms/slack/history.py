"""What was said while the socket was down, read back from Slack's history.

Socket Mode delivers what happens while it is connected (and Slack retries an event
a few times); whatever a restart or an outage longer than that missed is read from
``conversations.history`` (a channel's or DM's top level) and
``conversations.replies`` (a thread) of every conversation that was active within
``inbound.max_age_seconds`` of the last moment the gateway took a message in — an
older message would not be run anyway. The sessions know those conversations and the
newest message each one handled (its route's reply anchor); what comes after it is
missed. The journal knows every message it has by its platform id, so a message read
back that came live too is taken once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.platforms.slack.api import SlackRefused, WebApi
from gateway.platforms.slack.routes import SpokenMessage, spoken
from gateway.words.route import Route

log = structlog.get_logger(__name__)

#: the most messages read back from one conversation; more are logged as cut
READ_BACK_LIMIT = 1000
_PAGE = 200


@dataclass(frozen=True, slots=True)
class Place:
    """A conversation to read back: a channel's (or DM's) top level, or one thread."""

    channel: str
    thread_ts: str | None
    #: "im" for a DM, else "channel" (what decides a message's route)
    channel_type: str
    #: the ts after which messages are missed
    after: str


def places(routes: Iterable[Route], since: float) -> list[Place]:
    """Where to read back, given the stored routes of conversations active since
    ``since``: each thread, and each channel's top level (after the newest message any
    of its conversations handled)."""
    threads: dict[tuple[str, str], Place] = {}
    tops: dict[str, Place] = {}
    floor = _ts(since)
    for route in routes:
        if route.platform != "slack":
            continue
        kind = "im" if route.chat_type == "dm" else "channel"
        mark = max((t for t in (route.message_id, route.thread_id) if t), key=float,
                   default=floor)
        mark = max(mark, floor, key=float)
        if route.thread_id is not None:
            key = (route.chat_id, route.thread_id)
            known = threads.get(key)
            if known is None or float(mark) > float(known.after):
                threads[key] = Place(route.chat_id, route.thread_id, kind, mark)
        top = tops.get(route.chat_id)
        if top is None or float(mark) > float(top.after):
            tops[route.chat_id] = Place(route.chat_id, None, kind, mark)
    return [*tops.values(), *threads.values()]


async def missed(api: WebApi, where: list[Place], *, bot_user_id: str | None
                 ) -> list[SpokenMessage]:
    """People's messages after each place's mark, oldest first, each once."""
    found: dict[str, SpokenMessage] = {}
    threads = {(p.channel, p.thread_ts) for p in where if p.thread_ts is not None}
    for place in where:
        try:
            if place.thread_ts is None:
                raw = await _read(api, "conversations.history", place, channel=place.channel,
                                  oldest=place.after, limit=_PAGE)
                # a thread begun while we were away, under a message we never saw
                for parent in raw:
                    ts = parent.get("ts")
                    if (parent.get("reply_count") and isinstance(ts, str)
                            and (place.channel, ts) not in threads):
                        raw += [m for m in await _read(
                            api, "conversations.replies", place, channel=place.channel,
                            ts=ts, oldest=place.after, limit=_PAGE) if m.get("ts") != ts]
            else:
                raw = [m for m in await _read(api, "conversations.replies", place,
                                              channel=place.channel, ts=place.thread_ts,
                                              oldest=place.after, limit=_PAGE)
                       if m.get("ts") != place.thread_ts]  # the parent: not a reply
        except SlackRefused as exc:
            log.warning("slack_read_back_failed", channel=place.channel,
                        thread_ts=place.thread_ts, error=str(exc),
                        hint="what was said there while homing was away is not taken in; "
                             "the app needs the conversation's history scope")
            continue
        for message in raw:
            if float(message.get("ts") or 0) <= float(place.after):
                continue
            taken = spoken({**message, "channel": place.channel}, bot_user_id=bot_user_id,
                           channel_type=place.channel_type)
            if taken is not None:
                found.setdefault(taken.platform_id, taken)
    return sorted(found.values(), key=lambda m: float(m.ts))


async def _read(api: WebApi, method: str, place: Place, **params: Any) -> list[dict[str, Any]]:
    messages = await api.pages(method, "messages", limit_items=READ_BACK_LIMIT, **params)
    if len(messages) >= READ_BACK_LIMIT:
        log.warning("slack_read_back_cut", channel=place.channel, thread_ts=place.thread_ts,
                    read=len(messages), hint="only the newest messages missed there were read")
    return messages


def _ts(seconds: float) -> str:
    return f"{seconds:.6f}"

"""Notices that go out together, when a conversation's send budget is short.

Telegram takes about 20 messages a minute into a group: a forum group sent 80
notices a minute, one message each, falls minutes behind. So when the platform's
adapter says the conversation cannot take its waiting notices one by one now
(``Adapter.send_room``: its flood limits, a 429's wait, Discord's rate limit
headers), the router gathers them: one message carries several notices, each whole —
its job id, exit code, duration, the match — in the order they were made, and one
write records all of them as delivered by that one send.

Notices gather only with notices of the same owner: the same kind of delivery (a
late notice of an ended session, labelled, or the live session's), the same session
and the same route — topic and reply anchor. After a ``/new`` the ended session's
notices and the new session's go in messages of their own, each recorded in its own
session's transcript.

Notices that are posted as they are gather: a job's notice under the command agent,
a model agent's own gateway notes, a late notice from an ended session. So do the
model's answers to notices that give it a turn, once the chat is short as their
delivery starts: each notice still gets its own turn, in order, in the owner's lane,
but its answer is held back (``Turn.held``) and goes out with the others, as a notice
would, headed by the notice's own first line. A notice carrying a file goes alone.

A gathering is open while it waits in its conversation's lane with nothing queued
behind it: later notices of the conversation join it there, up to one platform
message, as the platform measures it (the adapter's own splitting, after rendering).
When its turn comes its rows are marked as one message (``merged_into``)
before it is sent, so a crash before the send is recorded sends them together
again, never one by one as well. The rows of held answers are marked only after
every turn of them ran, so a row marked is one whose model had its turn: sent again
(a crash, a refusal) it goes as its notice, in the same message, never as a second
turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway.delivery.notifications import Notification
from gateway.delivery.ownership import DeliverNotice, DeliverTurn
from gateway.words.events import NoticeInfo
from gateway.words.route import Route

#: a notice's delivery, once the ownership rule found its owner
Sendable = DeliverTurn | DeliverNotice


def owner_of(decision: Sendable) -> tuple[bool, str, Route]:
    """Who a message of notices is posted to and recorded for: notices go together
    only when this is the same (one message has one session and one route)."""
    return isinstance(decision, DeliverNotice), decision.session.id, decision.route


@dataclass(frozen=True, slots=True)
class Member:
    """One claimed notification of a delivery, with where it goes."""

    notification: Notification
    decision: Sendable
    #: the router's claim that took it (see ``Router._waits_behind``)
    claim: int

    @property
    def text(self) -> str:
        return notice_text(self.notification, self.decision)


@dataclass(slots=True)
class Delivery:
    """What one turn in a conversation's lane delivers: a notice, or several notices
    that go out together in one message."""

    members: list[Member]
    #: queued in the lane and not started: notices posted as they are may join it
    gathering: bool = False
    #: how many characters the joined text may reach (one platform message, as planned:
    #: the send measures it as the platform does, :func:`in_messages`)
    limit: int = 0
    #: a merged message sent before (its rows' ``merged_into``): its members go
    #: together again, and nothing else joins them
    merged_into: int | None = None
    #: the lane's future for this delivery, while it is queued there
    done: asyncio.Future[object] | None = field(default=None, repr=False)

    @property
    def session_key(self) -> str:
        return self.members[0].notification.session_key

    def takes(self, member: Member) -> bool:
        """Whether ``member`` may join: while it gathers, for the same owner, the same
        merged message sent again, or a fresh one with room for its text."""
        if not self.gathering or owner_of(member.decision) != owner_of(self.members[0].decision):
            return False
        if self.merged_into is not None or member.notification.merged_into is not None:
            return member.notification.merged_into == self.merged_into
        if member.notification.interrupted:
            return False
        # (counted, not rendered: rendering each join would stall the loop under a flood)
        texts = [m.text for m in self.members] + [member.text]
        return len(merged_text(texts)) <= self.limit


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A notice about to be sent: where it goes, and what it says — the notice as it is,
    or the model's answer to it (its turn had, the replies held back to go out here)."""

    notification: Notification
    decision: Sendable
    #: the model's words for it, headed by the notice's first line; None: the notice
    answer: str | None = None

    @property
    def text(self) -> str:
        return (self.answer if self.answer is not None
                else notice_text(self.notification, self.decision))


def in_messages(notices: Sequence[Outgoing], message_count: Callable[[str], int]
                ) -> list[list[Outgoing]]:
    """One owner's ``notices`` in groups that each go out as one message, in order.

    Measured as they are sent, by the platform's own splitting (``message_count``:
    rendered, in its units) with the labels they carry now (a session that ended
    while they waited): a merged message never goes out in two parts, its count in
    the first and some of its notices in the second. Each group is the longest run
    that fits, found in a few measurements rather than one per notice."""
    def fits(group: Sequence[Outgoing]) -> bool:
        return len(group) == 1 or message_count(merged_text([o.text for o in group])) <= 1

    groups: list[list[Outgoing]] = []
    start = 0
    while start < len(notices):
        if fits(notices[start:]):
            end = len(notices)
        else:  # the longest fitting run: more notices only make a longer text
            low, high = start + 1, len(notices)  # fits(start:low), not fits(start:high)
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if fits(notices[start:middle]) else (low, middle)
            end = low
        groups.append(list(notices[start:end]))
        start = end
    return groups


def notice_text(n: Notification, decision: Sendable) -> str:
    """A notice as it is posted: a late one from an ended session says so first."""
    if isinstance(decision, DeliverNotice):
        ended = decision.session
        return (f"[from an ended session {ended.id[:8]} ({ended.end_reason or 'ended'}); "
                f"it was not reopened]\n{n.text}")
    return n.text


def merged_text(texts: Sequence[str]) -> str:
    """Several notices in one message, each whole, in their order."""
    return "\n\n".join([f"{len(texts)} notices at once (sending here is rate-limited):",
                        *texts])


def merged_info(notifications: Sequence[Notification]) -> NoticeInfo:
    """What the merged message reports: failed when one of its notices does."""
    failed = any(n.outcome == "failed" for n in notifications)
    return NoticeInfo("merged", "failed" if failed else None)

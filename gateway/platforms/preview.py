"""Replies that grow in place: a preview message edited while the model writes,
then made the final message.

One rule for every platform that edits messages (Telegram, Discord). The
preview is best effort: throttled, skipped while flood control is tight, and
dropped at the first sign of trouble. The final text is what counts, and it
exists once: it is the preview itself, edited a last time — an edit is
idempotent, so retrying it never makes a second copy — or, only when the
preview is gone or could never be edited, a message of its own (the preview
then deleted). A long reply's first part takes the preview's place; the rest
follow as messages of their own.

A preview shows the reply as it will look: the text so far, its unfinished
Markdown made safe to show (``formatting.preview``), through the renderer the
final message goes through, so the last preview and the final message differ only
by what was still being written.

Each turn has its own preview, keyed by nothing: two topics of one chat
streaming at once never touch each other's message.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from gateway.errors import PlatformError
from gateway.formatting.preview import preview_markdown, status_markdown
from gateway.formatting.splitter import split_message
from gateway.retry import RetryPolicy
from gateway.words.events import MessageKind, SendResult
from gateway.words.route import Route

log = structlog.get_logger(__name__)

#: how often the final edit is tried before the text goes as its own message
#: the final edit and the delete must get through: tried this patiently
FINAL = RetryPolicy((0.5, 1.0, 2.0, 4.0), attempts=5)
#: the longest "retry after" the final edit waits out, each time
_MAX_WAIT = 60.0
#: a preview still being written ends with this
WRITING = " …"
#: a reply (or a tool's status) written faster than this is sent whole, with no preview
#: to flash by and no edit to spend flood control on
FIRST_PREVIEW_AFTER = 0.5


class PartsSender(Protocol):
    """What a preview needs of its adapter besides its own requests."""

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   ) -> SendResult: ...

    async def send_parts(self, route: Route, parts: list[str]) -> SendResult: ...


@dataclass(frozen=True, slots=True)
class Draft:
    """A preview as it goes to the platform: ``markup``, its rendered Markdown ending
    with ``suffix``, and ``source``, the Markdown as written without it, for when the
    platform cannot parse the markup (whatever makes it fit a message cuts ``source``,
    and ``suffix`` is put after: a preview still being written ends with it)."""

    markup: str
    source: str
    suffix: str


class PreviewGone(PlatformError):
    """The preview message no longer exists (deleted by someone, or never made)."""


class PreviewRefused(PlatformError):
    """The platform refuses this edit for good (asking again would not help)."""


class PreviewRateLimited(PlatformError):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"retry after {seconds:g} s")
        self.seconds = seconds


class EditedPreview(ABC):
    """One turn's preview on a platform that edits messages.

    ``show`` and ``status`` never wait on the platform: a flusher task posts
    or edits the latest text, at most every ``interval`` seconds. ``finish``
    and ``close`` take over from it.
    """

    def __init__(self, adapter: PartsSender, route: Route, *, limit: int, interval: float,
                 measure: Callable[[str], int] = len) -> None:
        self.adapter = adapter
        self.route = route
        self.limit = limit
        self.interval = interval
        self.measure = measure
        self._lock = asyncio.Lock()  # one platform request at a time
        self._message_id: str | None = None
        # (text, suffix) the preview is to show, and the last it showed
        self._wanted: tuple[str, str] | None = None
        self._shown: tuple[str, str] | None = None
        self._shown_markup: str | None = None
        self._next_at = 0.0
        self._broken = False  # this message's preview failed: no more tries until it is final
        self._closing = False  # finish or close is under way: the flusher stands back
        self._flusher: asyncio.Task[None] | None = None

    # the platform's part -------------------------------------------------------

    @abstractmethod
    async def _post(self, draft: Draft) -> str:
        """Post a new preview; its message id."""

    @abstractmethod
    async def _edit_draft(self, message_id: str, draft: Draft) -> None:
        """Edit the preview to a newer draft, skipping rather than waiting for flood
        control. Raises as ``_edit`` does."""

    @abstractmethod
    async def _edit(self, message_id: str, text: str) -> None:
        """Edit the preview into a part of the final text (from ``_split``), waiting for
        flood control; no error when the text is already that. Raise PreviewGone,
        PreviewRefused, PreviewRateLimited, or anything else for a failure that may pass."""

    async def _edit_last(self, message_id: str, text: str, dedupe_key: str | None) -> None:
        """The final edit (``_edit``); a platform that can make the same request twice
        count once, and tell later that it landed (Matrix's txnId), keys it by
        ``dedupe_key``."""
        await self._edit(message_id, text)

    @abstractmethod
    async def _delete(self, message_id: str) -> None:
        """Delete the preview (waiting for flood control); PreviewGone when it is not there,
        PreviewRefused when it is there and may not be deleted."""

    async def _send(self, text: str, kind: MessageKind, session_id: str | None,
                    dedupe_key: str | None) -> SendResult:
        """The adapter's own send, for a final text that has no preview to take."""
        return await self.adapter.send(self.route, text, kind=kind, session_id=session_id,
                                       dedupe_key=dedupe_key)

    async def _send_parts(self, parts: list[str], kind: MessageKind) -> SendResult:
        """Parts after the first, after the preview took the first."""
        return await self.adapter.send_parts(self.route, parts)

    def _split(self, text: str) -> list[str]:
        """The final text as the platform's messages (the first takes the preview's place)."""
        return split_message(text, self.limit, self.measure)

    def _may_preview(self) -> bool:
        """Whether flood control has room for a preview request right now (counting it)."""
        return True

    def _render(self, markdown: str) -> str:
        """A preview's Markdown as the platform's message: the final message's renderer."""
        return markdown

    def _rendered_size(self, markup: str) -> int:
        """How long a rendered preview is, as the platform counts a message's length."""
        return self.measure(markup)

    # the turn's part -----------------------------------------------------------

    async def show(self, text: str) -> None:
        """The reply so far (the whole of it)."""
        self._want(text.rstrip(), WRITING)

    async def status(self, text: str) -> None:
        """What the turn is doing, in the preview until the next words replace it; as
        written, but for its command in backticks, which shows as code."""
        self._want(status_markdown(text), "")

    async def finish(self, text: str, *, kind: MessageKind, session_id: str | None,
                     dedupe_key: str | None = None) -> SendResult:
        """The final message: the preview, edited a last time, or a message of its own."""
        self._closing = True  # the flusher makes no new request from now on
        async with self._lock:
            self._stop_flusher()
            self._wanted = self._shown = None
            message_id = self._message_id
            if message_id is None:
                self._reset()
                return await self._send(text, kind, session_id, dedupe_key)
            parts = self._split(text) or [text]
            # the preview stays ours until its edit is through: a turn cancelled meanwhile
            # (/stop) leaves it to close(), which deletes it
            edited = await self._edit_final(message_id, parts[0], dedupe_key)
            if edited is None and not await self._drop(message_id):
                # neither edited nor deleted: a copy of its own would make two
                self._reset()
                log.error("preview_stuck", message_id=message_id)
                return SendResult.failed("the reply's preview could be neither edited nor "
                                         "deleted", permanent=True, route_gone=False)
            self._reset()
            if not edited:
                return await self._send(text, kind, session_id, dedupe_key)
            self._next_at = time.monotonic() + self.interval
            if len(parts) == 1:
                return SendResult.sent(message_id)
            return await self._send_parts(parts[1:], kind)

    async def close(self) -> None:
        """The turn is over: a preview that did not become a message goes away."""
        self._closing = True
        async with self._lock:
            self._stop_flusher()
            message_id = self._message_id
            self._reset()
            if message_id is not None:
                await self._drop(message_id)

    # inside --------------------------------------------------------------------

    def _draft(self, text: str, suffix: str) -> Draft | None:
        """``text`` as a preview ending with ``suffix``: rendered as the final message
        will be, as much of its start as one message holds; None while none of it can
        be shown yet."""
        room = self.limit - self.measure(suffix)
        source = self._fit(text, room)
        while True:
            markup = self._render(preview_markdown(source))
            # rendering can lengthen it (a table's padded columns): cut it in proportion
            size = self._rendered_size(markup)
            if size <= room:
                break
            source = source[:min(len(source) - 1, len(source) * room // size)]
        if not markup.strip():
            return None
        return Draft(markup + suffix, source, suffix)

    def _fit(self, text: str, room: int) -> str:
        """As much of the start as ``room`` holds (each character counts one or more)."""
        while self.measure(text) > room:
            text = text[:max(1, len(text) - (self.measure(text) - room))]
        return text

    def _want(self, text: str, suffix: str) -> None:
        if self._broken or not text.strip():
            return
        if self._wanted is None and self._message_id is None:
            self._next_at = max(self._next_at, time.monotonic() + FIRST_PREVIEW_AFTER)
        self._wanted = (text, suffix)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="preview")

    async def _flush(self) -> None:
        while self._wanted is not None and self._wanted != self._shown:
            delay = self._next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            async with self._lock:
                await self._flush_once()

    async def _flush_once(self) -> None:
        wanted = self._wanted
        if wanted is None or self._broken or self._closing or wanted == self._shown:
            self._wanted = None if self._broken or self._closing else self._wanted
            return
        # rendered at most once an interval, whether or not it makes a request
        self._next_at = time.monotonic() + self.interval
        draft = self._draft(*wanted)
        if draft is None or draft.markup == self._shown_markup:
            self._shown = wanted  # what changed is still held back: no request for it
            return
        if not self._may_preview():
            return  # flood control is tight: the messages that count go first
        try:
            if self._message_id is None:
                self._message_id = await self._post(draft)
            else:
                await self._edit_draft(self._message_id, draft)
            self._shown, self._shown_markup = wanted, draft.markup
        except PreviewRateLimited as exc:
            self._next_at = time.monotonic() + exc.seconds
        except PreviewGone:
            log.info("preview_gone", message_id=self._message_id)
            self._message_id, self._broken = None, True
        except PreviewRefused as exc:
            # there, but not to be edited any more: no more previews, and the final text
            # still has to edit or delete it (a copy beside it would make two)
            log.info("preview_refused", message_id=self._message_id, error=str(exc)[:200])
            self._broken = True
        except Exception as exc:
            if self._message_id is None:
                # a post that failed (or may have failed): no more previews for this
                # message, and the final text goes as its own
                self._broken = True
            log.info("preview_failed", error=str(exc)[:200], posted=self._message_id is not None)

    async def _edit_final(self, message_id: str, text: str, dedupe_key: str | None
                          ) -> bool | None:
        """True: edited; False: the preview is gone; None: it could not be edited."""
        return await self._patiently(lambda: self._edit_last(message_id, text, dedupe_key),
                                     "final_edit", message_id)

    async def _drop(self, message_id: str) -> bool:
        """Delete the preview; True when it is known to be gone."""
        return await self._patiently(lambda: self._delete(message_id), "delete",
                                     message_id) is not None

    async def _patiently(self, step: Callable[[], Awaitable[None]], what: str,
                         message_id: str) -> bool | None:
        """A step that must get through (the final edit, the delete), retried: True when
        it did, False when the preview is gone, None when it could not be done."""
        for attempt in FINAL.tries():
            try:
                await step()
                return True
            except PreviewGone:
                return False
            except PreviewRefused as exc:
                log.warning(f"preview_{what}_refused", message_id=message_id, error=str(exc))
                return None
            except PreviewRateLimited as exc:
                wait = min(exc.seconds, _MAX_WAIT)
            except Exception as exc:
                wait = FINAL.delay(attempt)
                log.warning(f"preview_{what}_failed", message_id=message_id,
                            error=str(exc)[:200], retry_in=wait)
            if not FINAL.is_last(attempt):
                await asyncio.sleep(wait)
        return None

    def _stop_flusher(self) -> None:
        # called holding the lock: the flusher is asleep or waiting for the lock, never
        # mid-request, so cancelling it cannot lose track of a posted preview
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None

    def _reset(self) -> None:
        """Ready for the turn's next reply (the edit interval still holds)."""
        self._message_id = self._wanted = self._shown = self._shown_markup = None
        self._broken = self._closing = False

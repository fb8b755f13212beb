"""Approvals on Telegram: the request as a message with three buttons under the message
that started the turn, a tap (a callback query) decided by the core and answered once,
and the outcome edited into the request, taking its keyboard away.

A tap is decided while the poll still holds its update, so a crash before the
decision is recorded lets Telegram hand the tap out again; the core decides an
approval only once, so a tap handed out twice is answered "already settled".
The core shows an outcome in a task of its own and waits for it only briefly,
so a flood wait in one chat does not hold up the poll, which serves every chat.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from telegram import Bot, CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from gateway.contract.approval import CHOICES, ApprovalRecord, Decision, button_data, parse_button
from gateway.formatting.telegram_html import HtmlOrPlain, message_parts, plain_fallback
from gateway.formatting.telegram_html import render as render_html
from gateway.platforms.telegram.bot import TelegramBot
from gateway.platforms.telegram.taps import answer_tap
from gateway.retry import RetryPolicy
from gateway.store.group_commit import StoreClosed
from gateway.words.events import SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.approval import Pressed

__all__ = ["ApprovalButtons", "Presses"]

log = structlog.get_logger(__name__)


#: room kept in the request's last message for the outcome line edited in later
_OUTCOME_ROOM = 400
EDIT = RetryPolicy((1.0, 2.0, 5.0), attempts=4)


class Presses(Protocol):
    """What a tap needs of the approvals: one decision, made once."""

    async def press(self, approval_id: str, decision: Decision, *, platform: str,
                    user_id: str | None, user_name: str | None = None) -> Pressed: ...


class ApprovalButtons:
    """The Telegram side of approvals, for one adapter: asking, answering taps, and
    showing outcomes."""

    def __init__(self, adapter: TelegramBot) -> None:
        self.adapter = adapter

    # asking ------------------------------------------------------------------

    async def ask(self, route: Route, record: ApprovalRecord) -> SendResult:
        """The request under the message that started the turn, the buttons on its last
        part (a long command takes more than one message)."""
        try:
            result = await self.adapter.send_parts(route, self._request_parts(record),
                                                   keyboard=_keyboard(record))
        except TelegramError as exc:  # what the send path does not turn into a result
            return SendResult.failed(f"rejected by Telegram: {exc}")
        return result

    def _request_parts(self, record: ApprovalRecord, *, settled: bool = False) -> list[str]:
        return message_parts(record.request_text(settled=settled),
                             self.adapter.message_limit - _OUTCOME_ROOM)

    # showing the outcome -----------------------------------------------------

    async def settle(self, route: Route, record: ApprovalRecord) -> None:
        """The request's last part plus the outcome line, with no keyboard (an edit
        without ``reply_markup`` takes it away). The core waits only briefly for this
        (a flood wait in one chat must not hold up a tap's poll) and lets it finish."""
        if record.message_id is None:
            log.info("telegram_approval_outcome_not_shown", approval_id=record.id,
                     reason="the request was never posted")
            return
        await self._show_outcome(route, record, record.message_id)

    async def _show_outcome(self, route: Route, record: ApprovalRecord,
                            message_id: str) -> None:
        """The request's last part plus the outcome line, with no keyboard (an edit
        without ``reply_markup`` takes it away). Errors are logged: the decision
        stands, and a tap on a stale button is answered "already settled"."""
        bound = log.bind(approval_id=record.id, chat_id=route.chat_id, message_id=message_id)
        text = f"{self._request_parts(record, settled=True)[-1]}\n\n{record.outcome_text()}"
        formatted = HtmlOrPlain(render_html(text), plain_fallback(text))
        flow, group = self.adapter.flow, route.chat_type == "group"

        async def admit() -> None:
            await flow.admit(route.chat_id, group=group)

        for attempt in EDIT.tries():
            bot = self._bot()
            if bot is None:
                bound.warning("telegram_approval_outcome_not_shown",
                              reason="telegram is not connected")
                return
            await admit()
            try:
                await formatted.send(functools.partial(
                    bot.edit_message_text, chat_id=int(route.chat_id),
                    message_id=int(message_id)), admit)
                return
            except RetryAfter as exc:
                flow.pause(route.chat_id, _seconds(exc.retry_after))
            except BadRequest as exc:
                if "not modified" not in exc.message.lower():  # else an earlier try took
                    bound.warning("telegram_approval_outcome_not_shown", error=exc.message)
                return
            except NetworkError as exc:
                bound.warning("telegram_approval_outcome_retry", error=str(exc))
                await EDIT.pause(attempt)
            except TelegramError as exc:
                bound.warning("telegram_approval_outcome_not_shown", error=str(exc))
                return
        bound.warning("telegram_approval_outcome_not_shown",
                      reason=f"Telegram did not take the edit in {EDIT.attempts} tries")

    # taps ----------------------------------------------------------------------

    async def on_press(self, query: CallbackQuery, approvals: Presses | None) -> bool:
        """A tap on a button; False when the store could not record it, so the poll asks
        Telegram for it again (it is answered only once it is decided)."""
        if query.message is None or not query.data:
            log.warning("telegram_callback_query_skipped", query_id=query.id,
                        reason="no message" if query.message is None else "no data")
            return True
        chosen = parse_button(query.data)
        if chosen is None:
            await self._answer(query, "This button does nothing any more.")
            return True
        if approvals is None:
            await self._answer(query, "Nothing here asks for approval.")
            return True
        return await self._decide(query, approvals, *chosen)

    async def _decide(self, query: CallbackQuery, approvals: Presses, approval_id: str,
                      decision: Decision) -> bool:
        user = query.from_user
        try:
            pressed = await approvals.press(approval_id, decision,
                                            platform=self.adapter.platform,
                                            user_id=str(user.id),
                                            user_name=user.username or user.first_name)
        except (sqlite3.Error, StoreClosed) as exc:
            log.warning("telegram_approval_press_not_recorded", approval_id=approval_id,
                        query_id=query.id, error=str(exc),
                        hint="the tap is asked for again once the store is back")
            return False
        except Exception:  # a bug must not stop the poll, which serves every chat
            log.exception("telegram_approval_press_failed", approval_id=approval_id,
                          query_id=query.id)
            await self._answer(query, f"That did not work; try /approve {approval_id} or "
                                      f"/deny {approval_id}.", alert=True)
            return True
        await self._answer(query, pressed.note, alert=not pressed.ok)
        return True

    async def _answer(self, query: CallbackQuery, note: str, *, alert: bool = False) -> None:
        await answer_tap(self._bot(), query, note, alert=alert)

    # lifecycle -----------------------------------------------------------------

    def _bot(self) -> Bot | None:
        app = self.adapter.app
        return app.bot if app is not None and self.adapter.connected else None


def _keyboard(record: ApprovalRecord) -> InlineKeyboardMarkup:
    """One choice a row: "Approve for this session" does not fit beside the others on a
    phone."""
    return InlineKeyboardMarkup([[InlineKeyboardButton(label, callback_data=button_data(
        record.id, decision))] for decision, label in CHOICES])


def _seconds(value: Any) -> float:
    return float(value.total_seconds()) if hasattr(value, "total_seconds") else float(value)

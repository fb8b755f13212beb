"""Approval requests on Slack: a Block Kit message with three buttons in the turn's
thread, updated in place (``chat.update``) into its outcome, and the presses that
decide it.

A press comes over Socket Mode as a ``block_actions`` envelope; the adapter acks it at
once (Slack wants that within three seconds) and then hands it here. A button's
``action_id`` carries all it needs (``ap:<id>:<o|s|d>``), so a request posted before a
restart is still answered; who may decide is the core's rule (``Approvals.press``).
A press that is refused (someone else's request, already settled) is told to the one
who pressed, privately (``chat.postEphemeral``); an accepted one is shown to everyone
by the outcome update.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from gateway.contract.approval import (
    CHOICES,
    ApprovalRecord,
    Decision,
    Pressed,
    button_data,
    parse_button,
)
from gateway.formatting.mrkdwn import render
from gateway.platforms.slack.api import SlackRefused, WebApi
from gateway.platforms.slack.presses import Press, press_of
from gateway.words.events import SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.platforms.flow import FlowControl

__all__ = ["ButtonPress", "Presses", "answer_press", "post_request", "request_blocks",
           "show_outcome"]

log = structlog.get_logger(__name__)

#: a section block's text holds at most 3000 characters
SECTION_LIMIT = 3000
_STYLES: dict[Decision, str | None] = {"once": "primary", "session": None, "deny": "danger"}


class Presses(Protocol):
    """What a press needs of the core: one call (``gateway.approvals.decisions.Approvals``)."""

    async def press(self, approval_id: str, decision: Decision, *, platform: str,
                    user_id: str | None, user_name: str | None = None) -> Pressed: ...


@dataclass(frozen=True, slots=True)
class ButtonPress:
    """One press of an approval button: what it decides, and the press itself."""

    approval_id: str
    decision: Decision
    press: Press


def button_press(payload: dict[str, Any]) -> ButtonPress | None:
    """The approval button pressed in ``payload``; None for anything else (another app
    part's buttons, a choice's, a select, a press without its message)."""
    press = press_of(payload)
    parsed = parse_button(press.action_id) if press is not None else None
    if press is None or parsed is None:
        return None
    return ButtonPress(parsed[0], parsed[1], press)


async def post_request(api: WebApi | None, flow: FlowControl, route: Route,
                       record: ApprovalRecord) -> SendResult:
    """The request with its buttons in the route's thread (or channel, or DM)."""
    if api is None:
        return SendResult.failed("slack is not connected")
    text, blocks = request_blocks(record)
    async with flow.chat(route.chat_id):
        await flow.admit(route.chat_id, group=True)
        try:
            data = await api.call("chat.postMessage", channel=route.chat_id,
                                  thread_ts=route.thread_id, text=text, blocks=blocks,
                                  link_names=False, unfurl_links=False)
        except SlackRefused as exc:
            return SendResult.failed(f"slack refused the approval request: {exc}",
                                     retry_after=exc.retry_after, permanent=exc.permanent,
                                     route_gone=exc.route_gone)
    return SendResult.sent(str(data.get("ts")))


async def show_outcome(api: WebApi | None, flow: FlowControl, route: Route,
                       record: ApprovalRecord) -> None:
    """Update the request into its outcome, buttons gone. Best effort: the decision stands
    whether or not it is shown, so a failure is logged for the operator, not raised."""
    if record.message_id is None:
        return  # never posted (or its ts not recorded): nothing to update
    where = log.bind(approval_id=record.id, channel=route.chat_id, ts=record.message_id)
    if api is None:
        where.warning("slack_approval_outcome_not_shown", error="slack is not connected")
        return
    text, blocks = request_blocks(record, record.outcome_text())
    await flow.admit(route.chat_id, group=True)  # an update has no place in the order
    try:
        await api.call("chat.update", channel=route.chat_id, ts=record.message_id,
                       text=text, blocks=blocks, link_names=False)
    except SlackRefused as exc:
        where.warning("slack_approval_outcome_not_shown", error=str(exc),
                      hint="the decision stands; its buttons stay on the message, and a "
                           "press on them is told it is already settled")


async def answer_press(button: ButtonPress, approvals: Presses | None,
                       api: WebApi | None) -> None:
    """Decide, then tell a refused presser why (an accepted press shows in the update)."""
    press = button.press
    click = log.bind(approval_id=button.approval_id, decision=button.decision,
                     user_id=press.user_id)
    if approvals is None:
        pressed = Pressed(False, "Approvals are off in this gateway: nothing waits here.")
    else:
        try:
            pressed = await approvals.press(button.approval_id, button.decision,
                                            platform="slack", user_id=press.user_id,
                                            user_name=press.user_name)
        except Exception:
            click.exception("slack_approval_press_failed")
            pressed = Pressed(False, f"Your choice could not be recorded. Try again, or "
                                     f"answer with /approve {button.approval_id} or "
                                     f"/deny {button.approval_id}.")
    if pressed.ok or api is None:
        return
    try:
        await api.call("chat.postEphemeral", channel=press.channel, user=press.user_id,
                       thread_ts=press.thread_ts, text=render(pressed.note),
                       link_names=False)
    except SlackRefused as exc:
        click.warning("slack_approval_press_not_answered", error=str(exc))


def request_blocks(record: ApprovalRecord, outcome: str | None = None
                   ) -> tuple[str, list[dict[str, Any]]]:
    """The request as a message's text (for notifications) and its blocks: the request
    in a section, then its buttons, or once decided the outcome line in their place.

    A section holds 3000 characters: a command too long is cut, with a note, so the
    request and its update show the same cut."""
    text = _request_text(record, settled=outcome is not None)
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    if outcome is None:
        blocks.append({"type": "actions", "block_id": f"approval-{record.id}",
                       "elements": [_button(record.id, decision, label)
                                    for decision, label in CHOICES]})
        return text, blocks
    line = render(outcome)[:SECTION_LIMIT]
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": line}]})
    return f"{text}\n{line}", blocks


def _request_text(record: ApprovalRecord, *, settled: bool) -> str:
    keep = len(record.command)
    while True:
        shown, note = record, ""
        if keep < len(record.command):
            shown = replace(record, command=record.command[:keep])
            note = (f"\n(The command above is cut: {len(record.command) - keep} more "
                    f"characters; `homing approvals --json` shows it whole.)")
        text = render(shown.request_text(settled=settled) + note)
        over = len(text) - SECTION_LIMIT
        if over <= 0 or keep == 0:
            return text[:SECTION_LIMIT]
        keep = max(0, keep - over)


def _button(approval_id: str, decision: Decision, label: str) -> dict[str, Any]:
    data = button_data(approval_id, decision)
    button: dict[str, Any] = {"type": "button", "action_id": data, "value": data,
                              "text": {"type": "plain_text", "text": label}}
    style = _STYLES[decision]
    if style is not None:
        button["style"] = style
    return button

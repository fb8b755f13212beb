"""Approval requests on Discord: a message with three buttons under the message that
started the turn, edited in place into its outcome, and the clicks that decide it.

Clicks are taken in ``on_interaction`` for every message, never through discord.py's
view store (our views are stopped before they are sent), so a request posted before a
restart is still answered. A button's custom id carries all it needs
(``ap:<id>:<o|s|d>``); who may decide is the core's rule (``Approvals.press``) and is
not checked here. Each click is answered exactly once, as Discord wants within three
seconds: a refusal privately, to the one who clicked; an accepted choice as a deferred
update, because the outcome edit (``show_outcome``) shows it to everyone in place.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import discord
import structlog

from gateway.contract.approval import (
    CHOICES,
    ApprovalRecord,
    Decision,
    Pressed,
    button_data,
    parse_button,
)
from gateway.formatting.discord_text import MESSAGE_LIMIT, NO_MENTIONS, render
from gateway.platforms.discord.clicks import answer_once
from gateway.words.events import SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.platforms.flow import FlowControl

__all__ = ["Presses", "answer_click", "post_request", "request_content", "show_outcome"]

log = structlog.get_logger(__name__)

#: room kept under a request for its outcome line, so the edit fits one message too
_OUTCOME_ROOM = 300
_STYLES: dict[Decision, discord.ButtonStyle] = {
    "once": discord.ButtonStyle.success, "session": discord.ButtonStyle.primary,
    "deny": discord.ButtonStyle.danger}


class Presses(Protocol):
    """What a click needs of the core: one call (``gateway.approvals.decisions.Approvals``)."""

    async def press(self, approval_id: str, decision: Decision, *, platform: str,
                    user_id: str | None, user_name: str | None = None) -> Pressed: ...


async def post_request(client: discord.Client | None, flow: FlowControl, route: Route,
                       record: ApprovalRecord) -> SendResult:
    """The request with its buttons in the route's channel or thread, as a reply to the
    message that started the turn. HTTP errors come back as a failed result."""
    if client is None or client.is_closed():
        return SendResult.failed("discord is not connected")
    channel = client.get_partial_messageable(int(route.chat_id))
    reference = None
    if route.message_id is not None:
        reference = discord.MessageReference(
            message_id=int(route.message_id), channel_id=int(route.chat_id),
            fail_if_not_exists=False)
    view = _buttons(record.id)
    view.stop()  # a finished view is not kept in discord.py's store: answer_click answers
    async with flow.chat(route.chat_id):
        await flow.admit(route.chat_id, group=False)
        try:
            extra: dict[str, Any] = {"reference": reference} if reference is not None else {}
            message = await channel.send(request_content(record), view=view,
                                         allowed_mentions=NO_MENTIONS, **extra)
        except (discord.Forbidden, discord.NotFound) as exc:
            return SendResult.failed(f"route gone: {exc.text}", permanent=True)
        except discord.HTTPException as exc:
            return SendResult.failed(f"discord refused the approval request: {exc.text}",
                                     permanent=exc.status == 400, route_gone=False)
        except (TimeoutError, OSError) as exc:
            return SendResult.failed(f"discord send failed: {exc}")
    return SendResult.sent(str(message.id))


async def show_outcome(client: discord.Client | None, flow: FlowControl, route: Route,
                       record: ApprovalRecord) -> None:
    """Edit the request into its outcome, buttons gone. Best effort: the decision stands
    whether or not it is shown, so a failure is logged for the operator, not raised."""
    if record.message_id is None:
        return  # never posted (or its id not recorded): nothing to edit
    where = log.bind(approval_id=record.id, channel_id=route.chat_id,
                     message_id=record.message_id)
    if client is None or client.is_closed():
        where.warning("discord_approval_outcome_not_shown", error="discord is not connected")
        return
    message = client.get_partial_messageable(int(route.chat_id)).get_partial_message(
        int(record.message_id))
    # an edit has no place in the channel's order: admitted against the limits only
    await flow.admit(route.chat_id, group=False)
    try:
        await message.edit(content=request_content(record, record.outcome_text()),
                           view=None, allowed_mentions=NO_MENTIONS)
    except (discord.HTTPException, TimeoutError, OSError) as exc:
        where.warning("discord_approval_outcome_not_shown", error=str(exc),
                      hint="the decision stands; its buttons stay on the message, and a "
                           "click on them is told it is already settled")


async def answer_click(interaction: discord.Interaction, approvals: Presses | None) -> None:
    """A click on an approval button: decide, then answer the interaction once. Other
    interactions are left alone, unanswered: another part of a bot may own them."""
    if interaction.type != discord.InteractionType.component:
        return
    data: dict[str, Any] = dict(interaction.data or {})
    custom_id = data.get("custom_id")
    parsed = parse_button(custom_id) if isinstance(custom_id, str) else None
    if parsed is None:
        return
    approval_id, decision = parsed
    user = interaction.user
    click = log.bind(approval_id=approval_id, decision=decision, user_id=user.id,
                     interaction_id=interaction.id)
    if approvals is None:
        pressed = Pressed(False, "Approvals are off in this gateway: nothing waits here.")
    else:
        try:
            pressed = await approvals.press(approval_id, decision, platform="discord",
                                            user_id=str(user.id), user_name=user.name)
        except Exception:
            # unanswered, the click would show "This interaction failed" and nothing else
            click.exception("discord_approval_press_failed")
            pressed = Pressed(False, f"Your choice could not be recorded. Try again, or "
                                     f"answer with /approve {approval_id} or "
                                     f"/deny {approval_id}.")
    await _answer(interaction, pressed, click)


def request_content(record: ApprovalRecord, outcome: str | None = None) -> str:
    """The request as one Discord message, with its outcome line once decided.

    The buttons sit under the message, so the whole request must be in it: a command too
    long is cut, with a note, always leaving room for the outcome line (so the request
    and its edit show the same cut)."""
    tail = f"\n{outcome}" if outcome else ""
    reserve = max(len(render(tail)), _OUTCOME_ROOM)
    keep = len(record.command)
    while True:
        shown, note = record, ""
        if keep < len(record.command):
            shown = replace(record, command=record.command[:keep])
            note = (f"\n(The command above is cut: {len(record.command) - keep} more "
                    f"characters; `homing approvals --json` shows it whole.)")
        text = render(shown.request_text(settled=outcome is not None) + note)
        over = len(text) + reserve - MESSAGE_LIMIT
        if over <= 0 or keep == 0:
            return (text + render(tail))[:MESSAGE_LIMIT]
        keep = max(0, keep - over)


def _buttons(approval_id: str) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    for decision, label in CHOICES:
        view.add_item(discord.ui.Button(label=label, style=_STYLES[decision],
                                        custom_id=button_data(approval_id, decision)))
    return view


async def _answer(interaction: discord.Interaction, pressed: Pressed,
                  click: structlog.typing.FilteringBoundLogger) -> None:
    if pressed.ok:  # type 6: the message is edited in place
        await answer_once(interaction.response.defer, click,
                          "discord_approval_click_not_answered")
    else:
        await answer_once(lambda: interaction.response.send_message(
            pressed.note, ephemeral=True, allowed_mentions=NO_MENTIONS), click,
            "discord_approval_click_not_answered")

"""What ``homing doctor`` asks Telegram with the bot's token: the token (getMe); privacy
mode where groups are used; each group listed in ``allowed_chats`` — the bot in it and
allowed to post (see :func:`_group_check` for the rule); the webhook — in webhook mode
Homing's own, what waits for it and Telegram's last error delivering it, with the fix;
in polling mode one left set by another tool; another process polling the token."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gateway.config.settings import secret
from gateway.platforms.checks import Check, DoctorContext, fail, ok, skip, token_failure, warn
from gateway.platforms.probe import ProbeError
from gateway.platforms.telegram.settings import TelegramConfig

if TYPE_CHECKING:  # python-telegram-bot is imported only when Telegram is enabled
    from gateway.platforms.telegram.probe import BotProfile, TelegramProbe, WebhookState

_PRIVACY_FIX = ("disable privacy mode with @BotFather /setprivacy, then remove and re-add the "
                "bot to the group")


async def checks(settings: TelegramConfig, context: DoctorContext) -> list[Check]:
    """The registry's way in (gateway/platforms/telegram/spec.py)."""
    return await telegram_checks(settings, context.daemon_pid)


async def telegram_checks(settings: TelegramConfig, daemon_pid: int | None) -> list[Check]:
    from gateway.platforms.telegram.probe import TelegramProbe

    groups = [int(c) for c in settings.allowed_chats if c.lstrip("-").isdigit() and int(c) < 0]
    try:
        async with TelegramProbe(secret(settings.token) or "", settings.base_url,
                                 settings.base_file_url) as probe:
            profile = probe.profile
            checks = [ok("telegram token", f"@{profile.username} (id {profile.id}) at "
                                           f"{probe.host}")]
            webhook, webhook_set = await _webhook_check(probe, settings, daemon_pid)
            group_checks = [await _group_check(probe, chat_id) for chat_id in groups]
            admin_in = {chat_id for chat_id, (_, admin) in zip(groups, group_checks,
                                                                strict=True) if admin}
            checks.append(_privacy_check(profile, groups, admin_in))
            checks += [check for check, _ in group_checks]
            checks.append(webhook)
            if settings.mode == "webhook":
                checks.append(skip("telegram polling", "webhook mode: Telegram posts the "
                                                       "updates, nothing polls"))
            else:
                checks.append(await _polling_check(probe, daemon_pid, webhook_set))
            return checks
    except ProbeError as exc:
        return [token_failure("telegram", "TELEGRAM_BOT_TOKEN", exc)]


def _privacy_check(profile: BotProfile, groups: list[int], admin_in: set[int]) -> Check:
    """Privacy mode on, a bot sees only commands and replies to it in a group — not
    plain messages, nor ones that @mention it — unless it is an administrator there.
    It matters where groups are listed (fail), or open to any group (warn)."""
    name = "telegram privacy mode"
    if profile.reads_all_group_messages:
        return ok(name, "off: the bot reads every message in its groups")
    blind = [g for g in groups if g not in admin_in]
    if groups and not blind:
        return ok(name, "on, but the bot is an administrator in every listed group, "
                        "which lets it read all messages there")
    if blind:
        return fail(name, f"on: in {', '.join(map(str, blind))} the bot sees only commands "
                          f"and replies to its own messages", _PRIVACY_FIX)
    if not profile.can_join_groups:
        return ok(name, "on; the bot cannot be added to groups, and private chats are "
                        "not affected")
    return warn(name, "on, and platforms.telegram.allowed_chats lists no group: in any "
                      "group the bot joins it would see only commands and replies to it",
                f"for groups, {_PRIVACY_FIX}; for private chats only, nothing to do")


async def _group_check(probe: TelegramProbe, chat_id: int) -> tuple[Check, bool]:
    """A listed group: the bot in it and allowed to post; and whether it is an admin.

    The rule, forums included: the bot may post when it is the creator, an
    administrator or a member, or restricted but still a member with
    ``can_send_messages``. ``can_manage_topics`` is not needed: it creates, closes and
    reopens topics, and Homing only posts in the topics people write in."""
    name = f"telegram chat {chat_id}"
    try:
        chat = await probe.chat(chat_id)
        member = await probe.own_membership(chat_id)
    except ProbeError as exc:
        return fail(name, exc.problem, exc.fix), False
    kind = "forum" if chat.is_forum else chat.type
    title = f"{chat.title!r} ({kind})" if chat.title else kind
    if member.status in ("creator", "administrator"):
        return ok(name, f"{title}: the bot is an administrator and may post"), True
    if member.status == "member":
        return ok(name, f"{title}: the bot is a member and may post"), False
    if member.status == "restricted":
        if getattr(member, "is_member", False) and getattr(member, "can_send_messages", False):
            return ok(name, f"{title}: the bot is restricted but may send messages"), False
        where = "in its topics" if chat.is_forum else "there"
        return fail(name, f"{title}: the bot is restricted and may not send messages {where}",
                    "in the group's settings → Permissions → Exceptions, let the bot send "
                    "messages (or make it an administrator); posting in forum topics needs "
                    "no more than that"), False
    return fail(name, f"{title}: the bot is not a member (status {member.status})",
                "add the bot to the group again"), False


async def _webhook_check(probe: TelegramProbe, settings: TelegramConfig,
                         daemon_pid: int | None) -> tuple[Check, bool]:
    """The check, and whether a webhook is set."""
    name = "telegram webhook"
    try:
        state = await probe.webhook()
    except ProbeError as exc:
        return fail(name, exc.problem, exc.fix), False
    if settings.mode == "webhook":
        return _own_webhook(name, state, settings, daemon_pid), bool(state.url)
    if not state.url:
        return ok(name, "none set, so polling works"), False
    if state.url == settings.webhook.url:
        return warn(name, f"the webhook homing set in webhook mode is still set "
                          f"({_shown(state.url)}; {_waiting(state)}); polling is refused "
                          f"while it is",
                    "`homing run` in polling mode deletes it at start (what waits is "
                    "polled then)"), True
    return fail(name, f"a webhook is set ({state.url}); polling is refused while it is, and "
                      f"homing only polls (it does not delete a webhook itself)",
                f"if no other tool needs it, run deleteWebhook: "
                f"curl -s '{settings.base_url}<token>/deleteWebhook'"), True


def _own_webhook(name: str, state: WebhookState, settings: TelegramConfig,
                 daemon_pid: int | None) -> Check:
    """Webhook mode: the webhook is platforms.telegram.webhook.url, and Telegram can
    deliver to it (getWebhookInfo's pending updates and last error)."""
    webhook = settings.webhook
    configured = webhook.url or ""
    listen = f"{webhook.listen.host}:{webhook.listen.port}{webhook.listen_path}"
    if not state.url:
        if daemon_pid is None:
            return warn(name, f"none set yet ({_waiting(state)})",
                        f"`homing run` sets {_shown(configured)} at start")
        return fail(name, f"none set, though homing runs (pid {daemon_pid}); "
                          f"{_waiting(state)}",
                    "its log says why Telegram refused it (telegram_webhook_not_set)")
    if state.url != configured:
        return fail(name, f"set to another address than platforms.telegram.webhook.url "
                          f"({state.url}); Telegram posts there, not to homing",
                    "restart homing: it sets its own at start (if another tool set this one, "
                    "give that tool a bot of its own)")
    said = f"set to {_shown(state.url)}; {_waiting(state)}"
    if state.max_connections:
        said += f"; at most {state.max_connections} requests at once"
    if state.last_error is None:
        return ok(name, said)
    ago = f"{max(0, time.time() - (state.last_error_at or time.time())):.0f} s ago"
    said += f"; Telegram's last error ({ago}): {state.last_error}"
    if not state.pending_updates:
        return ok(name, said + " — delivered since")
    return fail(name, said, _error_fix(state.last_error, configured, listen))


def _error_fix(error: str, url: str, listen: str) -> str:
    """What to do about the error Telegram last met posting to the webhook."""
    words = error.lower()
    host = urlsplit(url).hostname or url
    if " 401 " in f"{words} ":
        return ("Telegram's secret token is not platforms.telegram.webhook.secret_token: "
                "restart homing so it sets the webhook with its own (every instance needs "
                "the same)")
    if " 404" in words or " 405" in words:
        return (f"the proxy at {host} forwards to another path than homing listens on "
                f"({listen})")
    if "wrong response from the webhook: 5" in words:
        return ("homing could not journal the updates (the state store?): its log says why; "
                "Telegram posts them again")
    return (f"Telegram cannot reach {host}: check its DNS and TLS certificate, and that the "
            f"proxy there forwards to {listen} while homing runs")


def _shown(url: str) -> str:
    """A webhook address without its path, which may hold a secret."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/…" if parts.path not in ("", "/") else url


def _waiting(state: WebhookState) -> str:
    count = state.pending_updates
    return f"{count} update{'' if count == 1 else 's'} waiting"


async def _polling_check(probe: TelegramProbe, daemon_pid: int | None,
                         webhook_set: bool) -> Check:
    from gateway.platforms.telegram.probe import POLL_HOLD_SECONDS

    name = "telegram polling"
    if daemon_pid is not None:
        return ok(name, f"the running homing (pid {daemon_pid}) polls this token; not "
                        f"probed, so as not to disturb it")
    if webhook_set:
        return skip(name, "refused while the webhook is set")
    try:
        conflict = await probe.polled_elsewhere()
    except ProbeError as exc:
        return fail(name, exc.problem, exc.fix)
    if conflict is not None:
        return fail(name, f"another process is polling this bot token (Telegram: {conflict})",
                    "stop the other program or homing using this token (one poller per "
                    "token), or give this installation a bot of its own")
    return ok(name, f"no other process polled this token in {POLL_HOLD_SECONDS} s")

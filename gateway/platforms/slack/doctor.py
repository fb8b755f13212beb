"""What ``homing doctor`` asks Slack: the bot token (``auth.test``) and the scopes it
lacks, and the app-level token (``apps.connections.open``: Socket Mode on, and the
token allowed to connect)."""

from __future__ import annotations

from gateway.platforms.checks import Check, DoctorContext, fail, ok, token_failure, warn
from gateway.platforms.probe import ProbeError
from gateway.platforms.slack.settings import SlackSettings

_SCOPES_FIX = ("add {scopes} under Bot Token Scopes on the app's OAuth & Permissions page "
               "(api.slack.com/apps), then reinstall the app to the workspace")


async def checks(settings: SlackSettings, context: DoctorContext) -> list[Check]:
    """The registry's way in (gateway/platforms/slack/spec.py)."""
    from gateway.platforms.slack.probe import NEEDED_SCOPES, socket_mode_open, whoami

    found: list[Check] = []
    bot = settings.bot_token.get_secret_value() if settings.bot_token else ""
    app = settings.app_token.get_secret_value() if settings.app_token else ""
    try:
        me = await whoami(bot, settings.api_base)
    except ProbeError as exc:
        found.append(token_failure("slack", "SLACK_BOT_TOKEN", exc))
    else:
        found.append(ok("slack token", f"{me.user} ({me.user_id}) in {me.team} "
                                       f"({me.team_id})"))
        missing = me.missing()
        if me.scopes is None:
            found.append(warn("slack scopes", "Slack did not say which scopes the token has"))
        elif missing:
            what = "; ".join(f"{s} ({NEEDED_SCOPES[s]})" for s in missing)
            found.append(fail("slack scopes", f"the bot lacks {what}",
                              _SCOPES_FIX.format(scopes=", ".join(missing))))
        else:
            found.append(ok("slack scopes", "the bot has every scope homing uses"))
    try:
        await socket_mode_open(app, settings.api_base)
    except ProbeError as exc:
        found.append(fail("slack app token", exc.problem,
                          f"{exc.fix}, into homing.env (SLACK_APP_TOKEN) or wherever "
                          f"platforms.slack.app_token takes it from"))
    else:
        found.append(ok("slack app token", "Socket Mode may connect"))
    return found

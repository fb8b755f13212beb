"""What ``homing doctor`` asks Discord with the bot's token: the token (users/@me); the
message content intent (the application's flags); each Discord home channel visible,
and the bot allowed to post and read its history there."""

from __future__ import annotations

from gateway.config.settings import HomeChannel, secret
from gateway.platforms.checks import Check, DoctorContext, fail, ok, token_failure, warn
from gateway.platforms.discord.probe import DiscordProbe
from gateway.platforms.discord.settings import DiscordConfig
from gateway.platforms.probe import ProbeError


async def checks(settings: DiscordConfig, context: DoctorContext) -> list[Check]:
    """The registry's way in (gateway/platforms/discord/spec.py)."""
    homes = [h for h in context.config.agent.home_channels if h.platform == "discord"]
    return await discord_checks(settings, homes)


async def discord_checks(settings: DiscordConfig, homes: list[HomeChannel]) -> list[Check]:
    try:
        async with DiscordProbe(secret(settings.token) or "", settings.api_base) as probe:
            me = await probe.me()
            checks = [ok("discord token", f"{me.username} (id {me.id}) at {probe.host}")]
            try:
                application = await probe.application()
            except ProbeError as exc:
                checks.append(fail("discord intents", exc.problem, exc.fix))
            else:
                checks.append(_intent_check(application.reads_message_content))
            for home in homes:
                checks.append(await _channel_check(probe, me.id, home))
            return checks
    except ProbeError as exc:
        return [token_failure("discord", "DISCORD_BOT_TOKEN", exc)]


def _intent_check(reads_message_content: bool) -> Check:
    name = "discord intents"
    if reads_message_content:
        return ok(name, "the message content intent is enabled")
    return fail(name, "the message content intent is not enabled for the application: "
                      "Discord refuses the gateway connection homing makes (4014)",
                "enable MESSAGE CONTENT INTENT in the Developer Portal → Bot")


async def _channel_check(probe: DiscordProbe, bot_id: int, home: HomeChannel) -> Check:
    name = f"discord channel {home.name}"
    channel = home.thread_id or home.chat_id
    if not channel.isdigit():
        return fail(name, f"{channel!r} is not a Discord id",
                    "put the channel's id in agent.home_channels (Developer Mode → right-"
                    "click the channel → Copy Channel ID)")
    try:
        access = await probe.channel_access(int(channel), bot_id)
    except ProbeError as exc:
        return fail(name, exc.problem, exc.fix)
    where = f"#{access.name} ({channel})"
    blocking = [p for p in access.missing if p != "Read Message History"]
    fix = (f"give the bot's role {' and '.join(access.missing)} in {where} (Server Settings → "
           f"Roles, or the channel's Permissions)")
    if blocking:
        return fail(name, f"the bot may not {' or '.join(blocking)} in {where}", fix)
    if access.missing:
        return warn(name, f"the bot may post in {where} but not read its history: what is "
                          f"said there while homing is offline is not caught up", fix)
    return ok(name, f"the bot may post in {where}")

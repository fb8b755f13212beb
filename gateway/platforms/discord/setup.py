"""Discord's part of ``homing setup``: the bot token, checked with the application's
flags (the message content intent), the invite link, and the owner's user id."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping

from gateway.platforms.discord.settings import DiscordConfig
from gateway.platforms.probe import ProbeError
from gateway.platforms.questions import (
    PlatformAnswers,
    Prompter,
    accepted_token,
    parse_user_id,
    problem_with,
)

#: what the bot needs in a Discord channel, for the invite link: View Channel, Send
#: Messages, Send Messages in Threads, Attach Files, Read Message History
_DISCORD_PERMISSIONS = (1 << 10) | (1 << 11) | (1 << 38) | (1 << 15) | (1 << 16)


class DiscordQuestions:
    """The questions, and a flag for each."""

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        discord = parser.add_argument_group("discord")
        discord.add_argument("--discord-token-env", metavar="VAR",
                             help="read the bot token from this environment variable")
        discord.add_argument("--discord-user-id", metavar="ID", type=parse_user_id,
                             help="your Discord user id (Developer Mode → Copy User ID)")
        discord.add_argument("--discord-api-base", metavar="URL",
                             help="a REST API base other than discord.com's (…/api/v10)")
        discord.add_argument("--discord-gateway-url", metavar="URL",
                             help="a gateway other than gateway.discord.gg")

    def ask(self, args: argparse.Namespace, environ: Mapping[str, str],
            ask: Prompter) -> PlatformAnswers:
        return _ask(args, environ, ask)


QUESTIONS = DiscordQuestions()


def _ask(args: argparse.Namespace, environ: Mapping[str, str], ask: Prompter) -> PlatformAnswers:
    from gateway.platforms.discord.probe import DiscordProbe

    endpoints: dict[str, str] = {}
    if args.discord_api_base:
        endpoints["api_base"] = args.discord_api_base
    if args.discord_gateway_url:
        endpoints["gateway_url"] = args.discord_gateway_url
    invite: list[str] = []

    def check(token: str) -> str:
        async def ask_discord() -> str:
            async with DiscordProbe(token, args.discord_api_base
                                    or DiscordConfig().api_base) as probe:
                me, application = await probe.me(), await probe.application()
            if not application.reads_message_content:
                raise ProbeError(
                    f"the bot {me.username} is fine, but its application may not read "
                    f"message content (Discord would refuse homing's connection)",
                    "enable MESSAGE CONTENT INTENT in the Developer Portal → Bot")
            invite[:] = [f"https://discord.com/oauth2/authorize?client_id={application.id}"
                         f"&scope=bot&permissions={_DISCORD_PERMISSIONS}"]
            return (f"ok: the bot is {me.username} (id {me.id}); the message content "
                    f"intent is on")
        return asyncio.run(ask_discord())

    token = accepted_token(
        environ, ask, variable=args.discord_token_env, flag="--discord-token-env",
        question="Discord bot token (Developer Portal → your application → Bot → Reset "
                 "Token)", check=check, what="token with Discord")
    ask.say(f"  invite the bot to your server with {invite[0]}")
    user_id = args.discord_user_id or ask.text(
        "Your Discord user id (in Discord: Settings → Advanced → Developer Mode on, then "
        "right-click your name → Copy User ID)", flag="--discord-user-id ID",
        problem=lambda a: problem_with(parse_user_id, a))
    return PlatformAnswers(
        {"enabled": True, "token": "${DISCORD_BOT_TOKEN}", "allowed_users": [user_id],
         **endpoints}, {"DISCORD_BOT_TOKEN": token})

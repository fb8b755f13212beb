"""Telegram's part of ``homing setup``: the bot token, checked with getMe, and the
owner's user id, learnt from a message they send the bot (or given)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping

from gateway.platforms.probe import ProbeError
from gateway.platforms.questions import (
    MissingAnswer,
    PlatformAnswers,
    Prompter,
    accepted_token,
    parse_user_id,
    problem_with,
)
from gateway.platforms.telegram.settings import TelegramConfig

#: how long setup waits for the message that tells it the owner's Telegram id
DEFAULT_TELEGRAM_WAIT = 120.0


class TelegramQuestions:
    """The questions, and a flag for each."""

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        telegram = parser.add_argument_group("telegram")
        telegram.add_argument("--telegram-token-env", metavar="VAR",
                              help="read the bot token from this environment variable")
        telegram.add_argument("--telegram-user-id", metavar="ID", type=parse_user_id,
                              help="your Telegram user id (else learnt from a message you send "
                                   "the bot)")
        telegram.add_argument("--telegram-wait", metavar="SECONDS", type=float,
                              default=DEFAULT_TELEGRAM_WAIT,
                              help="how long to wait for that message (default %(default)g)")
        telegram.add_argument("--telegram-base-url", metavar="URL",
                              help="a Bot API server other than api.telegram.org (…/bot)")
        telegram.add_argument("--telegram-base-file-url", metavar="URL",
                              help="its file URL (default: derived from --telegram-base-url)")

    def ask(self, args: argparse.Namespace, environ: Mapping[str, str],
            ask: Prompter) -> PlatformAnswers:
        return _ask(args, environ, ask)


QUESTIONS = TelegramQuestions()


def _ask(args: argparse.Namespace, environ: Mapping[str, str], ask: Prompter) -> PlatformAnswers:
    from gateway.platforms.telegram.probe import BotProfile, TelegramProbe

    defaults = TelegramConfig()
    endpoints: dict[str, str] = {}
    if args.telegram_base_url:
        endpoints["base_url"] = args.telegram_base_url
        endpoints["base_file_url"] = args.telegram_base_file_url or _file_url(
            args.telegram_base_url)
    urls = (endpoints.get("base_url", defaults.base_url),
            endpoints.get("base_file_url", defaults.base_file_url))
    profile: BotProfile | None = None

    def check(token: str) -> str:
        async def ask_telegram() -> BotProfile:
            async with TelegramProbe(token, *urls) as probe:
                return probe.profile
        nonlocal profile
        profile = asyncio.run(ask_telegram())
        return f"ok: the bot is @{profile.username} (id {profile.id})"

    token = accepted_token(
        environ, ask, variable=args.telegram_token_env, flag="--telegram-token-env",
        question="Telegram bot token (from @BotFather: /newbot, or /mybots → API Token)",
        check=check, what="token with Telegram")
    assert profile is not None
    user_id = args.telegram_user_id
    if user_id is None and ask.interactive:
        user_id = ask.text("Your Telegram user id (Enter: learn it from a message you send "
                           "the bot)", flag="--telegram-user-id", default="learn",
                           problem=lambda a: None if a == "learn"
                           else problem_with(parse_user_id, a))
        if user_id == "learn":
            user_id = _learn_telegram_user(ask, token, urls, profile.username,
                                           args.telegram_wait)
    if user_id is None:
        raise MissingAnswer("--telegram-user-id ID", "your telegram user id is needed")
    return PlatformAnswers(
        {"enabled": True, "token": "${TELEGRAM_BOT_TOKEN}", "allowed_users": [user_id],
         **endpoints}, {"TELEGRAM_BOT_TOKEN": token})


def _learn_telegram_user(ask: Prompter, token: str, urls: tuple[str, str], username: str,
                         wait: float) -> str:
    from gateway.platforms.telegram.probe import Sender, TelegramProbe

    ask.say(f"Now send any message to @{username} from your own Telegram account "
            f"(waiting up to {wait:g} s) …")

    async def first_message() -> Sender | None:
        async with TelegramProbe(token, *urls) as probe:
            sender = await probe.first_private_message(wait)
            if sender is not None:
                try:
                    await probe.say(sender.chat_id, f"Homing setup: you are "
                                    f"{sender.describe()}; this bot will answer you.")
                except ProbeError as exc:  # the id is learnt all the same
                    ask.say(f"  (could not answer you in Telegram: {exc.problem})")
            return sender

    try:
        sender = asyncio.run(first_message())
    except ProbeError as exc:
        ask.say(f"  {exc.problem} — {exc.fix}")
        sender = None
    if sender is not None:
        ask.say(f"you are {sender.describe()}")
        return str(sender.user_id)
    ask.say("  no message came; type the id instead (@userinfobot tells it)")
    return ask.text("Your Telegram user id", flag="--telegram-user-id",
                    problem=lambda a: problem_with(parse_user_id, a))


def _file_url(base_url: str) -> str:
    """Telegram's layout: …/bot → …/file/bot (a local Bot API server has the same)."""
    stem = base_url.rstrip("/")
    return (stem[:-len("bot")] if stem.endswith("bot") else stem + "/") + "file/bot"

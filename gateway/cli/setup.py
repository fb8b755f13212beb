"""``homing setup``: the first run. It asks which platforms to enable, checks each bot
token with the platform before taking it, learns the owner's Telegram id from a
message they send the bot, writes ``config.yaml`` and ``homing.env``
(``setup_files``), and offers to install the systemd service.

Plain prompts on a terminal (``input``, and ``getpass`` for tokens). Every question
has a flag (``setup_options``); without a terminal, or with ``--yes``, the flags and
defaults answer, and a question with neither ends setup with exit 2 naming the flag.
Nothing is written until every answer is in.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from gateway.cli.setup_files import Answers, ChatPlatform, write_files
from gateway.cli.setup_options import (
    DEFAULT_WEB_PORT,
    PLATFORMS,
    parse_platforms,
    parse_port,
    parse_user_id,
    problem_with,
)
from gateway.config.env_file import env_file_path, read_env_file
from gateway.config.settings import (
    DEFAULT_HOME,
    ConfigError,
    DiscordConfig,
    TelegramConfig,
    load_config,
)
from gateway.errors import ConfigurationError
from gateway.platforms.probe import ProbeError

EXIT_MISSING = 2
#: what the bot needs in a Discord channel, for the invite link: View Channel, Send
#: Messages, Send Messages in Threads, Attach Files, Read Message History
_DISCORD_PERMISSIONS = (1 << 10) | (1 << 11) | (1 << 38) | (1 << 15) | (1 << 16)


class MissingAnswer(ConfigurationError):
    """A question without a terminal to ask it on, nor a flag answering it."""

    def __init__(self, flag: str, what: str) -> None:
        super().__init__(f"give {flag}: {what}")


class SetupFailed(ConfigurationError):
    """Setup cannot go on (a token refused, a file in the way); nothing was written."""


class Prompter:
    """Asks on a terminal; otherwise a question with no default is a MissingAnswer."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive

    def say(self, text: str) -> None:
        print(text, flush=True)

    def text(self, question: str, *, flag: str, default: str | None = None,
             problem: Callable[[str], str | None] = lambda _: None) -> str:
        if not self.interactive:
            if default is None:
                raise MissingAnswer(flag, question.split(" (")[0].lower() + " is needed")
            return default
        shown = f" [{default}]" if default else ""
        while True:
            answer = input(f"{question}{shown}: ").strip() or (default or "")
            wrong = problem(answer) if answer else "an answer is needed"
            if wrong is None:
                return answer
            self.say(f"  {wrong}")

    def secret(self, question: str, *, flag: str) -> str:
        if not self.interactive:
            raise MissingAnswer(flag, question.split(" (")[0].lower() + " is needed")
        while not (answer := getpass.getpass(f"{question} (not shown): ").strip()):
            self.say("  an answer is needed")
        return answer

    def confirm(self, question: str, *, default: bool) -> bool:
        if not self.interactive:
            return default
        answer = input(f"{question} [{'Y/n' if default else 'y/N'}]: ").strip().lower()
        return default if not answer else answer in ("y", "yes")


def run_setup(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The CLI's ``homing setup``: its exit status."""
    ask = Prompter(interactive=sys.stdin.isatty() and not args.yes)
    try:
        return _setup(args, environ, ask)
    except MissingAnswer as exc:
        print(f"homing setup: {exc} (with --yes or without a terminal every answer "
              f"comes from a flag; see homing setup --help)", file=sys.stderr)
        return EXIT_MISSING
    except SetupFailed as exc:
        print(f"homing setup: {exc}", file=sys.stderr)
        return 1
    except EOFError:
        print("\nhoming setup: the input ended before every answer was in; nothing was "
              "written (for scripted use: --yes and the flags)", file=sys.stderr)
        return EXIT_MISSING
    except KeyboardInterrupt:
        print("\nhoming setup: stopped; nothing was written", file=sys.stderr)
        return 130


def _setup(args: argparse.Namespace, environ: Mapping[str, str], ask: Prompter) -> int:
    home = Path(environ.get("HOMING_HOME") or DEFAULT_HOME).expanduser()
    explicit = args.config or environ.get("HOMING_CONFIG")
    config_path = Path(explicit).expanduser() if explicit else home / "config.yaml"
    env_path = env_file_path(home)
    if config_path.exists() and not args.force:
        if not ask.interactive:
            raise MissingAnswer("--force", f"{config_path} exists; replace it?")
        if not ask.confirm(f"{config_path} exists. Replace it (the old one is kept as "
                           f"{config_path.name}.bak)?", default=False):
            ask.say(f"left {config_path} as it is")
            return 1
    ask.say(f"Homing setup: writes {config_path}, and the tokens to {env_path}.")
    platforms = args.platforms or parse_platforms(ask.text(
        f"Platforms to enable, comma-separated ({', '.join(PLATFORMS)})", flag="--platforms",
        default="web", problem=lambda a: problem_with(parse_platforms, a)))
    answers = Answers()
    if "web" in platforms:
        answers.web_port = args.web_port if args.web_port is not None else parse_port(ask.text(
            "Web chat port on 127.0.0.1 (0: any free one)", flag="--web-port",
            default=str(DEFAULT_WEB_PORT), problem=lambda a: problem_with(parse_port, a)))
    if "telegram" in platforms:
        answers.bots["telegram"] = _telegram(args, environ, ask)
    if "discord" in platforms:
        answers.bots["discord"] = _discord(args, environ, ask)
    for line in write_files(answers, config_path, env_path):
        ask.say(line)
    _offer_service(args, environ, ask, config_path, env_path)
    run = f"homing run --config {config_path}" if explicit else "homing run"
    # every homing command reads the environment file: no `set -a; . homing.env` needed
    ask.say(f"next: `homing doctor` checks it all live; to run it in this terminal: {run}")
    return 0


def _accepted_token(environ: Mapping[str, str], ask: Prompter, *, variable: str | None,
                    flag: str, question: str, check: Callable[[str], str], what: str) -> str:
    """A token the platform accepted: asked again at a prompt until it is."""
    while True:
        token = _token(environ, ask, variable=variable, flag=flag, question=question)
        if _checked(ask, variable is not None, check, token, what):
            return token


def _token(environ: Mapping[str, str], ask: Prompter, *, variable: str | None, flag: str,
           question: str) -> str:
    if variable is None:
        return ask.secret(question, flag=f"{flag} VAR")
    token = environ.get(variable, "").strip()
    if not token:
        raise MissingAnswer(f"{flag} naming a set variable",
                            f"the environment variable {variable} is not set")
    return token


def _checked(ask: Prompter, from_flag: bool, check: Callable[[str], str], token: str,
             what: str) -> bool:
    """Check a token with its platform and say the verdict; False (ask again) when it
    failed at a prompt, SetupFailed when the token came from a flag."""
    ask.say(f"  checking the {what} …")
    try:
        ask.say(f"  {check(token)}")
        return True
    except ProbeError as exc:
        if from_flag or not ask.interactive:
            raise SetupFailed(f"{exc.problem} — fix: {exc.fix}") from None
        ask.say(f"  {exc.problem} — {exc.fix}")
        return False


# ---------------------------------------------------------------------- telegram

def _telegram(args: argparse.Namespace, environ: Mapping[str, str],
              ask: Prompter) -> ChatPlatform:
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

    token = _accepted_token(
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
    return ChatPlatform(token, user_id, endpoints)


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


# ---------------------------------------------------------------------- discord

def _discord(args: argparse.Namespace, environ: Mapping[str, str],
             ask: Prompter) -> ChatPlatform:
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

    token = _accepted_token(
        environ, ask, variable=args.discord_token_env, flag="--discord-token-env",
        question="Discord bot token (Developer Portal → your application → Bot → Reset "
                 "Token)", check=check, what="token with Discord")
    ask.say(f"  invite the bot to your server with {invite[0]}")
    user_id = args.discord_user_id or ask.text(
        "Your Discord user id (in Discord: Settings → Advanced → Developer Mode on, then "
        "right-click your name → Copy User ID)", flag="--discord-user-id ID",
        problem=lambda a: problem_with(parse_user_id, a))
    return ChatPlatform(token, user_id, endpoints)


# ---------------------------------------------------------------------- service

def _offer_service(args: argparse.Namespace, environ: Mapping[str, str], ask: Prompter,
                   config_path: Path, env_path: Path) -> None:
    """``homing service install`` for the new config, when asked to (``--service``, or
    yes at the prompt, which defaults to yes where systemd runs)."""
    import gateway.systemd.unit as service
    running = service.systemd_running()
    # unasked (--yes, no terminal) it is not installed: that changes the machine
    wanted = args.service if args.service is not None else ask.interactive and ask.confirm(
        "Install homing as a systemd user service now?" if running else
        "systemd is not running here; write the service unit anyway?", default=running)
    if not wanted:
        ask.say("not installing the service (later: homing service install)")
        return
    variables = read_env_file(env_path) if env_path.exists() else {}
    try:
        config = load_config(config_path, {**environ, **variables})
        plan = service.plan(config, config_path, user=True, unit_dir=args.unit_dir)
        for line in service.install(plan, start=True):
            ask.say(line)
    except (ConfigError, OSError, subprocess.CalledProcessError) as exc:
        raise SetupFailed(f"the config is written, but the service was not installed: "
                          f"{exc}") from None

"""What a chat platform brings to the gateway, so that adding one touches no file outside
its own package: its settings under ``platforms.<name>``, the secrets in them (masked in
logs), what its tokens look like, and where its adapter, its ``homing setup`` questions
and its ``homing doctor`` probes are.

A platform declares one :class:`PlatformSpec`. The built-in ones are listed in
``gateway/config/registry.py``; any other installed package registers one under the
entry-point group ``homing.platforms``. The spec names its adapter and its CLI parts as
``"module:attribute"`` strings, imported only when they are used, so a daemon that does
not enable a platform never imports its client library.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.config.fields import Strict


class PlatformSettings(Strict):
    """What every platform's section has: ``enabled``. A platform's settings subclass
    this (``platforms.<name>`` is validated with its class)."""

    enabled: bool = False

    def problems(self) -> list[tuple[str, str]]:
        """What this section's settings say together that is wrong: (setting, problem).
        Checked only when it is enabled."""
        return []


#: the account a section's own bot is (the single-bot form): its conversations' routes
#: and session keys name the platform alone, as they always have
DEFAULT_ACCOUNT = "default"
#: an account's name: lower-case letters, digits, ``_`` and ``-``
ACCOUNT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def account_platform(platform: str, account: str) -> str:
    """The platform part of an account's routes and session keys: the platform's name
    for its default account, ``<platform>/<account>`` for another — so the same chat
    seen by two bots is two conversations, and a notice goes back through its own bot."""
    return platform if account == DEFAULT_ACCOUNT else f"{platform}/{account}"


def platform_of(key: str) -> str:
    """The platform a route's platform part names, its account left off."""
    return key.split("/", 1)[0]


class BotSettings(PlatformSettings):
    """A bot platform's section: one token, and who may talk to the bot — or, under
    ``accounts``, several bots, each with its own (the section's other settings are
    every account's defaults)."""

    token: SecretStr | None = None
    allowed_users: list[str] = Field(default_factory=list)
    #: this bot's account name (``accounts`` entries give theirs)
    name: str = DEFAULT_ACCOUNT
    #: several bots of this platform in one daemon: each entry is this section's
    #: settings, with its own ``name`` and token, over the section's own values
    accounts: list[dict[str, Any]] = Field(default_factory=list)
    _bots: list[Any] = PrivateAttr(default_factory=list)

    @field_validator("allowed_users", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value

    @field_validator("name")
    @classmethod
    def _account_name(cls, value: str) -> str:
        if not ACCOUNT_NAME.fullmatch(value):
            raise ValueError(f"{value!r}: an account name is lower-case letters, digits, "
                             f"_ and - (at most 32)")
        return value

    @model_validator(mode="after")
    def _each_account(self) -> BotSettings:
        """Every account validated now, as the section would be, its place named."""
        if not self.accounts:
            self._bots = [self]
            return self
        if self.token is not None:
            raise ValueError("give either token (one bot) or accounts (several bots, each "
                             "with its own token), not both")
        base = self.model_dump(exclude={"accounts", "name"}, exclude_unset=True)
        bots: list[BotSettings] = []
        for index, entry in enumerate(self.accounts):
            if not isinstance(entry, dict) or "name" not in entry:
                raise ValueError(f"accounts[{index}]: each account needs a name")
            if "accounts" in entry or "enabled" in entry:
                raise ValueError(f"accounts[{index}] ({entry['name']}): accounts and "
                                 f"enabled belong to the section, not to an account")
            try:
                bot = type(self).model_validate({**base, **entry, "enabled": self.enabled})
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                     for e in exc.errors())
                raise ValueError(f"accounts[{index}] ({entry['name']}): {problems}") from None
            bots.append(bot)
        names = [b.name for b in bots]
        if len(set(names)) != len(names):
            raise ValueError(f"accounts: each name once ({', '.join(names)})")
        # one bot, one account: a token twice would be two pollers fighting (Telegram) or
        # every message answered twice (Discord)
        by_token: dict[str, str] = {}
        for bot in bots:
            if bot.token is not None:
                other = by_token.setdefault(bot.token.get_secret_value(), bot.name)
                if other != bot.name:
                    raise ValueError(f"accounts {other} and {bot.name} have the same token: "
                                     f"a bot can be one account only")
        self._bots = bots
        return self

    def bots(self) -> list[BotSettings]:
        """Each bot the section runs, as the settings it runs with: its accounts, or
        the section itself (the account ``default``)."""
        return list(self._bots) or [self]


@dataclass(frozen=True, slots=True)
class TokenShape:
    """What a token looks like (a token pasted wrong is caught by ``check-config``, not
    as a refused login at start); only the shape, never the token, is ever printed."""

    pattern: re.Pattern[str]
    #: how to recognise one, for the message: "xoxb-…, as the app's OAuth page gives it"
    expected: str
    #: what it is called: "bot token", "app-level token"
    what: str = "token"
    #: what is off with a token of the wrong shape, where the general hints say nothing
    hint: Callable[[str], str | None] | None = None

    def matches(self, token: str) -> bool:
        return self.pattern.fullmatch(token) is not None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a platform can do, declared with its spec so the core, ``homing doctor``,
    the docs and the conformance suite (tests/conformance/) know it without importing
    the platform's client. Where a platform lacks one, the core does without: replies
    are sent whole without ``edits``, approvals are answered with ``/approve`` without
    ``buttons``."""

    #: threads or topics: conversations inside one chat, each its own route
    threads: bool = False
    #: a message can be edited: a reply is shown as it is written (previews)
    edits: bool = False
    #: buttons under a message: approvals are a press (else ``/approve`` and ``/deny``)
    buttons: bool = False
    #: files people send are taken in
    files_in: bool = False
    #: files are posted into the conversation
    files_out: bool = False
    #: a typing sign (or a status line) shows while a turn runs
    typing: bool = False
    #: the most characters one message may carry (longer replies are split)
    message_limit: int = 4096
    #: what the platform limits and how the adapter keeps to it, in words
    rate_limits: str = ""
    #: a send made again after a crash posts once (Discord's nonce)
    dedupe_sends: bool = False
    #: a send made before a crash can be looked up after it (``Adapter.delivered``), so
    #: a message answered just before a crash is not told it may not have been
    confirms_sends: bool = False
    #: what was said while the daemon was down is read after it starts
    history: bool = False
    #: it can post where no conversation is open (``agent.home_channels``); the web chat
    #: cannot: a web conversation is only its open tabs
    home_channels: bool = True


@dataclass(frozen=True, slots=True)
class PlatformSpec:
    """One platform, as the gateway knows it before importing any of its code."""

    #: ``platforms.<name>``, the routes' platform, the session key's platform part
    name: str
    #: how people write it: "Slack"
    title: str
    #: the class ``platforms.<name>`` is validated with
    settings: type[PlatformSettings]
    #: ``"module:callable"``: called with (settings, PlatformContext), returns the Adapter
    adapter: str
    #: what it can do
    capabilities: Capabilities = field(default_factory=Capabilities)
    #: settings that must be set when the platform is enabled
    required: tuple[str, ...] = ()
    #: settings whose shape is checked: setting -> shape
    token_shapes: Mapping[str, TokenShape] = field(default_factory=dict)
    #: secret settings -> the environment variable ``homing setup`` keeps each one in
    #: (homing.env); every secret setting's value is masked in the logs
    secrets: Mapping[str, str] = field(default_factory=dict)
    #: ``"module:object"``: the platform's :class:`~gateway.platforms.questions.SetupQuestions`
    setup: str | None = None
    #: ``"module:callable"``: ``async (settings, DoctorContext) -> list[Check]``
    doctor: str | None = None
    #: an unknown user in a DM can ask for a pairing code (``homing pairing approve``)
    pairing: bool = False
    #: other names the CLI takes for it (``homing pairing approve tg …``)
    cli_names: tuple[str, ...] = ()
    #: where it came from: "built-in" or the distribution that registered it
    origin: str = "built-in"

    def secret_values(self, settings: PlatformSettings) -> list[str]:
        """The secrets set in ``settings`` (every account's), to mask in logs."""
        values = []
        for bot in bots_of(settings):
            for name in self.secrets:
                value = getattr(bot, name, None)
                if isinstance(value, SecretStr):
                    value = value.get_secret_value()
                if isinstance(value, str) and value:
                    values.append(value)
        return values

    def problems(self, settings: PlatformSettings,
                 others: Iterable[PlatformSpec] = ()) -> list[tuple[str, str]]:
        """What is wrong with an enabled section that its class alone cannot tell:
        (setting, problem). ``others``: the other platforms, whose token a wrong one may be."""
        if not settings.enabled:
            return []
        bots = bots_of(settings)
        found: list[tuple[str, str]] = []
        for index, bot in enumerate(bots):
            place = f"accounts.{index}." if len(bots) > 1 or bot is not settings else ""
            found += [(place + name, problem) for name, problem in bot.problems()]
            for name in self.required:
                if not _value(bot, name):
                    found.append((place + name, f"required when {self.name} is enabled"))
            for name, shape in self.token_shapes.items():
                value = _value(bot, name)
                if value and not shape.matches(value):
                    found.append((place + name, f"does not look like a {self.title} "
                                  f"{shape.what} ({shape.expected}): "
                                  f"{self._hint(shape, value, others)}"))
        return found

    def _hint(self, shape: TokenShape, token: str, others: Iterable[PlatformSpec]) -> str:
        bare = re.sub(r"(?i)^bot\s*", "", token)
        if bare != token and shape.matches(bare):
            return "leave out the 'bot' in front (the client adds it)"
        if any(c.isspace() for c in token):
            return "it has whitespace in it — check the quotes and that it is on one line"
        if any(c in token for c in "'\"`"):
            return "it has quote marks in it — check the quotes"
        for other in others:
            if other.name != self.name and any(
                    s.matches(token) for s in other.token_shapes.values()):
                return f"it looks like a {other.title} token — is it under the right platform?"
        for other_name, other_shape in self.token_shapes.items():
            if other_shape is not shape and other_shape.matches(token):
                return f"it looks like the {other_shape.what} — is it under {other_name}?"
        if "/" in token:
            return "it looks like a URL or a path — give just the token"
        specific = shape.hint(token) if shape.hint is not None else None
        return specific or "it has characters a token does not have, or is too short or too long"


def bots_of(settings: PlatformSettings) -> list[PlatformSettings]:
    """Each bot a section runs (its accounts), or the section itself."""
    return list(settings.bots()) if isinstance(settings, BotSettings) else [settings]


def _value(settings: PlatformSettings, name: str) -> str | None:
    value = getattr(settings, name, None)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value) if value not in (None, "") else None

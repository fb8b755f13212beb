"""Configuration: one YAML file loaded into strict pydantic models.

Unknown keys are errors because a typo in a gateway config (``alowed_users``)
otherwise silently opens or closes a door. Every error names its dotted path.
Finding and reading the file is ``gateway/config/file.py``'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)
from pydantic_core import PydanticCustomError

from gateway.config.fields import HttpUrl, Strict

# ConfigError and find_config_file are imported from here by the rest of the code
from gateway.config.file import DEFAULT_HOME as DEFAULT_HOME
from gateway.config.file import ConfigError as ConfigError
from gateway.config.file import dotted, read_config_file, substitute
from gateway.config.file import find_config_file as find_config_file
from gateway.config.platform import (
    DEFAULT_ACCOUNT,
    PlatformSettings,
    account_platform,
    bots_of,
    platform_of,
)
from gateway.config.registry import platforms
from gateway.config.timezones import check_zone


class PlatformSections(Strict):
    """``platforms``: a section per registered platform (gateway/config/registry.py),
    each validated with the platform's own settings class."""

    if TYPE_CHECKING:  # the sections are the registry's, made below
        def __getattr__(self, name: str) -> Any: ...

    def section(self, name: str) -> PlatformSettings:
        """The settings of the platform called ``name``."""
        found = getattr(self, name, None)
        if not isinstance(found, PlatformSettings):
            raise KeyError(f"no platform {name!r}")
        return found

    def enabled(self) -> list[str]:
        """The names of the enabled platforms, in the registry's order."""
        return [spec.name for spec in platforms().specs if self.section(spec.name).enabled]

    def bots(self, name: str) -> list[tuple[str, PlatformSettings]]:
        """Each bot of the platform ``name``: (the platform part of its routes, the
        settings it runs with) — one for a single bot, one per account."""
        return [(account_platform(name, getattr(bot, "name", DEFAULT_ACCOUNT)), bot)
                for bot in bots_of(self.section(name))]

    def settings_for(self, key: str) -> PlatformSettings | None:
        """The settings of the bot whose routes' platform part is ``key``
        (``telegram``, ``telegram/team``); None when no bot has it."""
        try:
            found = self.bots(platform_of(key))
        except KeyError:
            return None
        return next((bot for bot_key, bot in found if bot_key == key), None)


def _sections() -> type[PlatformSections]:
    fields: dict[str, Any] = {spec.name: (spec.settings, Field(default_factory=spec.settings))
                              for spec in platforms().specs}
    return create_model("PlatformsConfig", __base__=PlatformSections, **fields)


if TYPE_CHECKING:
    PlatformsConfig = PlatformSections
else:  # the sections as pydantic validates them
    PlatformsConfig = _sections()


class SessionsConfig(Strict):
    group_sessions_per_user: bool = True
    thread_sessions_per_user: bool = False
    #: with the model agent: the model names a conversation after its first exchange,
    #: unless a person named it (one small request more a conversation: off unless asked)
    auto_title: bool = False


class TelemetryConfig(Strict):
    """``telemetry``: traces and metrics over OTLP/HTTP (``pip install 'homing[otel]'``)."""

    #: the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318; empty: off
    otlp_endpoint: str = ""
    service_name: str = "homing"
    #: the share of traces kept (each unit of background work is one trace)
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    #: spans may carry message text and command lines (off: ids and outcomes only)
    include_text: bool = False

    @field_validator("otlp_endpoint")
    @classmethod
    def _a_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"`{value}` has no scheme: write http://{value} (OTLP/HTTP)")
        return value


class TranscriptionConfig(Strict):
    """An OpenAI-compatible ``/audio/transcriptions`` endpoint for voice notes."""

    base_url: HttpUrl
    model: str
    api_key: SecretStr | None = None
    timeout_seconds: float = Field(120.0, gt=0)


def _known_platform(name: str) -> str:
    """A registered platform, or one of its bots (``telegram/team``)."""
    if platforms().get(platform_of(name)) is None:
        raise PydanticCustomError("platform", "{name!r} is not a platform (known: {known})",
                                  {"name": name, "known": ", ".join(platforms().names)})
    return name


#: the name of a registered platform
PlatformName = Annotated[str, AfterValidator(_known_platform)]


class HomeChannel(Strict):
    """A place the agent's ``send_message`` may post to besides the current conversation."""

    name: str = Field(min_length=1)
    # not web: a web conversation is only its open tabs, and there may be none
    platform: str
    chat_id: str = Field(min_length=1)
    chat_type: Literal["dm", "group", "channel", "thread"] = "group"
    thread_id: str | None = None

    @field_validator("chat_id", "thread_id", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value


class AgentConfig(Strict):
    backend: Literal["command", "openai"] = "command"
    # the model backend (backend: openai): any OpenAI-compatible chat-completions endpoint
    base_url: HttpUrl = "https://api.openai.com/v1"
    model: str | None = None
    api_key: SecretStr | None = None
    system_prompt: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    timeout_seconds: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    retry_backoff_seconds: float = Field(1.0, ge=0)
    max_retry_after_seconds: float = Field(60.0, ge=0)
    max_tool_rounds: int = Field(12, ge=1)
    #: sent on every request: a small model can otherwise talk past any timeout
    max_tokens: int = Field(4096, ge=16)
    #: the answer is shown as the model writes it (web deltas, an edited preview)
    stream: bool = True
    #: images people send go to the model as image input (a model that can see them)
    vision: bool = False
    #: voice notes and audio are transcribed there for the model (None: it gets the file)
    transcription: TranscriptionConfig | None = None
    #: a message arriving mid-turn: queue (after the turn), interrupt (stop the turn,
    #: answer with both in context) or steer (given to the turn before its next model call)
    busy: Literal["queue", "interrupt", "steer"] = "queue"
    subagent_timeout_seconds: float = Field(1800.0, gt=0)
    context_budget_tokens: int = Field(24000, ge=1000)
    keep_recent_turns: int = Field(2, ge=1)
    home_channels: list[HomeChannel] = Field(default_factory=list)


class WatchConfig(Strict):
    cooldown_seconds: float = Field(10.0, ge=0)
    max_notices: int = Field(10, ge=1)
    max_lines: int = Field(10, ge=1, le=100)
    global_max_per_minute: int = Field(30, ge=1)


class JobsConfig(Strict):
    tail_lines: int = Field(20, ge=1, le=500)
    foreground_timeout_seconds: float = Field(600.0, gt=0)
    kill_grace_seconds: float = Field(5.0, ge=0)
    watch: WatchConfig = Field(default_factory=WatchConfig)


class DelegationsConfig(Strict):
    max_running_per_session: int = Field(3, ge=1)


class NotificationsConfig(Strict):
    background: Literal["all", "result", "error", "off"] = "all"


class SchedulesConfig(Strict):
    #: an IANA zone; None: the machine's own
    timezone: str | None = None
    min_interval_seconds: float = Field(60.0, gt=0)
    max_per_conversation: int = Field(20, ge=1)
    missed: Literal["skip", "once", "all"] = "once"
    max_missed_age_seconds: float = Field(86400.0, gt=0)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        return check_zone(value) if value is not None else None


class InboundConfig(Strict):
    #: a message handled this long after it was sent gets a note that it came late
    late_after_seconds: float = Field(60.0, ge=0)
    #: one older than this is not run (and its conversation is told)
    max_age_seconds: float = Field(900.0, gt=0)


class AttachmentsConfig(Strict):
    #: files people send are saved up to this size (Telegram's cloud Bot API serves 20 MB)
    max_bytes: int = Field(20 * 1024 * 1024, ge=1)
    #: directories send_file and /send may post files from (empty: the state directory's
    #: files/ and the directory jobs run in)
    send_roots: list[str] = Field(default_factory=list)


class ApprovalsConfig(Strict):
    """Which of the model's actions wait for a human (see gateway/approvals/rules.py)."""

    mode: Literal["off", "dangerous", "all"] = "dangerous"
    #: regular expressions: commands matching one are asked too (besides the built-in list)
    patterns: list[str] = Field(default_factory=list)
    #: regular expressions: commands matching one are never asked
    allow: list[str] = Field(default_factory=list)
    #: who may decide besides the user whose message started the turn: ids per platform
    approvers: dict[PlatformName, list[str]] = Field(default_factory=dict)
    #: no answer within this long is a denial
    timeout_seconds: float = Field(300.0, gt=0)

    @field_validator("approvers", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        """YAML reads ``[123456789]`` as numbers; ids are compared as text."""
        if not isinstance(value, dict):
            return value
        return {k: [str(v) for v in ids] if isinstance(ids, list) else ids
                for k, ids in value.items()}

    @field_validator("patterns", "allow")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return value


class ShutdownConfig(Strict):
    drain_timeout_seconds: float = Field(30.0, gt=0)


class StoreConfig(Strict):
    #: ``postgresql://user:${PGPASSWORD}@host/db``: the state on PostgreSQL (several
    #: instances may share it); without it, ``state.db`` in the home (SQLite)
    url: SecretStr | None = None

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or value.get_secret_value().startswith(("postgresql://", "postgres://")):
            return value
        if "://" not in value.get_secret_value():  # (not shown: it may hold a password)
            raise ValueError("it has no scheme: write postgresql://user:password@host/db "
                             "(leave it out for SQLite in the home)")
        raise ValueError("expected a postgresql:// URL (leave it out for SQLite in the home)")
        return value


class LoggingConfig(Strict):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


#: an instance name: it is written into the shared store and shown by ``homing status``
_INSTANCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def default_instance_name(host: str | None = None) -> str:
    """This host's short name and the service's (``vps1-homing``): unique per host as long
    as one Homing runs on each, which is what a cluster of them wants."""
    import socket

    short = (host if host is not None else socket.gethostname()).split(".")[0]
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", short).strip("-_")[:55]
    return f"{safe}-homing" if safe else "homing"


class InstanceConfig(Strict):
    """Who this daemon is among the instances sharing one store (gateway/cluster/instances.py)."""

    #: null: this host's name and the service's (see default_instance_name)
    name: str = Field(default_factory=default_instance_name, validate_default=True)

    @field_validator("name", mode="before")
    @classmethod
    def _default_when_null(cls, value: Any) -> Any:
        return default_instance_name() if value is None else value

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not _INSTANCE_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an instance name: up to 63 letters, digits, "
                             f"'-', '_' or '.', starting with a letter or digit")
        return value


class ClusterConfig(Strict):
    """How instances sharing one store tell a live one from a dead one
    (gateway/cluster/instances.py)."""

    #: an instance renews its lease (and the single connections it holds) every third of it
    lease_seconds: float = Field(10.0, gt=0)
    #: a survivor takes over a dead holder's single connection within this long
    failover_seconds: float = Field(15.0, gt=0, validate_default=True)

    @field_validator("failover_seconds")
    @classmethod
    def _not_before_the_lease_ends(cls, value: float, info: ValidationInfo) -> float:
        lease = info.data.get("lease_seconds")  # absent when it was itself invalid
        if lease is not None and value < lease:
            raise ValueError(f"must be at least cluster.lease_seconds ({lease:g}): a holder "
                             f"counts as dead only once its lease has run out")
        return value


class Config(Strict):
    home: str = DEFAULT_HOME
    platforms: PlatformsConfig = Field(default_factory=PlatformsConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    jobs: JobsConfig = Field(default_factory=JobsConfig)
    delegations: DelegationsConfig = Field(default_factory=DelegationsConfig)
    notifications: NotificationsConfig = Field(default_factory=NotificationsConfig)
    schedules: SchedulesConfig = Field(default_factory=SchedulesConfig)
    inbound: InboundConfig = Field(default_factory=InboundConfig)
    attachments: AttachmentsConfig = Field(default_factory=AttachmentsConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    instance: InstanceConfig = Field(default_factory=InstanceConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)

    @property
    def home_path(self) -> Path:
        return Path(self.home).expanduser()

    @property
    def state_db(self) -> Path:
        return self.home_path / "state.db"

    @property
    def state_location(self) -> str | Path:
        """Where the state lives: ``store.url`` (PostgreSQL), else :attr:`state_db`."""
        return secret(self.store.url) or self.state_db

    @property
    def state_shown(self) -> str:
        """:attr:`state_location` as it may be printed: a URL without its password."""
        url = secret(self.store.url)
        if url is None:
            return str(self.state_db)

        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return parts._replace(netloc=netloc).geturl()

    @property
    def files_dir(self) -> Path:
        """Where files people send are kept, a directory per conversation."""
        return self.home_path / "files"

    @property
    def send_roots(self) -> list[Path]:
        """Where files may be posted from besides the conversation's own files: the
        configured roots, else the directory jobs run in — never ``/``, the home
        directory or one holding the state directory (keys, tokens, the database)."""
        configured = self.attachments.send_roots
        roots = [Path(r).expanduser().resolve() for r in configured] if configured \
            else [Path.cwd().resolve()]
        home, state = Path.home().resolve(), self.home_path.resolve()
        return [r for r in roots
                if r != Path("/") and r != home and r != state and r not in state.parents]


def secret(value: SecretStr | None) -> str | None:
    """A token or key as the client needs it; everywhere else it stays a SecretStr, which
    shows as ``**********`` in reprs, dumps and tracebacks."""
    return value.get_secret_value() if value is not None else None


def load_config(
    path: str | Path | None = None, environ: dict[str, str] | None = None
) -> Config:
    """Find, read, substitute and validate the config; raise ConfigError."""
    env = dict(os.environ if environ is None else environ)
    file = find_config_file(path, env)
    source = str(file) if file else "<defaults>"
    raw = read_config_file(file) if file is not None else {}
    config = parse_config(raw, env, source)
    if env.get("HOMING_HOME"):
        config = config.model_copy(update={"home": env["HOMING_HOME"]})
    elif file is not None and not Path(config.home).expanduser().is_absolute():
        # under systemd the working directory is /, so a relative home means
        # "next to the config file"
        config = config.model_copy(update={"home": str(file.parent.resolve() / config.home)})
    return config


def parse_config(raw: Any, environ: dict[str, str], source: str = "<config>") -> Config:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(source, [("<root>", "expected a mapping of settings at the top level")])
    problems: list[tuple[str, str]] = []
    substituted = substitute(raw, environ, (), problems)
    if problems:
        raise ConfigError(source, problems)
    try:
        config = Config.model_validate(substituted)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(err) for err in exc.errors()]) from None
    problems = _cross_field_problems(config)
    if problems:
        raise ConfigError(source, problems)
    return config


def _cross_field_problems(config: Config) -> list[tuple[str, str]]:
    problems = []
    registry = platforms()
    for spec in registry.specs:
        problems += [(f"platforms.{spec.name}.{setting}", problem) for setting, problem
                     in spec.problems(config.platforms.section(spec.name), registry.specs)]
    agent = config.agent
    if agent.backend == "openai" and not agent.model:
        problems.append(("agent.model", "required when agent.backend is openai"))
    if (agent.backend == "openai" and "api.openai.com" in agent.base_url
            and not agent.api_key):
        problems.append(("agent.api_key", "required for api.openai.com; usually "
                                          "\"${OPENAI_API_KEY}\""))
    names: set[str] = set()
    for i, home in enumerate(agent.home_channels):
        if home.name in names:
            problems.append((f"agent.home_channels.{i}.name", f"{home.name!r} is used twice"))
        names.add(home.name)
        if registry.get(home.platform) is None:
            problems.append((f"agent.home_channels.{i}.platform",
                             f"{home.platform!r} is not a platform (known: "
                             f"{', '.join(registry.names)})"))
        elif not registry[home.platform].capabilities.home_channels:
            problems.append((f"agent.home_channels.{i}.platform",
                             f"{home.platform} cannot post where no conversation is open"))
        elif not config.platforms.section(home.platform).enabled:
            problems.append((f"agent.home_channels.{i}.platform",
                             f"{home.platform} is not enabled in platforms.{home.platform}"))
    return problems


def _describe(error: Mapping[str, Any]) -> tuple[str, str]:
    path = dotted(tuple(error.get("loc", ())))
    if error.get("type") == "extra_forbidden":
        loc = tuple(error.get("loc", ()))
        close = _close_names(loc[:-1], str(loc[-1])) if loc else []
        if close:
            return path, f"unknown setting; did you mean `{close[0]}`? (see config.example.yaml)"
        return path, "unknown setting (check the spelling; see config.example.yaml)"
    return path, error.get("msg", "invalid value")


def _close_names(parent: tuple[Any, ...], name: str) -> list[str]:
    """The settings at ``parent`` spelt like ``name`` (``sesions``: ``sessions``);
    difflib is imported only for a config that has a name wrong."""
    import difflib

    model = _model_at(parent)
    if model is None:
        return []
    names = [n for field_name, field in model.model_fields.items()
             for n in (field_name, field.alias) if n]
    return difflib.get_close_matches(name, names, n=1, cutoff=0.75)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose settings sit at ``loc`` (list indexes and mapping keys skipped)."""
    model: type[BaseModel] = Config
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue  # an index into a list of models, or a key of a mapping
        inner = _model_in(field.annotation)
        if inner is None:
            return None
        model = inner
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds: itself, or inside ``X | None``, ``list[X]``…"""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None

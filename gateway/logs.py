"""structlog set-up: readable lines on a terminal, JSON lines otherwise.

Logs go to stderr (journald under systemd) and, when the daemon runs, also to
a size-rotated file under the state directory. Context bound with
``structlog.contextvars`` (session key, session id, job and notification ids)
is task-local like the session context, so concurrent turns never mix their
log fields. Configured secrets (bot tokens, the model API key) are replaced by ``***`` in every
line, ours and the libraries'.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import structlog

from .config import Config, LoggingConfig, secret
from .private_files import PrivateRotatingFileHandler, private_dir

LOG_FILE_BYTES = 10 * 1024 * 1024
LOG_FILE_COUNT = 5
_MASK = "***"


def configure_logging(settings: LoggingConfig, stream: TextIO | None = None, *,
                      log_dir: Path | None = None, secrets: Iterable[str] = ()) -> None:
    stream = stream or sys.stderr
    masker = Masker(secrets)
    level = getattr(logging, settings.level.upper())
    use_json = settings.format == "json" or (
        settings.format == "auto" and not stream.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if use_json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    file_handler = None
    if log_dir is not None:
        private_dir(log_dir)
        file_handler = PrivateRotatingFileHandler(
            log_dir / "homing.log", maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_COUNT,
            encoding="utf-8")
    # the masker's two steps take and give what structlog's typing does not spell out
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        masker.fields,  # before rendering: a JSON or repr escape cannot hide a secret
        renderer,
        masker.line,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=lambda *args: _Sink(stream, file_handler),
        cache_logger_on_first_use=False,
    )
    # libraries that log through the standard library (aiohttp, httpx, discord.py)
    # go to the same places at warning level and above, redacted too
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for target in (logging.StreamHandler(stream), file_handler):
        if target is None:
            continue
        target.setFormatter(_LibraryFormatter(masker, as_json=use_json))
        root.addHandler(target)
    root.setLevel(logging.WARNING)
    # discord.py warns at every start that voice support is not installed; we use no voice
    logging.getLogger("discord.client").setLevel(logging.ERROR)


def secrets_of(config: Config) -> list[str]:
    p = config.platforms
    transcription = config.agent.transcription
    values = (p.web.token, p.telegram.token, p.discord.token, config.agent.api_key,
              transcription.api_key if transcription is not None else None)
    return [s for s in (secret(v) for v in values) if s]


class Masker:
    """The one mask for configured secrets, in every log line whatever they contain:
    applied to the fields before they are rendered, and to the rendered line (with the
    secret as JSON and repr would escape it) for whatever a renderer adds."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len,
                              reverse=True)
        forms = {form for s in self.secrets
                 for form in (s, json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1],
                              repr(s)[1:-1])}
        self._forms = sorted(forms, key=len, reverse=True)

    def text(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, _MASK)
        return text

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set):
            return type(value)(self.value(v) for v in value)
        if value is None or isinstance(value, bool | int | float):
            return value
        shown = str(value)  # an exception, a URL object: masked as it would be shown
        masked = self.text(shown)
        return value if masked == shown else masked

    def fields(self, logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
        return {k: self.value(v) for k, v in event.items()} if self.secrets else event

    def line(self, logger: Any, name: str, line: str) -> str:
        return self.text(line) if self.secrets else line


class _LibraryFormatter(logging.Formatter):
    """Library log records in our shape (a JSON line, or readable text), masked
    as a whole — tracebacks included, which is where URLs with tokens hide."""

    def __init__(self, masker: Masker, *, as_json: bool) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")
        self.masker = masker
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        if self.as_json:
            entry = {"event": record.getMessage(), "logger": record.name,
                     "level": record.levelname.lower(),
                     "timestamp": self.formatTime(record, "%Y-%m-%dT%H:%M:%S")}
            if record.exc_info:
                entry["exception"] = self.formatException(record.exc_info)
            return self.masker.text(json.dumps(self.masker.value(entry)))
        return self.masker.text(super().format(record))


class _Sink:
    """Writes each rendered line to the stream and, if there is one, the rotating file."""

    def __init__(self, stream: TextIO,
                 file_handler: logging.handlers.RotatingFileHandler | None) -> None:
        self.stream = stream
        self.file_handler = file_handler

    def msg(self, message: str) -> None:
        self.stream.write(message + "\n")
        self.stream.flush()
        handler = self.file_handler
        if handler is None:
            return
        # the line is rendered already: write it as it is, rotating when due
        handler.acquire()
        try:
            if handler.stream is None:  # closed by a rollover that failed: open again
                handler.stream = handler._open()
            if handler.shouldRollover(logging.makeLogRecord({"msg": message})):
                handler.doRollover()
            handler.stream.write(message + "\n")
            handler.stream.flush()
        finally:
            handler.release()

    debug = info = warning = warn = error = critical = exception = fatal = log = msg

"""structlog set-up: readable lines on a terminal, JSON lines otherwise.

Logs go to stderr (journald under systemd) and, when the daemon runs, also to
a size-rotated file under the state directory. Context bound with
``structlog.contextvars`` (session key, session id, job and notification ids)
is task-local like the session context, so concurrent turns never mix their
log fields. Configured secrets (bot tokens, the model API key) are replaced by ``***`` in every
line, ours and the libraries'.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import logging.handlers
import os
import queue
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import structlog

from gateway.config.registry import platforms
from gateway.config.settings import Config, LoggingConfig, secret
from gateway.machine.private_files import PrivateRotatingFileHandler, private_dir

LOG_FILE_BYTES = 10 * 1024 * 1024
LOG_FILE_COUNT = 5
_MASK = "***"
#: lines the writer thread takes in one go (one write and one flush for all of them)
_BATCH_LINES = 512
#: a rendered line: the same for the terminal and the file, or (terminal, file)
Line = str | tuple[str, str]


def configure_logging(settings: LoggingConfig, stream: TextIO | None = None, *,
                      log_dir: Path | None = None, secrets: Iterable[str] = (),
                      final: bool = False) -> None:
    """``final``: configured once for the process (``homing run``): each module's logger
    is then made on its first use and kept, so a line below the level costs a call that
    does nothing, not a logger made and thrown away. Tests that configure again and
    again leave it off."""
    stream = stream or sys.stderr
    masker = Masker(secrets)
    level = getattr(logging, settings.level.upper())
    use_json = settings.format == "json" or (
        settings.format == "auto" and not stream.isatty())
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
        *_renderers(use_json, stream.isatty(), file_handler is not None, masker),
    ]
    writer = LineWriter(stream, file_handler)
    sink = _Sink(writer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=lambda *args: sink,
        cache_logger_on_first_use=final,
    )
    # libraries that log through the standard library (aiohttp, httpx, discord.py)
    # go to the same places at warning level and above, redacted too
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    file_json = _LibraryFormatter(masker, as_json=True) \
        if file_handler is not None and not use_json else None
    root.addHandler(_ToWriter(writer, _LibraryFormatter(masker, as_json=use_json), file_json))
    _replace_writer(writer)
    root.setLevel(logging.WARNING)
    # discord.py warns at every start that voice support is not installed; we use no voice
    logging.getLogger("discord.client").setLevel(logging.ERROR)


def _renderers(use_json: bool, colors: bool, to_file: bool, masker: Masker) -> list[Any]:
    """The last steps: one JSON line for everything, or — on a terminal — readable text
    for the terminal and still a JSON line for the file, which is documented as JSON."""
    as_json = structlog.processors.JSONRenderer()
    if use_json:
        return [as_json, masker.line]
    console = structlog.dev.ConsoleRenderer(colors=colors)
    if not to_file:
        return [console, masker.line]

    def both(logger: Any, name: str, event: dict[str, Any]
             ) -> tuple[tuple[str], dict[str, str]]:
        shown = console(logger, name, dict(event))  # the console renderer takes keys out
        # structlog reads a tuple as the logger call's (args, kwargs)
        return ((masker.text(str(shown)),),
                {"file_line": masker.text(str(as_json(logger, name, event)))})

    return [both]


def secrets_of(config: Config) -> list[str]:
    transcription = config.agent.transcription
    values = (config.agent.api_key, transcription.api_key if transcription is not None
              else None, config.store.url)
    found = [s for s in (secret(v) for v in values) if s]
    for spec in platforms().specs:  # each platform's secret settings, enabled or not
        found += spec.secret_values(config.platforms.section(spec.name))
    url = secret(config.store.url)
    if url is not None:  # the password alone, wherever a driver's message shows it
        from urllib.parse import urlsplit

        password = urlsplit(url).password
        found += [password] if password else []
    return found


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


class LineWriter:
    """Writes rendered lines from a thread of its own.

    The event loop only hands a line over: a slow disk, a full pipe or a stalled
    journald never holds up a turn or a notice. The thread writes what has
    queued up in one go, flushes once per batch, and rotates the file by the
    bytes it has counted — no seek per line.
    """

    def __init__(self, stream: TextIO,
                 file_handler: logging.handlers.RotatingFileHandler | None) -> None:
        self.stream = stream
        self.file_handler = file_handler
        self._file_bytes = _size_of(file_handler)
        self._queue: queue.SimpleQueue[Line | threading.Event | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="homing-log", daemon=True)
        self._thread.start()

    def write(self, line: Line) -> None:
        self._queue.put(line)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every line handed over before this call is written."""
        if not self._thread.is_alive():
            return
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(5.0)
        if self.file_handler is not None:
            self.file_handler.close()

    def _run(self) -> None:
        while True:
            batch: list[Line] = []
            waiting: list[threading.Event] = []
            item = self._queue.get()
            while True:
                if item is None:
                    self._write(batch)
                    for done in waiting:
                        done.set()
                    return
                if isinstance(item, threading.Event):
                    waiting.append(item)
                else:
                    batch.append(item)
                if len(batch) >= _BATCH_LINES:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write(batch)
            for done in waiting:
                done.set()

    def _write(self, rendered: list[Line]) -> None:
        if not rendered:
            return
        text = "".join((line if isinstance(line, str) else line[0]) + "\n" for line in rendered)
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # stderr went away (a closed pipe): the file still gets the lines
        handler = self.file_handler
        if handler is None:
            return
        lines = [line if isinstance(line, str) else line[1] for line in rendered]
        try:
            chunk: list[str] = []
            size = 0
            for line in lines:
                length = len(line.encode("utf-8", "replace")) + 1
                full = self._file_bytes + size + length > handler.maxBytes > 0
                if full and (chunk or self._file_bytes):  # (a lone huge line still goes)
                    self._to_file(handler, chunk, size)
                    handler.doRollover()
                    self._file_bytes, chunk, size = 0, [], 0
                chunk.append(line)
                size += length
            self._to_file(handler, chunk, size)
        except OSError as exc:  # a full disk must not end the daemon: say it on stderr
            with contextlib.suppress(OSError, ValueError):
                self.stream.write(f"homing: the log file could not be written: {exc}\n")


    def _to_file(self, handler: logging.handlers.RotatingFileHandler, chunk: list[str],
                 size: int) -> None:
        if not chunk:
            return
        if handler.stream is None:  # closed by a rollover that failed: open again
            handler.stream = handler._open()
        handler.stream.write("".join(line + "\n" for line in chunk))
        handler.stream.flush()
        self._file_bytes += size


class _Sink:
    """What structlog logs to: the rendered line goes to the writer thread."""

    def __init__(self, writer: LineWriter) -> None:
        self.writer = writer

    def msg(self, message: str, file_line: str | None = None) -> None:
        self.writer.write(message if file_line is None else (message, file_line))

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


class _ToWriter(logging.Handler):
    """The libraries' standard-library records, formatted, to the same writer thread."""

    def __init__(self, writer: LineWriter, formatter: logging.Formatter,
                 file_formatter: logging.Formatter | None = None) -> None:
        super().__init__()
        self.writer = writer
        self.setFormatter(formatter)
        self.file_formatter = file_formatter

    def emit(self, record: logging.LogRecord) -> None:
        try:
            shown = self.format(record)
            if self.file_formatter is None:
                self.writer.write(shown)
            else:
                self.writer.write((shown, self.file_formatter.format(record)))
        except Exception:
            self.handleError(record)


_writer: LineWriter | None = None


def flush_logs() -> None:
    """Wait until every line logged so far is written (tests; before the process exits)."""
    if _writer is not None:
        _writer.flush()


def _replace_writer(writer: LineWriter) -> None:
    global _writer
    previous, _writer = _writer, writer
    if previous is not None:
        previous.close()


def _size_of(handler: logging.handlers.RotatingFileHandler | None) -> int:
    if handler is None:
        return 0
    try:
        return os.path.getsize(handler.baseFilename)
    except OSError:
        return 0


atexit.register(flush_logs)

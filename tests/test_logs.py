"""Log lines: JSON when not on a terminal, secrets masked, a rotating file."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import structlog

from gateway.config.settings import LoggingConfig
from gateway.telemetry.logs import configure_logging, flush_logs
from tests.fakes.discord_server import TOKEN as DISCORD_TOKEN
from tests.fakes.telegram_server import TOKEN as TELEGRAM_TOKEN


def test_secrets_are_masked_in_our_lines_and_the_libraries(tmp_path: Path) -> None:
    stream = io.StringIO()
    configure_logging(LoggingConfig(level="info", format="json"), stream,
                      log_dir=tmp_path / "logs", secrets=["123456:ABCDEF-token"])
    try:
        with structlog.contextvars.bound_contextvars(session_key="agent:main:web:dm:x"):
            structlog.get_logger("t").info("request_failed",
                                           url="https://api.example/bot123456:ABCDEF-token/x")
        logging.getLogger("httpx").warning("POST /bot123456:ABCDEF-token/getUpdates failed")
        try:
            raise RuntimeError("GET https://api.example/bot123456:ABCDEF-token/getMe")
        except RuntimeError:
            logging.getLogger("telegram.ext").exception("polling failed")
        flush_logs()  # lines are written by the log thread
        out = stream.getvalue()
        on_disk = (tmp_path / "logs" / "homing.log").read_text()
        for text in (out, on_disk):
            assert "ABCDEF-token" not in text and "***" in text
        lines = [json.loads(text) for text in out.splitlines()]  # every line is JSON
        assert "RuntimeError" in lines[-1]["exception"]
        line = lines[0]
        assert line["event"] == "request_failed"
        assert line["session_key"] == "agent:main:web:dm:x"  # bound context is in the line
    finally:
        configure_logging(LoggingConfig(level="info"))


def test_every_configured_secret_is_masked() -> None:
    from gateway.config.settings import parse_config
    from gateway.telemetry.logs import secrets_of

    telegram, discord = TELEGRAM_TOKEN, DISCORD_TOKEN
    config = parse_config({
        "platforms": {"web": {"token": "web-secret"},
                      "telegram": {"enabled": True, "token": telegram},
                      "discord": {"enabled": True, "token": discord}},
        "agent": {"backend": "openai", "model": "m", "api_key": "sk-model-secret"}}, {})
    assert sorted(secrets_of(config)) == sorted([discord, "sk-model-secret", telegram,
                                                 "web-secret"])


AWKWARD = ['tok"en\\with-quote', "tökén-ünïcode-ß", "back\\slash\\tok", "it's-a-token"]


def test_secrets_with_quotes_backslashes_and_accents_are_masked_everywhere(
        tmp_path: Path) -> None:
    """Masking after JSON escaping missed these (a `"` is `\\"` in the line)."""
    for fmt in ("json", "console"):
        stream = io.StringIO()
        configure_logging(LoggingConfig(level="info", format=fmt), stream,
                          log_dir=tmp_path / fmt, secrets=AWKWARD)
        try:
            log = structlog.get_logger("t")
            for secret in AWKWARD:
                log.info("field", url=f"https://x/bot{secret}/m", nested={"a": [secret]})
                log.info(f"in the event itself {secret}")
                log.warning("an object", error=RuntimeError(f"refused {secret}"))
                try:
                    raise ValueError(f"bad {secret}")
                except ValueError:
                    log.exception("with a traceback")
                logging.getLogger("httpx").warning("library says %s", secret)
                try:
                    raise OSError(f"library traceback {secret}")
                except OSError:
                    logging.getLogger("aiohttp").exception("library failed")
            flush_logs()
            written = stream.getvalue() + (tmp_path / fmt / "homing.log").read_text()
        finally:
            configure_logging(LoggingConfig(level="info"))
        for secret in AWKWARD:
            forms = {secret, json.dumps(secret)[1:-1], repr(secret)[1:-1],
                     json.dumps(secret, ensure_ascii=False)[1:-1]}
            assert not [f for f in forms if f in written], (fmt, secret)
        assert written.count("***") >= 6 * len(AWKWARD)


def test_the_log_file_rotates_by_the_bytes_written_and_keeps_every_line(
        tmp_path: Path) -> None:
    import gateway.telemetry.logs as logs
    stream = io.StringIO()
    configure_logging(LoggingConfig(level="info", format="json"), stream,
                      log_dir=tmp_path / "logs")
    try:
        assert logs._writer is not None and logs._writer.file_handler is not None
        logs._writer.file_handler.maxBytes = 4096  # small, to rotate within a test
        log = structlog.get_logger("t")
        for n in range(300):
            log.info("line", n=n, padding="x" * 40)
        flush_logs()
    finally:
        configure_logging(LoggingConfig(level="info"))
    files = sorted((tmp_path / "logs").glob("homing.log*"))
    assert len(files) >= 2  # rotated (5 kept, oldest first dropped)
    assert all(f.stat().st_size <= 4096 for f in files)
    kept = [json.loads(line)["n"] for f in files for line in f.read_text().splitlines()]
    newest = sorted(kept)[-1]
    assert newest == 299 and len(stream.getvalue().splitlines()) == 300  # stderr has all


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_file_still_gets_json_lines_only(tmp_path: Path) -> None:
    """Readable (coloured) text on the terminal; homing.log stays JSON lines, as the
    README says, for whoever greps or ships it — and masked the same way."""
    terminal = _Terminal()
    configure_logging(LoggingConfig(level="info"), terminal, log_dir=tmp_path / "logs",
                      secrets=["123456:ABCDEF-token"])
    try:
        structlog.get_logger("t").info("job_started", job_id="j1",
                                       url="https://x/bot123456:ABCDEF-token/getMe")
        logging.getLogger("httpx").warning("GET /bot123456:ABCDEF-token/getMe failed")
        flush_logs()
        shown = terminal.getvalue()
        assert "\x1b[" in shown and "job_started" in shown  # colours: a person reads it
        on_disk = (tmp_path / "logs" / "homing.log").read_text().splitlines()
        records = [json.loads(line) for line in on_disk]  # no colour codes: each parses
        assert [r["event"] for r in records][:1] == ["job_started"]
        assert records[0]["job_id"] == "j1" and "\x1b[" not in "".join(on_disk)
        assert "GET /bot***/getMe failed" in records[1]["event"]
        assert "ABCDEF-token" not in shown + "".join(on_disk)
    finally:
        configure_logging(LoggingConfig(level="info"))

"""Log lines: JSON when not on a terminal, secrets masked, a rotating file."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import structlog

from gateway.config import LoggingConfig
from gateway.logs import configure_logging


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
    from gateway.config import parse_config
    from gateway.logs import secrets_of

    config = parse_config({
        "platforms": {"web": {"token": "web-secret"},
                      "telegram": {"enabled": True, "token": "tg-secret"},
                      "discord": {"enabled": True, "token": "dc-secret"}},
        "agent": {"backend": "openai", "model": "m", "api_key": "sk-model-secret"}}, {})
    assert sorted(secrets_of(config)) == ["dc-secret", "sk-model-secret", "tg-secret",
                                          "web-secret"]

"""structlog set-up: readable lines on a terminal, JSON lines otherwise.

Context bound with ``structlog.contextvars`` (session key, session id) is
task-local like the session context, so concurrent turns never mix their
log fields.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from .config import LoggingConfig


def configure_logging(settings: LoggingConfig, stream: TextIO | None = None) -> None:
    stream = stream or sys.stderr
    level = getattr(logging, settings.level.upper())
    use_json = settings.format == "json" or (
        settings.format == "auto" and not stream.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if use_json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    # libraries that log through the standard library (aiohttp, httpx) go
    # to the same stream at warning level and above
    logging.basicConfig(stream=stream, level=logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    # discord.py warns at every start that voice support is not installed; we use no voice
    logging.getLogger("discord.client").setLevel(logging.ERROR)

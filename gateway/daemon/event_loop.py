"""Which event loop the daemon runs on: uvloop where it is installed (a dependency on
Linux), the standard loop otherwise, or when ``HOMING_LOOP=asyncio`` asks for it.

uvloop runs the same asyncio code with its callbacks, futures and transports in C:
about a fifth less CPU a notice (bench/RESULTS.md, both ways). Nothing in Homing
depends on which loop it is; the environment variable exists so an operator can rule
it out when chasing a problem.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Mapping

from gateway.errors import ConfigurationError

#: ``HOMING_LOOP``: ``uvloop`` (the default where installed) or ``asyncio``
LOOP_VARIABLE = "HOMING_LOOP"
LOOPS = ("uvloop", "asyncio")


class UnknownLoop(ConfigurationError, ValueError):
    """``HOMING_LOOP`` names no loop Homing knows."""


def loop_factory(environ: Mapping[str, str] = os.environ
                 ) -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """The loop's name and a factory for ``asyncio.Runner`` (None: the standard loop)."""
    wanted = environ.get(LOOP_VARIABLE, "").strip().lower() or "uvloop"
    if wanted not in LOOPS:
        raise UnknownLoop(f"{LOOP_VARIABLE}={wanted!r}: use one of {', '.join(LOOPS)}")
    if wanted == "asyncio":
        return "asyncio", None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:  # not on this platform: the standard loop does the same work
        return "asyncio", None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return "uvloop", factory


def loop_name() -> str:
    """The running loop, as the start-up log and ``homing status`` name it."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"

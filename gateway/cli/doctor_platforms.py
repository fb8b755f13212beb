"""The checks ``homing doctor`` makes against the platforms themselves: which platforms
were found (built in, or registered by an installed package), then each enabled
platform's own probes (the ``doctor`` its spec names), asked at the same time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from gateway.config.registry import load_object, platforms
from gateway.config.settings import Config
from gateway.platforms.checks import Check, DoctorContext, fail, ok, warn


async def platform_checks(config: Config, daemon_pid: int | None) -> list[Check]:
    """The registry, then the enabled platforms' probes."""
    registry = platforms()
    found = [ok("platforms", "found " + ", ".join(
        f"{spec.name} ({spec.origin})" for spec in registry.specs))]
    found += [warn("platform package", f"{refused.source}: {refused.reason}",
                   "reinstall or remove that package; the other platforms work")
              for refused in registry.refused]
    context = DoctorContext(config, daemon_pid)
    asked = [_probe(spec.name, key, spec.doctor, settings, context)
             for spec in registry.specs
             if spec.doctor is not None and config.platforms.section(spec.name).enabled
             for key, settings in config.platforms.bots(spec.name)]
    results = await asyncio.gather(*asked)
    return found + [check for checks in results for check in checks]


async def _probe(name: str, key: str, reference: str, settings: Any,
                 context: DoctorContext) -> list[Check]:
    """One bot's probes (a platform's, or one of its accounts'); a platform whose probes
    are broken says so, as a failure of its own, and the others' still run. An
    account's checks are named after it (``telegram/team token``)."""
    try:
        probes: Callable[[Any, DoctorContext], Awaitable[list[Check]]] = load_object(reference)
        checks = await probes(settings, context)
    except Exception as exc:  # a third party's probes must not end the whole doctor
        return [fail(f"{key} checks", f"its probes ({reference}) failed: "
                                      f"{type(exc).__name__}: {exc}",
                     "report it to the platform package's authors")]
    if key == name:
        return checks
    return [replace(c, name=key + c.name[len(name):]) if c.name.startswith(name) else c
            for c in checks]

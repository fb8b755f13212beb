"""The checks ``homing doctor`` makes against the platforms themselves: which platforms
were found (built in, or registered by an installed package), then each enabled
platform's own probes (the ``doctor`` its spec names), asked at the same time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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
    asked = [_probe(spec.name, spec.doctor, config.platforms.section(spec.name), context)
             for spec in registry.specs
             if spec.doctor is not None and config.platforms.section(spec.name).enabled]
    results = await asyncio.gather(*asked)
    return found + [check for checks in results for check in checks]


async def _probe(name: str, reference: str, settings: Any, context: DoctorContext
                 ) -> list[Check]:
    """One platform's probes; a platform whose probes are broken says so, as a failure
    of its own, and the others' still run."""
    try:
        probes: Callable[[Any, DoctorContext], Awaitable[list[Check]]] = load_object(reference)
        return await probes(settings, context)
    except Exception as exc:  # a third party's probes must not end the whole doctor
        return [fail(f"{name} checks", f"its probes ({reference}) failed: "
                                       f"{type(exc).__name__}: {exc}",
                     "report it to the platform package's authors")]

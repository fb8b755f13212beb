"""The platforms this gateway knows: the built-in ones listed here, and any an installed
package registers under the entry-point group ``homing.platforms``, found the same way.

A built-in platform is one line of :data:`BUILT_IN`; a third-party one is one entry
point in its own package's metadata, e.g. in its ``pyproject.toml``::

    [project.entry-points."homing.platforms"]
    matrix = "homing_matrix.spec:PLATFORM"

Each names a :class:`~gateway.config.platform.PlatformSpec`. Only the spec is imported
here (its settings class, a few regular expressions): its adapter and client library are
imported once the platform is enabled. A package that fails to load, or names a platform
already known, is left out and said so (``homing doctor`` shows it, the daemon logs it
as it starts); the others load. Nothing is logged here: this runs as the config is
read, before logging is set up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from gateway.config.platform import PlatformSpec

ENTRY_POINT_GROUP = "homing.platforms"

#: the built-in platforms, in the order they are listed and connected
BUILT_IN: tuple[str, ...] = (
    "gateway.platforms.web.spec:PLATFORM",
    "gateway.platforms.telegram.spec:PLATFORM",
    "gateway.platforms.discord.spec:PLATFORM",
    "gateway.platforms.slack.spec:PLATFORM",
    "gateway.platforms.matrix.spec:PLATFORM",
)


@dataclass(frozen=True, slots=True)
class Refused:
    """A platform package that was found and not loaded, and why."""

    source: str
    reason: str


@dataclass(frozen=True)
class Registry:
    """The platforms by name, in order, and the packages that were refused."""

    specs: tuple[PlatformSpec, ...]
    refused: tuple[Refused, ...] = ()
    _by_name: dict[str, PlatformSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for spec in self.specs:
            self._by_name[spec.name] = spec
            for alias in spec.cli_names:
                self._by_name.setdefault(alias, spec)

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in self.specs]

    def get(self, name: str) -> PlatformSpec | None:
        """The platform called ``name`` (or one of its CLI names)."""
        return self._by_name.get(name)

    def __getitem__(self, name: str) -> PlatformSpec:
        spec = self.get(name)
        if spec is None:
            raise KeyError(f"no platform {name!r}; known: {', '.join(self.names)}")
        return spec


def load_object(reference: str) -> Any:
    """``"package.module:attribute"``, imported."""
    module, _, attribute = reference.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        found = getattr(found, part)
    return found


@cache
def platforms() -> Registry:
    """Every platform, built-in first; read once per process."""
    return discover(BUILT_IN, entry_points(group=ENTRY_POINT_GROUP))


def dedupes_sends(platform: str) -> bool:
    """Whether ``platform`` posts a send made again with the same key once (Discord's
    nonce, Matrix's transaction id, the web page's key): where it does not (Telegram),
    a send a kill left unrecorded may be shown twice."""
    spec = platforms().get(platform)
    return spec is not None and spec.capabilities.dedupe_sends


def discover(built_in: tuple[str, ...], plugins: Any) -> Registry:
    specs: list[PlatformSpec] = []
    refused: list[Refused] = []
    taken: dict[str, str] = {}
    sources: list[tuple[str, str, EntryPoint | None]] = [
        (ref, "built-in", None) for ref in built_in]
    for point in plugins:
        dist = point.dist
        origin = f"{dist.name} {dist.version}" if dist is not None else point.value
        sources.append((point.value, origin, point))
    for reference, origin, point in sources:
        try:
            spec = point.load() if point is not None else load_object(reference)
        except Exception as exc:  # a broken plugin must not keep the rest from loading
            refused.append(Refused(origin, f"{reference} failed to load: "
                                           f"{type(exc).__name__}: {exc}"))
            continue
        if not isinstance(spec, PlatformSpec):
            refused.append(Refused(origin, f"{reference} is a {type(spec).__name__}, "
                                           f"not a PlatformSpec"))
            continue
        reason = _unusable(spec, taken)
        if reason is not None:
            refused.append(Refused(origin, reason))
            continue
        if point is not None:
            spec = replace(spec, origin=origin)
        taken[spec.name] = origin
        specs.append(spec)
    return Registry(tuple(specs), tuple(refused))


def _unusable(spec: PlatformSpec, taken: dict[str, str]) -> str | None:
    name = spec.name
    if not name.isidentifier() or not name.islower():
        return f"platform name {name!r} is not a lower-case identifier"
    if name in taken:
        return f"platform {name!r} is already registered by {taken[name]}"
    return None

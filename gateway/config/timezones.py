"""Timezone names: one check, for the config and for schedules alike."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def check_zone(name: str) -> str:
    """``name`` when it is an IANA timezone this machine knows; ValueError otherwise."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone '{name}': use an IANA name such as "
                         f"Europe/Berlin or UTC") from None
    return name

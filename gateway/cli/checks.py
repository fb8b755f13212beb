"""One verdict of ``homing doctor``: what was checked, how it went, and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]
_LABELS: dict[Status, str] = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "skip"}


@dataclass(frozen=True, slots=True)
class Check:
    """One verdict: ``name`` is stable (scripts match on it), ``detail`` says what was
    found, ``fix`` what to do about a warning or a failure."""

    name: str
    status: Status
    detail: str
    fix: str | None = None

    def line(self) -> str:
        text = f"{_LABELS[self.status]} {self.name}: {self.detail}"
        return f"{text} — fix: {self.fix}" if self.fix else text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def warn(name: str, detail: str, fix: str | None = None) -> Check:
    return Check(name, "warn", detail, fix)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, "fail", detail, fix)


def skip(name: str, detail: str) -> Check:
    return Check(name, "skip", detail)

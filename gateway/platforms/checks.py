"""One verdict of ``homing doctor``: what was checked, how it went, and the fix. A
platform's probes (its spec's ``doctor``) return these."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from gateway.platforms.probe import ProbeError, TokenRefused

if TYPE_CHECKING:
    from gateway.config.settings import Config

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


@dataclass(frozen=True, slots=True)
class DoctorContext:
    """What a platform's ``doctor`` probes are asked with, besides its own settings."""

    #: the whole config (home channels, attachments…)
    config: Config
    #: the running daemon's process id, where one runs (a second poller is then its)
    daemon_pid: int | None = None


def token_failure(platform: str, variable: str, exc: ProbeError) -> Check:
    """The platform could not be asked, or refused the token: then say where it goes."""
    fix = exc.fix
    if isinstance(exc, TokenRefused):
        fix = (f"{exc.fix}, into homing.env ({variable}) or wherever "
               f"platforms.{platform}.token takes it from")
    return fail(f"{platform} token", exc.problem, fix)

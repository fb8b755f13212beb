"""What a live question to a platform says when it goes wrong: the problem and its fix,
each in one line an operator acts on. ``homing doctor`` prints them as a failed check,
``homing setup`` as the reason it asks again."""

from __future__ import annotations

from urllib.parse import urlsplit

from gateway.errors import PlatformError

#: every call to a platform answers within this, or is a failure naming the host
TIMEOUT_SECONDS = 10.0


class ProbeError(PlatformError):
    """A platform refused, or could not be reached; ``fix`` says what to do."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


class TokenRefused(ProbeError):
    """The platform answered, and refused the token (401)."""


def host_of(url: str) -> str:
    """The host a URL points at, as an error names it."""
    return urlsplit(url).hostname or url

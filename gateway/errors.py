"""One family of errors: every error Homing raises on purpose is a ``HomingError``,
its message written for the person who reads it (the operator, the user, the CLI).

The subclasses say whose the problem is, so a caller can treat a kind alike:

- ``ConfigurationError``: the config, the setup answers or the environment must
  change; the CLI exits with the config code.
- ``StoreError``: the state database cannot do what was asked (closed, someone
  else's, unreadable).
- ``PlatformError``: a chat platform or the model server answered wrong, or not at
  all.
- ``RefusedInput``: what came in (a message, a file, a command, a name) is not
  taken, and the reason is said to whoever sent it.

Classes that were a ``ValueError``, ``RuntimeError`` or ``LookupError`` before stay
one too, so nothing that catches those changes.
"""

from __future__ import annotations


class HomingError(Exception):
    """An error Homing raises on purpose."""


class ConfigurationError(HomingError):
    """The config, the setup's answers or the environment must change."""


class StoreError(HomingError):
    """The state database cannot do what was asked."""


class PlatformError(HomingError):
    """A chat platform or the model server answered wrong, or not at all."""


class RefusedInput(HomingError):
    """What came in is not taken; the message says why."""

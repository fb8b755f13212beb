"""The parametrisation: every case of ``test_contract.py`` runs once per platform that
the case applies to.

A case says which promise it checks with ``@pytest.mark.promise(Promise.X)`` and takes
the ``harness`` fixture; it is generated for every platform in :data:`PLATFORMS` whose
harness does not list that promise in ``does_not_apply`` (nor its spec's capabilities
rule it out: no files in and out, no file case). The pairs left out are
generated for ``test_what_does_not_apply`` instead, the reason in the test id — never
skipped, so a run shows what each platform was and was not checked on.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator

import pytest

from gateway.config.registry import platforms
from tests.conformance.harness import Harness, Promise

#: the example platform is a package of its own, installed beside homing
INSTALL_HINT = ("install it: .venv/bin/pip install ./tests/example_platform (the README's "
                "test command does)")

#: the platforms under the contract: each ``tests/conformance/<name>.py`` has ``HARNESS``
PLATFORMS = ("web", "telegram", "discord", "relay", "slack", "matrix")


def harness_class(platform: str) -> type[Harness]:
    harness: type[Harness] = importlib.import_module(
        f"tests.conformance.{platform}").HARNESS
    assert harness.name == platform, f"tests/conformance/{platform}.py is {harness.name}'s"
    return harness


def left_out(platform: str) -> dict[Promise, str]:
    """The promises a platform is not checked on, and why: what its harness says, and
    what its spec's capabilities say it cannot do (gateway/config/platform.py)."""
    found = dict(harness_class(platform).does_not_apply)
    spec = platforms().get(platform)
    assert spec is not None, (f"{platform} is not registered"
                              + (f": {INSTALL_HINT}" if platform == "relay" else ""))
    can = spec.capabilities
    if not (can.files_in and can.files_out):
        found.setdefault(Promise.FILES, f"{spec.title} declares no files in and out "
                                        f"(its capabilities)")
    return found


def not_applying() -> Iterator[tuple[str, Promise, str]]:
    """(platform, promise, reason) for every pair the cases are not generated for."""
    for platform in PLATFORMS:
        for promise, reason in left_out(platform).items():
            yield platform, promise, reason


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "promise(Promise): the contract promise a "
                            "conformance case checks (tests/conformance/conftest.py)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("promise")
        assert marker is not None, f"{metafunc.function.__name__} names no promise"
        promise: Promise = marker.args[0]
        applying = [p for p in PLATFORMS if promise not in left_out(p)]
        metafunc.parametrize("harness", applying, indirect=True)
    elif "reason" in metafunc.fixturenames:
        pairs = list(not_applying())
        metafunc.parametrize(
            ("platform", "promise", "reason"), pairs,
            ids=[f"{p}-{promise.value}-{_slug(reason)}" for p, promise, reason in pairs])


@pytest.fixture
def harness(request: pytest.FixtureRequest) -> Harness:
    """A fresh harness of the platform this case runs for."""
    made_with = harness_class(request.param)
    needs = getattr(made_with, "needs", ())  # fixtures it is made with: a real server
    made: Harness = made_with(**{name: request.getfixturevalue(name) for name in needs})
    return made


def _slug(reason: str) -> str:
    """The reason's first clause, as a test id can carry it."""
    first = reason.split(":")[0]
    return re.sub(r"[^a-z0-9]+", "_", first.lower()).strip("_")

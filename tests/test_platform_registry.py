"""The platform registry: the built-in platforms and the example third-party package
(tests/example_platform/, installed beside homing by the README's test command) are
found the same way, a broken package is refused without taking the others with it, and
a registered platform is configured, checked, masked and doctored like a built-in one."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint, distribution
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.platform import PlatformSpec
from gateway.config.registry import BUILT_IN, discover, platforms
from gateway.config.settings import ConfigError, parse_config
from gateway.daemon.assembly import build_adapters
from gateway.telemetry.logs import secrets_of
from tests.fakes.relay_server import TOKEN, FakeRelay
from tests.real_daemon import home_env, run_cli

#: the built-in platforms' names, as BUILT_IN lists them (gateway/platforms/<name>/spec.py)
BUILT_IN_NAMES = [ref.split(":")[0].split(".")[2] for ref in BUILT_IN]
INSTALL_HINT = ("the example platform is not installed: run the README's test command, "
                "which installs ./tests/example_platform beside homing")


@pytest.fixture(scope="module")
def relay() -> PlatformSpec:
    spec = platforms().get("relay")
    assert spec is not None, INSTALL_HINT
    return spec


class _Dist:
    name, version = "broken-plugin", "9.9"


def _point(name: str, value: str) -> EntryPoint:
    point = EntryPoint(name, value, "homing.platforms")
    return point._for(_Dist())  # type: ignore[attr-defined, no-any-return]


def test_the_example_package_is_found_through_its_entry_point_like_a_built_in(
        relay: PlatformSpec) -> None:
    dist = distribution("homing-example-platform")
    (point,) = [p for p in dist.entry_points if p.group == "homing.platforms"]
    assert point.name == "relay" and point.load() is not None
    assert relay.origin == f"homing-example-platform {dist.version}"
    names = platforms().names
    assert names[:len(BUILT_IN)] == BUILT_IN_NAMES  # the built-ins first, as listed
    assert names[len(BUILT_IN):] == ["relay"]


def test_a_broken_or_clashing_package_is_refused_and_the_others_load() -> None:
    found = discover(BUILT_IN, [
        _point("bad", "no_such_module.spec:PLATFORM"),
        _point("notspec", "gateway.config.registry:BUILT_IN"),
        _point("twice", "gateway.platforms.telegram.spec:PLATFORM"),
    ])
    assert found.names == BUILT_IN_NAMES
    reasons = {r.reason.split(":")[0]: r for r in found.refused}
    assert len(found.refused) == 3
    assert "ModuleNotFoundError" in reasons["no_such_module.spec"].reason
    assert "is a tuple, not a PlatformSpec" in " ".join(r.reason for r in found.refused)
    assert any("already registered by built-in" in r.reason for r in found.refused)
    assert {r.source for r in found.refused} == {"broken-plugin 9.9"}


def test_a_registered_platform_s_section_is_validated_by_its_own_settings(
        relay: PlatformSpec) -> None:
    config = parse_config({"platforms": {"relay": {
        "enabled": True, "token": TOKEN, "base_url": "http://127.0.0.1:1/v1",
        "allowed_users": [7]}}}, {})
    assert config.platforms.enabled() == ["web", "relay"]
    assert config.platforms.relay.allowed_users == ["7"]
    with pytest.raises(ConfigError) as typo:
        parse_config({"platforms": {"relay": {"enabled": True, "tokne": TOKEN}}}, {})
    assert ("platforms.relay.tokne", "unknown setting; did you mean `token`? "
                                     "(see config.example.yaml)") in typo.value.problems
    with pytest.raises(ConfigError) as missing:
        parse_config({"platforms": {"relay": {"enabled": True}}}, {})
    assert ("platforms.relay.token", "required when relay is enabled") in \
        missing.value.problems
    with pytest.raises(ConfigError) as shape:
        parse_config({"platforms": {"relay": {"enabled": True,
                                              "token": "7:" + "x" * 35}}}, {})
    (problem,) = [m for p, m in shape.value.problems if p == "platforms.relay.token"]
    assert problem.startswith("does not look like a Relay token (relay-token- and 16")
    assert "7:" + "x" * 35 not in problem
    with pytest.raises(ConfigError) as unknown:
        parse_config({"platforms": {"relya": {"enabled": True}}}, {})
    assert unknown.value.problems[0][0] == "platforms.relya"
    assert "did you mean `relay`?" in unknown.value.problems[0][1]


def test_its_secret_is_masked_and_its_adapter_made_only_when_enabled(
        relay: PlatformSpec) -> None:
    off = parse_config({"platforms": {"relay": {"token": TOKEN}}}, {})
    assert TOKEN in secrets_of(off)  # masked even while the platform is off
    assert [a.platform for a in build_adapters(off)] == ["web"]
    on = parse_config({"platforms": {"web": {"enabled": False}, "relay": {
        "enabled": True, "token": TOKEN}}}, {})
    (adapter,) = build_adapters(on)
    assert adapter.platform == "relay" and type(adapter).__module__ == "homing_relay.adapter"


def _home(home: Path, relay: FakeRelay, token: str) -> dict[str, str]:
    home.mkdir(mode=0o700)
    platforms_: dict[str, Any] = {"web": {"port": 0}, "relay": {
        "enabled": True, "token": "${RELAY_TOKEN}", "base_url": relay.base_url}}
    (home / "config.yaml").write_text(yaml.safe_dump({"platforms": platforms_}))
    env_file = home / "homing.env"
    env_file.write_text(f"RELAY_TOKEN={token}\n")
    env_file.chmod(0o600)
    return home_env(home)


async def test_doctor_lists_the_platforms_found_and_asks_the_enabled_ones(
        tmp_path: Path, relay: PlatformSpec) -> None:
    async with FakeRelay() as server:
        code, out, err = await run_cli("doctor", "--json", env=_home(
            tmp_path / "home", server, TOKEN))
        checks = {c["name"]: c for c in json.loads(out)}
        found = checks["platforms"]
        assert found["status"] == "ok", err
        assert found["detail"] == "found " + ", ".join(
            [f"{name} (built-in)" for name in BUILT_IN_NAMES] + [f"relay ({relay.origin})"])
        assert checks["relay token"] == {"name": "relay token", "status": "ok",
                                         "detail": "the bot is relay bot", "fix": None}
        server.token = "relay-token-" + "f" * 16  # the token is changed on the server
        code, out, _ = await run_cli("doctor", "--json", env=home_env(tmp_path / "home"))
        refused = {c["name"]: c for c in json.loads(out)}["relay token"]
        assert code == 1 and refused["status"] == "fail"
        assert "RELAY_TOKEN" in refused["fix"]

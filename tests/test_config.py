from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.config.settings import ConfigError, find_config_file, load_config, secret
from tests.fakes.telegram_server import TOKEN as TELEGRAM_TOKEN


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_match_the_documented_keys() -> None:
    config = load_config(None, environ={"HOMING_HOME": "/nonexistent-homing-home"})
    web, tg, dc = config.platforms.web, config.platforms.telegram, config.platforms.discord
    assert (web.enabled, web.host, web.port, web.token) == (True, "127.0.0.1", 8765, None)
    assert (tg.enabled, tg.base_url, tg.base_file_url) == (
        False, "https://api.telegram.org/bot", "https://api.telegram.org/file/bot")
    assert (dc.enabled, dc.api_base, dc.gateway_url) == (
        False, "https://discord.com/api/v10", "wss://gateway.discord.gg")
    assert config.sessions.group_sessions_per_user is True
    assert config.sessions.thread_sessions_per_user is False
    assert config.agent.backend == "command"


def test_config_file_precedence(tmp_path: Path) -> None:
    explicit = write(tmp_path / "explicit.yaml", "platforms: {web: {port: 1}}")
    from_env = write(tmp_path / "env.yaml", "platforms: {web: {port: 2}}")
    home = tmp_path / "home"
    write(home / "config.yaml", "platforms: {web: {port: 3}}")
    env = {"HOMING_CONFIG": str(from_env), "HOMING_HOME": str(home)}
    assert load_config(explicit, env).platforms.web.port == 1
    assert load_config(None, env).platforms.web.port == 2
    assert load_config(None, {"HOMING_HOME": str(home)}).platforms.web.port == 3
    assert find_config_file(None, {"HOMING_HOME": str(tmp_path / "empty")}) is None


def test_homing_home_overrides_home_in_the_file(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "home: /somewhere/else")
    config = load_config(cfg, {"HOMING_HOME": str(tmp_path / "h")})
    assert config.state_db == tmp_path / "h" / "state.db"


def test_secrets_come_from_the_environment(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml",
                "platforms:\n  telegram: {token: '${TG_TOKEN}', allowed_users: [42, '@ann']}\n"
                "  web: {token: '${WEB_TOKEN:-fallback}'}\n")
    config = load_config(cfg, {"TG_TOKEN": "123:abc"})
    assert secret(config.platforms.telegram.token) == "123:abc"
    assert config.platforms.telegram.allowed_users == ["42", "@ann"]
    assert secret(config.platforms.web.token) == "fallback"


def test_approvers_given_as_numbers_are_ids(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "approvals: {approvers: {telegram: [42, '43']}}")
    assert load_config(cfg, {}).approvals.approvers == {"telegram": ["42", "43"]}


def test_a_missing_variable_names_the_field(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "platforms: {discord: {token: '${NOPE}'}}")
    with pytest.raises(ConfigError) as err:
        load_config(cfg, {"HOMING_HOME": str(tmp_path / "home")})
    assert err.value.problems == [
        ("platforms.discord.token", "environment variable NOPE is not set; export it in the "
         f"shell, or define it in {tmp_path / 'home' / 'homing.env'} "
         "($HOMING_HOME/homing.env) as NOPE=value")]


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_an_unset_variable_says_where_it_can_be_set(tmp_path: Path, command: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOMING_HOME", str(home))
    monkeypatch.delenv("HOMING_CONFIG", raising=False)
    monkeypatch.delenv("NOPE", raising=False)
    write(home / "config.yaml", "platforms: {discord: {enabled: true, token: '${NOPE}'}}")
    assert main([command]) == 2
    err = capsys.readouterr().err
    assert ("  platforms.discord.token: environment variable NOPE is not set; export it in "
            f"the shell, or define it in {home / 'homing.env'}") in err


@pytest.mark.parametrize(("text", "field"), [
    ("platforms: {web: {prot: 80}}", "platforms.web.prot"),
    ("sesions: {}", "sesions"),
    ("platforms: {web: {port: eighty}}", "platforms.web.port"),
    ("platforms: {telegram: {enabled: maybe}}", "platforms.telegram.enabled"),
    ("agent: {backend: gpt}", "agent.backend"),
    ("agent: {backend: openai, base_url: 'http://127.0.0.1:8080/v1'}", "agent.model"),
    ("agent: {backend: openai, model: gpt-4o-mini}", "agent.api_key"),
    ("agent: {max_retries: -1}", "agent.max_retries"),
    ("agent: {home_channels: [{name: ops, platform: telegram, chat_id: 1}]}",
     "agent.home_channels.0.platform"),
    (f"platforms: {{telegram: {{enabled: true, token: '{TELEGRAM_TOKEN}'}}}}\n"
     "agent: {home_channels: [{name: ops, platform: telegram, chat_id: 1},"
     " {name: ops, platform: telegram, chat_id: 2}]}", "agent.home_channels.1.name"),
    ("agent: {home_channels: [{name: ops, platform: web, chat_id: a}]}",
     "agent.home_channels.0.platform"),
    ("agent: {keep_recent_turns: 0}", "agent.keep_recent_turns"),
    ("platforms: {web: {host: 0.0.0.0}}", "platforms.web.token"),
    ("approvals: {patterns: ['(unclosed']}", "approvals.patterns"),
    ("approvals: {mode: sometimes}", "approvals.mode"),
    ("approvals: {approvers: {irc: ['1']}}", "approvals.approvers.irc"),
    ("platforms: {web: [1, 2]", "<yaml line 1"),
    ("- just\n- a list", "<root>"),
])
def test_check_config_exits_2_naming_the_field(tmp_path: Path, text: str, field: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path / "c.yaml", text)
    assert main(["check-config", "--config", str(cfg)]) == 2
    assert field in capsys.readouterr().err


def test_check_config_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).parent.parent / "config.example.yaml"
    assert main(["check-config", "--config", str(example)]) == 0
    assert "config OK" in capsys.readouterr().out


def test_non_loopback_web_with_token_is_accepted(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "platforms: {web: {host: 0.0.0.0, token: s3cret}}")
    assert secret(load_config(cfg, {}).platforms.web.token) == "s3cret"


def _dotted_fields(model: type, prefix: str = "") -> list[str]:
    from pydantic import BaseModel

    paths = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths.extend(_dotted_fields(annotation, f"{prefix}{name}."))
        else:
            paths.append(prefix + name)
    return paths


def test_the_example_documents_every_option() -> None:
    """Every setting of the core and of the built-in platforms (a platform package
    installed from elsewhere documents its own)."""
    import yaml

    from gateway.config.registry import platforms
    from gateway.config.settings import Config

    example = yaml.safe_load((Path(__file__).parent.parent / "config.example.yaml").read_text())

    def has(path: str) -> bool:
        node = example
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    elsewhere = tuple(f"platforms.{spec.name}." for spec in platforms().specs
                      if spec.origin != "built-in")
    missing = [p for p in _dotted_fields(Config) if not has(p) and not p.startswith(elsewhere)]
    assert missing == []


def test_config_may_come_before_or_after_the_command(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "missing.yaml")
    assert main(["--config", missing, "check-config"]) == 2
    assert main(["check-config", "--config", missing]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_a_relative_home_is_next_to_the_config_file(tmp_path: Path) -> None:
    cfg = write(tmp_path / "etc" / "homing.yaml", "home: state")
    assert load_config(cfg, {}).state_db == tmp_path / "etc" / "state" / "state.db"


def test_reading_commands_never_create_a_state_database(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path / "c.yaml", f"home: {tmp_path / 'nowhere'}")
    for command in ("sessions", "jobs", "notifications"):
        assert main([command, "--config", str(cfg)]) == 1
    assert "no state database" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


def test_tokens_and_keys_never_show_in_the_config_objects() -> None:
    from gateway.config.settings import parse_config

    token = "123456789:AAH-SECRET-and-thirty-five-charact"
    config = parse_config({"platforms": {"telegram": {"enabled": True, "token": token}},
                           "agent": {"backend": "openai", "model": "m",
                                     "api_key": "sk-SECRET"}}, {})
    shown = repr(config) + str(config.model_dump())
    assert "SECRET" not in shown
    assert secret(config.platforms.telegram.token) == token
    assert secret(config.agent.api_key) == "sk-SECRET"

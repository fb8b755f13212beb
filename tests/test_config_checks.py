"""What ``homing check-config`` (and ``homing run``) refuse, through the real command
line: every refusal exits 2 and names the field or the line, never with a traceback;
a good config says which file it checked."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

import gateway.config.home_check as home_check
from gateway.cli.main import main
from gateway.config.settings import Config, ConfigError, load_config, parse_config, secret
from tests.fakes.discord_server import TOKEN as DISCORD_TOKEN
from tests.fakes.telegram_server import TOKEN as TELEGRAM_TOKEN
from tests.real_daemon import HOMING, web_home


@pytest.fixture(autouse=True)
def _no_homing_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOMING_HOME", "HOMING_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def check(config: Path | None, capsys: pytest.CaptureFixture[str],
          command: str = "check-config") -> tuple[int, str, str]:
    code = main([command, *(["--config", str(config)] if config else [])])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# -- which file ---------------------------------------------------------------------------

def test_a_good_config_says_which_file_it_checked(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path / "c.yaml",
                f"home: {tmp_path / 'state'}\nplatforms: {{web: {{port: 0}}}}\n")
    code, out, err = check(cfg, capsys)
    assert code == 0, err
    assert out == f"config OK: {cfg} (state directory {tmp_path / 'state'})\n"


def test_without_a_file_it_says_the_defaults_were_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOMING_HOME", str(tmp_path / "home"))
    code, out, _ = check(None, capsys)
    assert code == 0
    assert out.startswith("config OK: no config file, so the defaults (state directory")


@pytest.mark.parametrize("with_config_yaml", [False, True])
@pytest.mark.parametrize("lookalike", ["config.yml", "config.json"])
def test_a_lookalike_beside_config_yaml_is_warned_about_not_silently_ignored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        lookalike: str, with_config_yaml: bool) -> None:
    home = tmp_path / "home"
    write(home / lookalike, "platforms: {web: {port: eighty}}\n")
    if with_config_yaml:
        write(home / "config.yaml", "platforms: {web: {port: 0}}\n")
    monkeypatch.setenv("HOMING_HOME", str(home))
    code, out, err = check(None, capsys)
    assert code == 0 and "config OK" in out
    assert f"homing: warning: {home / lookalike} is ignored: only config.yaml is read" in err
    assert ("is read instead" if with_config_yaml else "the defaults are used") in err


def test_a_config_yaml_that_is_not_a_file_is_warned_about(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "home" / "config.yaml").mkdir(parents=True)
    monkeypatch.setenv("HOMING_HOME", str(tmp_path / "home"))
    code, _, err = check(None, capsys)
    assert code == 0
    assert (f"homing: warning: {tmp_path / 'home' / 'config.yaml'} is not a file, so the "
            f"defaults are used") in err


def test_an_explicit_config_is_not_second_guessed_by_lookalikes_in_the_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    write(home / "config.yml", "platforms: {web: {port: eighty}}\n")
    monkeypatch.setenv("HOMING_HOME", str(home))
    code, _, err = check(write(tmp_path / "elsewhere.yaml", "{}"), capsys)
    assert code == 0 and "warning" not in err


async def test_run_logs_the_lookalike_warning_too(tmp_path: Path) -> None:
    env = web_home(tmp_path / "home")
    write(tmp_path / "home" / "config.yml", "platforms: {web: {port: eighty}}\n")
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    events = []
    try:
        while not events or events[-1]["event"] != "web_chat_listening":
            line = await asyncio.wait_for(proc.stderr.readline(), 20)
            assert line, "the daemon exited before listening"
            events.append(json.loads(line))
        proc.send_signal(signal.SIGTERM)
        await proc.stderr.read()
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    (ignored,) = [e for e in events if e["event"] == "config_file_ignored"]
    assert ignored["level"] == "warning"
    assert ignored["detail"].startswith(f"{tmp_path / 'home' / 'config.yml'} is ignored")


# -- booleans where numbers belong ---------------------------------------------------------

@pytest.mark.parametrize(("text", "field"), [
    ("platforms: {web: {port: true}}", "platforms.web.port"),
    ("platforms: {telegram: {messages_per_second: true}}",
     "platforms.telegram.messages_per_second"),
    ("agent: {temperature: false}", "agent.temperature"),
    ("agent: {max_retries: true}", "agent.max_retries"),
    ("jobs: {watch: {max_lines: yes}}", "jobs.watch.max_lines"),
])
def test_a_boolean_where_a_number_belongs_is_refused(tmp_path: Path, text: str, field: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check(write(tmp_path / "c.yaml", text), capsys)
    assert code == 2
    assert f"  {field}: expected a number, not a boolean" in err


def _number_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        options = get_args(annotation) if get_origin(annotation) in (
            Union, types.UnionType) else (annotation,)
        for option in options:
            if isinstance(option, type) and issubclass(option, BaseModel):
                paths.extend(_number_fields(option, f"{prefix}{name}."))
            elif option in (int, float):
                paths.append(prefix + name)
                break
    return paths


def test_no_number_in_the_whole_config_takes_a_boolean() -> None:
    fields = _number_fields(Config)
    assert "platforms.web.port" in fields and len(fields) > 30
    for path in fields:
        raw: dict[str, Any] = {}
        node = raw
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = True
        with pytest.raises(ConfigError) as err:
            parse_config(raw, {})
        assert (path, "expected a number, not a boolean") in err.value.problems


def test_numbers_given_as_text_still_count(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "platforms: {web: {port: '${PORT}'}}\n"
                                     "agent: {temperature: '0.5'}\n")
    config = load_config(cfg, {"PORT": "8080"})
    assert (config.platforms.web.port, config.agent.temperature) == (8080, 0.5)


# -- misspelt settings ---------------------------------------------------------------------

@pytest.mark.parametrize(("text", "field", "meant"), [
    ("sesions: {}", "sesions", "sessions"),
    ("platforms: {web: {prot: 9000}}", "platforms.web.prot", "port"),
    ("agent: {home_channels: [{nmae: ops, platform: telegram, chat_id: 1}]}",
     "agent.home_channels.0.nmae", "name"),
])
def test_a_misspelt_setting_names_the_one_meant(tmp_path: Path, text: str, field: str,
                                                meant: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("check-config", "run"):
        code, _, err = check(write(tmp_path / "c.yaml", text), capsys, command)
        assert code == 2
        assert f"  {field}: unknown setting; did you mean `{meant}`?" in err


def test_a_setting_like_none_gets_no_guess(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check(write(tmp_path / "c.yaml", "platforms: {web: {zzz: 1}}"), capsys)
    assert code == 2
    assert "  platforms.web.zzz: unknown setting (check the spelling" in err


def _levels(model: type[BaseModel], wrap: Any = lambda d: d,
            prefix: str = "") -> list[tuple[str, type[BaseModel], Any]]:
    """Every model in the config, with its dotted path and how to nest a dict there."""
    levels = [(prefix, model, wrap)]
    for name, field in model.model_fields.items():
        annotation = field.annotation
        in_list = get_origin(annotation) is list
        options = get_args(annotation) if in_list or get_origin(annotation) in (
            Union, types.UnionType) else (annotation,)
        for option in options:
            if isinstance(option, type) and issubclass(option, BaseModel):
                def inner(d: Any, name: str = name, in_list: bool = in_list,
                          wrap: Any = wrap) -> Any:
                    return wrap({name: [d] if in_list else d})
                levels.extend(_levels(option, inner,
                                      f"{prefix}{name}.0." if in_list else f"{prefix}{name}."))
    return levels


def test_every_setting_at_every_level_is_suggested_for_its_misspelling() -> None:
    levels = _levels(Config)
    assert len(levels) > 15
    for prefix, model, wrap in levels:
        for name in model.model_fields:
            typo = name[:-1]  # one letter short
            with pytest.raises(ConfigError) as err:
                parse_config(wrap({typo: 1}), {})
            assert (f"{prefix}{typo}", f"unknown setting; did you mean `{name}`? "
                                       f"(see config.example.yaml)") in err.value.problems


# -- URLs ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "field", "problem"), [
    ("agent: {base_url: api.openai.com/v1}", "agent.base_url",
     "`api.openai.com/v1` has no scheme: write `https://api.openai.com/v1`"),
    ("agent: {base_url: 'localhost:8080/v1'}", "agent.base_url",
     "`localhost:8080/v1` has no scheme: write `http://localhost:8080/v1`"),
    ("agent: {transcription: {base_url: api.openai.com/v1, model: whisper-1}}",
     "agent.transcription.base_url",
     "`api.openai.com/v1` has no scheme: write `https://api.openai.com/v1`"),
    ("platforms: {telegram: {base_url: api.telegram.org/bot}}", "platforms.telegram.base_url",
     "`api.telegram.org/bot` has no scheme: write `https://api.telegram.org/bot`"),
    ("platforms: {telegram: {base_file_url: api.telegram.org/file/bot}}",
     "platforms.telegram.base_file_url", "has no scheme: write "
                                         "`https://api.telegram.org/file/bot`"),
    ("platforms: {discord: {api_base: discord.com/api/v10}}", "platforms.discord.api_base",
     "`discord.com/api/v10` has no scheme: write `https://discord.com/api/v10`"),
    ("platforms: {discord: {gateway_url: gateway.discord.gg}}", "platforms.discord.gateway_url",
     "`gateway.discord.gg` has no scheme: write `wss://gateway.discord.gg`"),
    ("platforms: {discord: {gateway_url: 'https://gateway.discord.gg'}}",
     "platforms.discord.gateway_url", "expected a URL starting with wss:// or ws://"),
    ("agent: {base_url: 'https:///v1'}", "agent.base_url", "`https:///v1` has no host"),
    ("store: {url: 'app:s3cret@db.internal/homing'}", "store.url",
     "it has no scheme: write postgresql://user:password@host/db"),
])
def test_a_url_without_its_scheme_is_refused_with_the_fix(
        tmp_path: Path, text: str, field: str, problem: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("check-config", "run"):
        code, _, err = check(write(tmp_path / "c.yaml", text), capsys, command)
        assert code == 2
        line = next(line for line in err.splitlines() if line.startswith(f"  {field}: "))
        assert problem in line
        assert "s3cret" not in err


def test_urls_in_their_usual_forms_are_accepted(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml",
                "agent: {base_url: 'http://127.0.0.1:8080/v1',\n"
                "        transcription: {base_url: 'https://api.openai.com/v1', model: w}}\n"
                "platforms:\n"
                "  telegram: {base_url: 'http://127.0.0.1:8081/bot',\n"
                "             base_file_url: 'http://127.0.0.1:8081/file/bot'}\n"
                "  discord: {api_base: 'http://[::1]:8082/api/v10',\n"
                "            gateway_url: 'ws://127.0.0.1:8083'}\n"
                "store: {url: 'postgres://app@db/homing'}\n")
    config = load_config(cfg, {})
    assert config.agent.base_url == "http://127.0.0.1:8080/v1"
    assert config.platforms.discord.gateway_url == "ws://127.0.0.1:8083"


# -- YAML syntax ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "where", "plain", "shown"), [
    ("platforms:\n  web:\n    host: a: b\n", "line 3, column 12",
     "a value holding `: ` needs quotes", ["    3 |     host: a: b", "      |            ^"]),
    ("platforms:\n\tweb: {}\n", "line 2, column 1", "a tab: YAML indents with spaces only",
     ["    2 | \tweb: {}", "      | ^"]),
    ("sessions:\n  group_sessions_per_user: true\n thread_sessions_per_user: true\n",
     "line 3, column 2", "this line is indented differently from the lines beside it",
     ["    3 |  thread_sessions_per_user: true", "      |  ^"]),
    ("agent: {model: gpt\nsessions: {}\n", "line 1, column 8",
     "a `{` mapping that is not closed with `}`",
     ["    1 | agent: {model: gpt", "      |        ^"]),
    ("agent:\n  system_prompt: 'Be brief\n", "line 2, column 18",
     "a quote opened here is never closed",
     ["    2 |   system_prompt: 'Be brief", "      |                  ^"]),
])
def test_a_yaml_syntax_error_is_explained_at_its_line_and_column(
        tmp_path: Path, text: str, where: str, plain: str, shown: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("check-config", "run"):
        code, _, err = check(write(tmp_path / "c.yaml", text), capsys, command)
        assert code == 2
        lines = err.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  <yaml {where}>: "))
        assert plain in lines[at] and "(YAML: " in lines[at]
        assert lines[at + 1:at + 3] == shown


# -- duplicate keys ------------------------------------------------------------------------

def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path / "c.yaml", "platforms:\n  web: {port: 0}\n"
                                     "sessions: {}\n\n# the second, forgotten one\n\n"
                                     "platforms:\n  web: {port: 9000}\n")
    code, _, err = check(cfg, capsys)
    assert code == 2
    assert "  <yaml line 7>: duplicate key 'platforms' (first at line 1)" in err


def test_a_nested_duplicate_is_refused_too(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path / "c.yaml", "platforms:\n  web:\n    port: 0\n    host: ::1\n"
                                     "    port: 80\n")
    code, _, err = check(cfg, capsys)
    assert code == 2 and "<yaml line 5>: duplicate key 'port' (first at line 3)" in err


def test_a_merged_key_the_mapping_overrides_is_not_a_duplicate(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml",
                "platforms:\n"
                "  telegram: &chat {require_mention: true, stream_edit_interval_seconds: 2}\n"
                "  discord: {<<: *chat, stream_edit_interval_seconds: 3}\n")
    discord = load_config(cfg, {}).platforms.discord
    assert (discord.require_mention, discord.stream_edit_interval_seconds) == (True, 3)


# -- ${ that is not a reference ------------------------------------------------------------

def test_an_unterminated_reference_is_refused_by_field(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path / "c.yaml", 'platforms: {telegram: {token: "${OOPS"}}\n')
    code, _, err = check(cfg, capsys)
    assert code == 2
    assert "  platforms.telegram.token: unterminated ${ at character 1: no closing }" in err


def test_a_reference_without_a_valid_name_is_refused(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "agent: {api_key: 'sk-${API-KEY}'}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg, {"API": "x"})
    ((path, message),) = err.value.problems
    assert path == "agent.api_key" and message.startswith("${ at character 4 is not ${VAR}")


def test_references_and_a_plain_dollar_still_work(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml",
                "platforms: {web: {token: 'pa$$word-${SUFFIX}-${MISSING:-x}-$5'}}\n"
                "agent: {system_prompt: 'prices in $, ${A}${B}'}\n")
    config = load_config(cfg, {"SUFFIX": "s", "A": "1", "B": "2"})
    assert secret(config.platforms.web.token) == "pa$$word-s-x-$5"
    assert config.agent.system_prompt == "prices in $, 12"


# -- the file itself -----------------------------------------------------------------------

def test_a_file_that_is_not_utf8_is_refused_with_the_byte_offset(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = "platforms: {web: {port: 0}}\nagent: {system_prompt: 'café'}\n".encode("latin-1")
    offset = data.index("é".encode("latin-1"))
    code, _, err = check(write(tmp_path / "c.yaml", data), capsys)
    assert code == 2
    assert f"  <file>: not UTF-8: byte 0xe9 at offset {offset} (line 2) cannot be decoded" in err


def test_a_file_over_1_mb_is_refused_before_it_is_parsed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    size = 1024 * 1024 + 1
    cfg = write(tmp_path / "c.yaml", b"#" * (size - 1) + b"\n")
    code, _, err = check(cfg, capsys)
    assert code == 2
    assert f"<file>: the file is {size} bytes, over the limit of 1048576 bytes (1 MB)" in err


def test_a_file_at_the_limit_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.config.file as config_file
    text = "platforms: {web: {port: 7}}\n"
    monkeypatch.setattr(config_file, "MAX_CONFIG_BYTES", len(text))
    assert load_config(write(tmp_path / "c.yaml", text), {}).platforms.web.port == 7
    with pytest.raises(ConfigError, match="over the limit"):
        load_config(write(tmp_path / "d.yaml", text + " "), {})


def _billion_laughs() -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
        previous = name
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("text", "message"), [
    (_billion_laughs(), "<yaml line 5>: aliases (*name) expand to more than 10000 values"),
    ("one: &one 1\nmany: [" + ", ".join(["*one"] * 101) + "]\n",
     "<yaml line 2>: more than 100 aliases (*name)"),
    ("platforms: &p {web: *p}\n",
     "<yaml line 1>: alias *p refers to the node it is in"),
])
def test_aliases_that_expand_without_bound_are_refused(
        tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check(write(tmp_path / "c.yaml", text), capsys)
    assert code == 2 and message in err


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml",
                "platforms:\n"
                "  telegram: {allowed_users: &admins [11, 12]}\n"
                "approvals: {approvers: {telegram: *admins}}\n")
    assert load_config(cfg, {}).approvals.approvers == {"telegram": ["11", "12"]}


# -- the state directory -------------------------------------------------------------------

def _as_a_non_root_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root may write anywhere, so a read-only folder proves nothing when the tests run
    as root: os.access then answers by the mode bits, as it does for the folder's owner."""
    if os.geteuid() != 0:
        return

    def access(path: Any, mode: int) -> bool:
        bits = os.stat(path).st_mode
        wanted = [(os.R_OK, stat.S_IRUSR), (os.W_OK, stat.S_IWUSR), (os.X_OK, stat.S_IXUSR)]
        return all(bits & bit for flag, bit in wanted if mode & flag)

    monkeypatch.setattr(home_check.os, "access", access)


@pytest.fixture
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)
    _as_a_non_root_owner(monkeypatch)
    yield directory
    directory.chmod(0o755)


@pytest.mark.parametrize("command", ["check-config", "run"])
@pytest.mark.parametrize(("home", "message"), [
    ("file", "  home: {home} is a file; the state directory must be a directory"),
    ("file/state", "  home: {home} cannot be created: {tmp}/file is a file"),
    ("read-only", "  home: {home} is not writable"),
    ("read-only/state", "  home: {home} cannot be created: {tmp}/read-only is not writable"),
])
def test_a_home_that_cannot_be_made_or_written_is_refused(
        tmp_path: Path, read_only: Path, capsys: pytest.CaptureFixture[str],
        command: str, home: str, message: str) -> None:
    write(tmp_path / "file", "not a folder\n")
    cfg = write(tmp_path / "c.yaml", f"home: {tmp_path / home}\nplatforms: {{web: {{port: 0}}}}\n")
    code, _, err = check(cfg, capsys, command)
    assert code == 2
    assert message.format(home=tmp_path / home, tmp=tmp_path) in err
    assert not (tmp_path / "read-only" / "state").exists()


@pytest.mark.parametrize("command", ["check-config", "run"])
@pytest.mark.parametrize("home", ["/proc/homing-state", "/proc", "/sys/homing-state"])
def test_a_home_in_a_kernel_file_system_is_refused_before_run_would_fail(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, home: str) -> None:
    """/proc and /sys pass a permission check (as root) and then refuse every new name."""
    cfg = write(tmp_path / "c.yaml", f"home: {home}\nplatforms: {{web: {{port: 0}}}}\n")
    code, _, err = check(cfg, capsys, command)
    assert code == 2
    assert f"  home: {home} " in err
    assert any(words in err for words in ("cannot be created", "is not writable"))


def test_a_home_where_no_folder_can_be_made_is_refused_with_the_systems_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: Any) -> str:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(home_check.tempfile, "mkdtemp", refuse)
    assert home_check.home_problem(tmp_path / "state") == (
        f"{tmp_path / 'state'} cannot be created: a folder cannot be made in {tmp_path} "
        f"(Operation not permitted)")
    assert home_check.home_problem(tmp_path) == (
        f"{tmp_path} is not writable: a folder cannot be made in it (Operation not permitted)")


def test_a_homing_home_that_is_a_file_is_refused_by_its_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOMING_HOME", str(write(tmp_path / "home", "a file\n")))
    code, _, err = check(None, capsys)
    assert code == 2
    assert f"  home ($HOMING_HOME): {tmp_path / 'home'} is a file" in err


def test_home_problem_asks_os_access_for_writing_and_entering(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int]] = []

    def refuse(path: Any, mode: int) -> bool:
        asked.append((str(path), mode))
        return False

    monkeypatch.setattr(home_check.os, "access", refuse)
    assert home_check.home_problem(tmp_path) == (
        f"{tmp_path} is not writable (the state database and logs are kept there)")
    assert home_check.home_problem(tmp_path / "a" / "b") == (
        f"{tmp_path / 'a' / 'b'} cannot be created: {tmp_path} is not writable")
    assert asked == [(str(tmp_path), os.W_OK | os.X_OK)] * 2
    monkeypatch.undo()
    assert home_check.home_problem(tmp_path / "a" / "b") is None
    assert list(tmp_path.iterdir()) == []  # checking leaves nothing behind


# -- token shapes --------------------------------------------------------------------------

@pytest.mark.parametrize(("platform", "token", "hint"), [
    ("telegram", "123:TEST", "the part after ':' has 4 characters, not about 35"),
    ("telegram", DISCORD_TOKEN, "it looks like a Discord token"),
    ("telegram", TELEGRAM_TOKEN + "\n", "it has whitespace in it — check the quotes"),
    ("telegram", f"'{TELEGRAM_TOKEN}'", "it has quote marks in it"),
    ("telegram", f"bot{TELEGRAM_TOKEN}", "leave out the 'bot' in front"),
    ("telegram", "AAHfakeTelegramBotTokenForTests0123", "it has no ':' after the bot id"),
    ("discord", TELEGRAM_TOKEN, "it looks like a Telegram token"),
    ("discord", f"Bot {DISCORD_TOKEN}", "leave out the 'bot' in front"),
    ("discord", "fake-bot-token", "it has 1 part, not 3"),
    ("discord", f" {DISCORD_TOKEN}", "it has whitespace in it"),
])
def test_a_token_of_the_wrong_shape_is_refused_without_showing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        platform: str, token: str, hint: str) -> None:
    monkeypatch.setenv("BOT_TOKEN", token)
    cfg = write(tmp_path / "c.yaml", f"platforms: {{{platform}: {{enabled: true, "
                                     f"token: '${{BOT_TOKEN}}', allowed_users: ['1']}}}}\n")
    code, _, err = check(cfg, capsys)
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith(f"  platforms.{platform}.token: ")]
    assert f"does not look like a {platform.title()} bot token" in line and hint in line
    assert token.strip().strip("'") not in err


@pytest.mark.parametrize("platform", ["telegram", "discord"])
def test_a_real_shaped_token_passes_even_with_a_local_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], platform: str) -> None:
    token = TELEGRAM_TOKEN if platform == "telegram" else DISCORD_TOKEN
    local = ("base_url: 'http://127.0.0.1:8081/bot', "
             "base_file_url: 'http://127.0.0.1:8081/file/bot'" if platform == "telegram"
             else "api_base: 'http://127.0.0.1:8082/api/v10'")
    cfg = write(tmp_path / "c.yaml",
                f"home: {tmp_path / 'state'}\n"
                f"platforms: {{{platform}: {{enabled: true, token: '{token}', {local}}}}}\n")
    code, out, err = check(cfg, capsys)
    assert code == 0, err
    assert out.startswith(f"config OK: {cfg}")


def test_a_disabled_platform_s_token_is_not_looked_at(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "platforms: {telegram: {enabled: false, token: 'x y'}}\n")
    assert secret(load_config(cfg, {}).platforms.telegram.token) == "x y"

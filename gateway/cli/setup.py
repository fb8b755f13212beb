"""``homing setup``: the first run. It asks which platforms to enable, then each
platform's own questions (the ``setup`` its spec names: Telegram's checks the token
and learns the owner's id from a message they send the bot), writes ``config.yaml``
and ``homing.env`` (``setup_files``), and offers to install the systemd service.

Plain prompts on a terminal (gateway/platforms/questions.py). Every question has a
flag (``setup_options``, and each platform's); without a terminal, or with ``--yes``,
the flags and defaults answer, and a question with neither ends setup with exit 2
naming the flag. Nothing is written until every answer is in.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from gateway.cli.setup_files import Answers, write_files
from gateway.cli.setup_options import (
    DEFAULT_WEB_PORT,
    parse_platforms,
    parse_port,
    setup_platforms,
    setup_questions,
    unusable_setups,
)
from gateway.config.env_file import env_file_path, read_env_file
from gateway.config.settings import DEFAULT_HOME, ConfigError, load_config
from gateway.platforms.questions import (
    MissingAnswer,
    Prompter,
    SetupFailed,
    problem_with,
)

EXIT_MISSING = 2
def run_setup(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The CLI's ``homing setup``: its exit status."""
    ask = Prompter(interactive=sys.stdin.isatty() and not args.yes)
    try:
        return _setup(args, environ, ask)
    except MissingAnswer as exc:
        print(f"homing setup: {exc} (with --yes or without a terminal every answer "
              f"comes from a flag; see homing setup --help)", file=sys.stderr)
        return EXIT_MISSING
    except SetupFailed as exc:
        print(f"homing setup: {exc}", file=sys.stderr)
        return 1
    except EOFError:
        print("\nhoming setup: the input ended before every answer was in; nothing was "
              "written (for scripted use: --yes and the flags)", file=sys.stderr)
        return EXIT_MISSING
    except KeyboardInterrupt:
        print("\nhoming setup: stopped; nothing was written", file=sys.stderr)
        return 130


def _setup(args: argparse.Namespace, environ: Mapping[str, str], ask: Prompter) -> int:
    home = Path(environ.get("HOMING_HOME") or DEFAULT_HOME).expanduser()
    explicit = args.config or environ.get("HOMING_CONFIG")
    config_path = Path(explicit).expanduser() if explicit else home / "config.yaml"
    env_path = env_file_path(home)
    if args.account is not None:
        return _add_account(args, environ, ask, config_path, env_path)
    if config_path.exists() and not args.force:
        if not ask.interactive:
            raise MissingAnswer("--force", f"{config_path} exists; replace it?")
        if not ask.confirm(f"{config_path} exists. Replace it (the old one is kept as "
                           f"{config_path.name}.bak)?", default=False):
            ask.say(f"left {config_path} as it is")
            return 1
    ask.say(f"Homing setup: writes {config_path}, and the tokens to {env_path}.")
    for name, problem in unusable_setups().items():
        ask.say(f"  ({name} cannot be set up here: its setup questions did not load: "
                f"{problem})")
    chosen = args.platforms or parse_platforms(ask.text(
        f"Platforms to enable, comma-separated ({', '.join(setup_platforms())})",
        flag="--platforms", default="web", problem=lambda a: problem_with(parse_platforms, a)))
    answers = Answers()
    if "web" in chosen:
        answers.web_port = args.web_port if args.web_port is not None else parse_port(ask.text(
            "Web chat port on 127.0.0.1 (0: any free one)", flag="--web-port",
            default=str(DEFAULT_WEB_PORT), problem=lambda a: problem_with(parse_port, a)))
    for name, questions in setup_questions().items():
        if name in chosen:
            answers.bots[name] = questions.ask(args, environ, ask)
    for line in write_files(answers, config_path, env_path):
        ask.say(line)
    _offer_service(args, environ, ask, config_path, env_path)
    run = f"homing run --config {config_path}" if explicit else "homing run"
    # every homing command reads the environment file: no `set -a; . homing.env` needed
    ask.say(f"next: `homing doctor` checks it all live; to run it in this terminal: {run}")
    return 0


def _add_account(args: argparse.Namespace, environ: Mapping[str, str], ask: Prompter,
                 config_path: Path, env_path: Path) -> int:
    """``--account NAME``: one more bot, its questions asked as the platform's own, added
    to the config there is (gateway/cli/setup_account.py)."""
    from gateway.cli.setup_account import (
        account_platform_of,
        as_account,
        checked,
        existing_config,
        unused_variables,
        with_account,
    )

    chosen = args.platforms or parse_platforms(ask.text(
        "The platform of the new bot", flag="--platforms",
        problem=lambda a: problem_with(parse_platforms, a)))
    platform = account_platform_of(chosen)
    raw = existing_config(config_path)
    with_account(raw, platform, {"name": args.account})  # a name taken: refused before asking
    ask.say(f"Homing setup: adds the {platform} account {args.account!r} to {config_path}, "
            f"its token to {env_path}.")
    answers = as_account(setup_questions()[platform].ask(args, environ, ask), args.account)
    unused_variables(answers.secrets, config_path, env_path)
    raw = with_account(raw, platform, answers.section)
    checked(raw, config_path, env_path, environ, answers.secrets)
    for line in write_files(Answers(raw=raw, bots={platform: answers}), config_path,
                            env_path):
        ask.say(line)
    ask.say(f"next: `homing doctor` checks {platform}/{args.account} live; a running "
            f"homing takes the new bot at its restart (homing service restart)")
    return 0


# ---------------------------------------------------------------------- service

def _offer_service(args: argparse.Namespace, environ: Mapping[str, str], ask: Prompter,
                   config_path: Path, env_path: Path) -> None:
    """``homing service install`` for the new config, when asked to (``--service``, or
    yes at the prompt, which defaults to yes where systemd runs)."""
    import gateway.systemd.unit as service
    running = service.systemd_running()
    # unasked (--yes, no terminal) it is not installed: that changes the machine
    wanted = args.service if args.service is not None else ask.interactive and ask.confirm(
        "Install homing as a systemd user service now?" if running else
        "systemd is not running here; write the service unit anyway?", default=running)
    if not wanted:
        ask.say("not installing the service (later: homing service install)")
        return
    variables = read_env_file(env_path) if env_path.exists() else {}
    try:
        config = load_config(config_path, {**environ, **variables})
        plan = service.plan(config, config_path, user=True, unit_dir=args.unit_dir)
        for line in service.install(plan, start=True):
            ask.say(line)
    except (ConfigError, OSError, subprocess.CalledProcessError) as exc:
        raise SetupFailed(f"the config is written, but the service was not installed: "
                          f"{exc}") from None

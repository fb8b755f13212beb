"""What ``homing setup`` writes: ``config.yaml``, which refers to the tokens as
``${TELEGRAM_BOT_TOKEN}`` and ``${DISCORD_BOT_TOKEN}``, and ``homing.env`` beside the
state, which holds them (0600).

The config says only what setup asked; everything else keeps its default (see
config.example.yaml). A config it replaces is kept as ``config.yaml.bak``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gateway.config.env_file import write_env_file
from gateway.machine.private_files import FILE_MODE, private_file
from gateway.platforms.questions import PlatformAnswers

_HEADER = ("# Written by `homing setup`. The tokens are in homing.env in the state directory\n"
           "# (mode 0600), referred to here as ${VAR}; config.example.yaml lists every\n"
           "# setting. Check it all with `homing doctor`.\n")


@dataclass
class Answers:
    web_port: int | None = None  # None: the web chat is off
    #: each other platform's section and secrets, by name
    bots: dict[str, PlatformAnswers] = field(default_factory=dict)
    #: the whole config as it is to be written (an account added to one there was):
    #: written as it is, the bots' secrets beside it
    raw: dict[str, Any] | None = None


def render_config(answers: Answers) -> str:
    if answers.raw is not None:
        return _HEADER + str(yaml.safe_dump(answers.raw, sort_keys=False))
    web: dict[str, object] = {"enabled": False} if answers.web_port is None \
        else {"enabled": True, "port": answers.web_port}
    platforms: dict[str, object] = {"web": web}
    for name, bot in answers.bots.items():
        platforms[name] = bot.section
    return _HEADER + str(yaml.safe_dump({"platforms": platforms}, sort_keys=False))


def write_files(answers: Answers, config_path: Path, env_path: Path) -> list[str]:
    """Write both files (the secrets first, so the config never refers to a missing
    one); what was done, to print."""
    done = []
    tokens = {var: value for bot in answers.bots.values() for var, value in bot.secrets.items()}
    if tokens:
        write_env_file(env_path, tokens)
        done.append(f"wrote {env_path} (mode 0600: {', '.join(tokens)})")
    if config_path.exists():
        backup = config_path.with_name(config_path.name + ".bak")
        config_path.replace(backup)
        done.append(f"kept the old config as {backup}")
    # a new folder is private; an existing one (/etc/homing, say) is left as it is
    config_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = private_file(config_path.with_name(f".{config_path.name}.tmp"))
    tmp.write_text(render_config(answers), encoding="utf-8")
    os.chmod(tmp, FILE_MODE)
    tmp.replace(config_path)
    done.append(f"wrote {config_path}")
    return done

"""What ``homing setup`` asks a platform's owner, and how a platform asks it: the
prompter (plain prompts on a terminal; without one, or with ``--yes``, the flags and
defaults answer, and a question with neither is a :class:`MissingAnswer` naming the
flag), and the :class:`SetupQuestions` a platform's spec names."""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.errors import ConfigurationError
from gateway.platforms.probe import ProbeError


class MissingAnswer(ConfigurationError):
    """A question without a terminal to ask it on, nor a flag answering it."""

    def __init__(self, flag: str, what: str) -> None:
        super().__init__(f"give {flag}: {what}")


class SetupFailed(ConfigurationError):
    """Setup cannot go on (a token refused, a file in the way); nothing was written."""


class Prompter:
    """Asks on a terminal; otherwise a question with no default is a MissingAnswer."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive

    def say(self, text: str) -> None:
        print(text, flush=True)

    def text(self, question: str, *, flag: str, default: str | None = None,
             problem: Callable[[str], str | None] = lambda _: None) -> str:
        if not self.interactive:
            if default is None:
                raise MissingAnswer(flag, question.split(" (")[0].lower() + " is needed")
            return default
        shown = f" [{default}]" if default else ""
        while True:
            answer = input(f"{question}{shown}: ").strip() or (default or "")
            wrong = problem(answer) if answer else "an answer is needed"
            if wrong is None:
                return answer
            self.say(f"  {wrong}")

    def secret(self, question: str, *, flag: str) -> str:
        if not self.interactive:
            raise MissingAnswer(flag, question.split(" (")[0].lower() + " is needed")
        while not (answer := getpass.getpass(f"{question} (not shown): ").strip()):
            self.say("  an answer is needed")
        return answer

    def confirm(self, question: str, *, default: bool) -> bool:
        if not self.interactive:
            return default
        answer = input(f"{question} [{'Y/n' if default else 'y/N'}]: ").strip().lower()
        return default if not answer else answer in ("y", "yes")



@dataclass
class PlatformAnswers:
    """A platform as setup leaves it: its ``platforms.<name>`` section (secrets as
    ``${VAR}``) and the secrets for homing.env."""

    section: dict[str, object]
    #: environment variable -> value, written to homing.env (mode 0600)
    secrets: dict[str, str] = field(default_factory=dict)


class SetupQuestions(Protocol):
    """A platform's part of ``homing setup``: its flags, then its questions."""

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        """The platform's flags (an argument group named after it): one per question."""

    def ask(self, args: argparse.Namespace, environ: Mapping[str, str],
            ask: Prompter) -> PlatformAnswers:
        """Ask, checking each token live with the platform before taking it."""


def accepted_token(environ: Mapping[str, str], ask: Prompter, *, variable: str | None,
                    flag: str, question: str, check: Callable[[str], str], what: str) -> str:
    """A token the platform accepted: asked again at a prompt until it is."""
    while True:
        token = read_token(environ, ask, variable=variable, flag=flag, question=question)
        if checked(ask, variable is not None, check, token, what):
            return token


def read_token(environ: Mapping[str, str], ask: Prompter, *, variable: str | None, flag: str,
           question: str) -> str:
    if variable is None:
        return ask.secret(question, flag=f"{flag} VAR")
    token = environ.get(variable, "").strip()
    if not token:
        raise MissingAnswer(f"{flag} naming a set variable",
                            f"the environment variable {variable} is not set")
    return token


def checked(ask: Prompter, from_flag: bool, check: Callable[[str], str], token: str,
             what: str) -> bool:
    """Check a token with its platform and say the verdict; False (ask again) when it
    failed at a prompt, SetupFailed when the token came from a flag."""
    ask.say(f"  checking the {what} …")
    try:
        ask.say(f"  {check(token)}")
        return True
    except ProbeError as exc:
        if from_flag or not ask.interactive:
            raise SetupFailed(f"{exc.problem} — fix: {exc.fix}") from None
        ask.say(f"  {exc.problem} — {exc.fix}")
        return False




def parse_user_id(value: str) -> str:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a user id (a number)")
    return value


def problem_with(parse: Callable[[str], object], value: str) -> str | None:
    """What is wrong with an answer typed at a prompt, by its flag's own check."""
    try:
        parse(value)
    except argparse.ArgumentTypeError as exc:
        return str(exc)
    return None

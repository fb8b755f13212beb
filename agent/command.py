"""The built-in command agent: deterministic, needs no model.

It makes a fresh install useful and testable: it answers its slash commands,
runs shell jobs, posts the notices they send back, and acknowledges plain
text.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable

from agent.arguments import split_first_word
from agent.schedule_commands import COMMANDS as SCHEDULE_COMMANDS
from agent.schedule_commands import ScheduleCommands
from gateway.delivery.notifications import Notification
from gateway.inbound.files import FileRefused, file_lines
from gateway.messages.command_line import parse_command
from gateway.messages.turn import Turn
from tools.delegation import DelegationManager, DelegationRefused, delegate_task
from tools.job_notices import describe_exit
from tools.jobs import JobError
from tools.process import Processes, job_line
from tools.schedule_spec import ScheduleError
from tools.scheduler import Scheduler
from tools.session_info import session_info
from tools.terminal import Terminal

LOG_LINES = 30


class CommandAgent:
    commands: dict[str, str] = {
        "run": "run a shell command and reply with its output: /run <command>",
        "bg": "start a background job that reports back here: /bg <command>",
        "watch": "background job with a watch pattern: /watch <regex> <command>",
        "jobs": "list this conversation's jobs",
        "log": "show a job's latest output: /log <job>",
        "kill": "stop a job: /kill <job>",
        "delegate": "hand a command to a background sub-agent: /delegate <command>",
        "whoami": "show the conversation this turn runs in, as a tool sees it",
        "send": "post a file here: /send <path> [caption]",
    }

    def __init__(self, terminal: Terminal | None = None,
                 delegations: DelegationManager | None = None,
                 scheduler: Scheduler | None = None) -> None:
        self.terminal = terminal
        self.delegations = delegations
        self.processes = Processes(terminal.jobs) if terminal is not None else None
        self.schedule_commands = ScheduleCommands(scheduler) if scheduler is not None else None
        if scheduler is not None:
            self.commands = {**self.commands, **SCHEDULE_COMMANDS}

    async def run_turn(self, turn: Turn) -> None:
        command = parse_command(turn.event.text)
        if command is None:
            saved = file_lines(turn.event.metadata)
            if saved:  # a file sent without a command: say where it is
                await turn.reply("\n".join(["Saved:", *saved] + (
                    [_acknowledge(turn.event.text)] if turn.event.text.strip() else [])))
                return
            await turn.reply(_acknowledge(turn.event.text))
            return
        name, args = command
        handler = getattr(self, f"_cmd_{name}", None)
        if name in SCHEDULE_COMMANDS and self.schedule_commands is not None:
            handler = getattr(self.schedule_commands, name)
        if handler is None or name not in self.commands:
            await turn.reply(f"Unknown command /{name}. Send /help for the list.", kind="system")
            return
        if name not in ("whoami", "send") and self.terminal is None:
            await turn.reply("Jobs are not available in this gateway.", kind="system")
            return
        try:
            await handler(turn, args)
        except (JobError, DelegationRefused, ScheduleError) as exc:
            await turn.reply(str(exc), kind="system")

    async def run_notification(self, turn: Turn, notification: Notification) -> None:
        await turn.reply(notification.text, kind="notification")

    def posts_as_is(self, notification: Notification) -> bool:
        return True

    async def compress(self, turn: Turn) -> None:
        """No model, no summary: the child session just follows its parent."""
        turn.session = await turn.runner.rotate_session(turn.session, "compression",
                                                        route=turn.route)

    def running_jobs(self, session_key: str) -> dict[str, int]:
        running = self.terminal.jobs.running_in(session_key) if self.terminal is not None \
            else []
        return dict(Counter(job.session_id for job in running))

    def status_lines(self, turn: Turn) -> list[str]:
        lines: list[str] = []
        key = turn.session.session_key
        if self.terminal is not None:
            running = self.terminal.jobs.running_in(key)
            lines.append(f"background jobs running here: {len(running) or 'none'}")
            lines += [f"  {job_line(j)}" for j in running]
        if self.delegations is not None:
            delegated = self.delegations.running_in(key)
            lines.append(f"delegations running here: {len(delegated) or 'none'}")
            lines += [f"  {d.id}  {d.state}  {d.task[:80]}" for d in delegated]
        return lines

    # commands ----------------------------------------------------------------

    async def _cmd_send(self, turn: Turn, args: str) -> None:
        _require(args, "/send <path> [caption]")
        path, _, caption = args.partition(" ")
        try:
            result = await turn.send_file(path, caption.strip() or None)
        except FileRefused as exc:
            await turn.reply(str(exc), kind="system")
            return
        if not result.ok:
            await turn.reply(f"The file was not sent: {result.error}", kind="system")

    async def _cmd_whoami(self, turn: Turn, args: str) -> None:
        await asyncio.sleep(0)  # let concurrent turns run in between, as any real tool would
        in_loop = session_info()
        # the same tool from a worker thread must see the same conversation
        in_thread = await asyncio.to_thread(session_info)
        await turn.reply(json.dumps({"tool": in_loop, "thread": in_thread}, sort_keys=True))

    async def _cmd_run(self, turn: Turn, args: str) -> None:
        _require(args, "/run <command>")
        result = await self._terminal.run(args)
        status = ("timed out and was killed" if result.timed_out
                  else describe_exit(result.exit_code))
        output = "\n".join(result.output[-LOG_LINES:]) or "(no output)"
        await turn.reply(f"$ {args}\n{status}\n```\n{output}\n```")

    async def _cmd_bg(self, turn: Turn, args: str) -> None:
        _require(args, "/bg <command>")
        job = await self._terminal.start(args)
        await turn.reply(f"Started job {job.id}; I will report here when it ends.")

    async def _cmd_watch(self, turn: Turn, args: str) -> None:
        pattern, command = _split_first_word(args)
        _require(pattern and command, "/watch <regex> <command>, e.g. /watch 'ERROR|FATAL' "
                                      "./deploy.sh")
        job = await self._terminal.start(command, notify_on_complete=False,
                                         watch_patterns=[pattern])
        await turn.reply(f"Started job {job.id}, watching its output for /{pattern}/; "
                         f"matching lines will be reported here.")

    async def _cmd_jobs(self, turn: Turn, args: str) -> None:
        jobs = await self._processes.list()
        if not jobs:
            await turn.reply("No jobs in this conversation.")
            return
        await turn.reply("\n".join(job_line(j) for j in jobs))

    async def _cmd_log(self, turn: Turn, args: str) -> None:
        _require(args, "/log <job>")
        job = await self._processes.own(args)
        lines = await self._processes.log(job, LOG_LINES)
        body = "\n".join(lines) or "(no output yet)"
        await turn.reply(f"{job_line(job)}\n```\n{body}\n```")

    async def _cmd_delegate(self, turn: Turn, args: str) -> None:
        _require(args, "/delegate <command>")
        if self.delegations is None:
            raise JobError("Delegations are not available in this gateway.")
        record = await delegate_task(self.delegations, args)
        await turn.reply(f"Delegated as {record.id}; its result will come back here.")

    async def _cmd_kill(self, turn: Turn, args: str) -> None:
        _require(args, "/kill <job>")
        job = await self._processes.kill(args)
        await turn.reply(f"Stopped job {job.id}.")

    # helpers -----------------------------------------------------------------

    @property
    def _terminal(self) -> Terminal:
        assert self.terminal is not None
        return self.terminal

    @property
    def _processes(self) -> Processes:
        assert self.processes is not None
        return self.processes


def command_subagent(terminal: Terminal) -> Callable[[str], Awaitable[str]]:
    """The command agent's sub-agent: runs the command; its summary is the exit code
    and the last lines of output."""

    async def run(command: str) -> str:
        result = await terminal.run(command)
        status = ("timed out and was killed" if result.timed_out
                  else describe_exit(result.exit_code))
        tail = "\n".join(result.output[-10:]) or "(no output)"
        return f"$ {' '.join(command.split())[:200]}\n{status}\nlast lines:\n```\n{tail}\n```"

    return run


def _require(value: object, usage: str) -> None:
    if not value:
        raise JobError(f"Usage: {usage}")


def _split_first_word(args: str) -> tuple[str, str]:
    try:
        return split_first_word(args)
    except ValueError:
        raise JobError("Unbalanced quotes in the watch pattern.") from None


def _acknowledge(text: str) -> str:
    preview = " ".join(text.split())
    if len(preview) > 60:
        preview = preview[:57] + "..."
    return f"Received: {preview}\n(I am the built-in command agent; send /help for what I can do.)"

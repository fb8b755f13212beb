"""The tools a model may call, as thin layers over what the daemon already has.

Each tool's arguments are a pydantic model: its JSON schema is what the
model is offered, and validating against it turns a broken call (bad JSON,
an unknown tool, wrong arguments) into a tool error the model can read and
correct — never an exception in the turn.

Tools run in the turn's task, so everything they start captures the turn's
return address from the task-local context.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.inbound.files import FileRefused
from gateway.inbound.journal import mark_acted
from gateway.words.context import current_session
from gateway.words.events import SendResult
from gateway.words.return_address import ReturnAddress
from tools.delegation import DelegationManager, DelegationRefused, delegate_task
from tools.job_notices import describe_exit
from tools.jobs import JobError
from tools.process import Processes, job_line
from tools.schedule_spec import ScheduleError
from tools.scheduler import Scheduler
from tools.send_message import MessageSender, UnknownTarget
from tools.terminal import Terminal

if TYPE_CHECKING:
    from agent.approval_gate import ApprovalGate
    from agent.model_reply import ToolCall

log = structlog.get_logger(__name__)

OUTPUT_LINES = 40
MAX_RESULT_CHARS = 8000


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ForegroundTerminalArgs(_Args):
    """Run a shell command and return its exit code and the last lines of its output."""

    command: str = Field(min_length=1, description="the shell command (run by /bin/sh -c)")


class TerminalArgs(ForegroundTerminalArgs):
    """Run a shell command. In the foreground it returns the exit code and output; in the
    background it returns a job id at once and reports here when the job ends (or when
    its output matches a watch pattern), even if that is hours later."""

    background: bool = Field(False, description="start it as a background job")
    notify_on_complete: bool = Field(
        True, description="background only: report back here when the job ends")
    watch_patterns: list[str] = Field(
        default_factory=list,
        description="background only: regular expressions; matching output lines are "
                    "reported back here while the job runs")
    artifact: str | None = Field(
        None, description="background only: a file the job makes (a report, a build); it "
                          "is posted here with the completion notice")


class ProcessArgs(_Args):
    """Look after this conversation's background jobs: list them, read a job's latest
    output, wait for a job to end, or kill it."""

    action: Literal["list", "log", "wait", "kill"]
    job_id: str | None = Field(None, description="the job, for log, wait and kill")
    timeout_seconds: float = Field(30, gt=0, le=600,
                                   description="wait: give up waiting after this long")


class DelegateTaskArgs(_Args):
    """Hand a task to a background sub-agent with its own context and a shell. Returns
    at once; the sub-agent's summary comes back to this conversation as a notice."""

    task: str = Field(min_length=1, description="what the sub-agent should do, self-contained")


class ScheduleArgs(_Args):
    """Create or look after this conversation's schedules. A schedule runs a shell command
    (command) or gives you a turn with a prompt (prompt) at its times, and every run
    reports back to this conversation, even days later. Create with exactly one of
    every, cron or at."""

    action: Literal["create", "list", "pause", "resume", "remove", "run"]
    every: str | None = Field(None, description="create: repeat at this interval: 30s, 10m, "
                                                "2h, 1d, 1h30m")
    cron: str | None = Field(None, description="create: a five-field cron expression, "
                                               "e.g. '0 9 * * 1-5'")
    at: str | None = Field(None, description="create: once, at HH:MM, YYYY-MM-DD HH:MM or +20m")
    command: str | None = Field(None, description="create: the shell command each run runs")
    prompt: str | None = Field(None, description="create: what each run asks you to do")
    timezone: str | None = Field(None, description="create: an IANA timezone such as "
                                                   "Europe/Berlin (default: the gateway's)")
    schedule_id: str | None = Field(None, description="pause, resume, remove, run: which one")


class SendMessageArgs(_Args):
    """Post a message to this conversation now (for example, a progress note before a
    long tool call) or to one of the configured home channels."""

    text: str = Field(min_length=1)
    target: str = Field("here", description='"here" or the name of a home channel')


class SendFileArgs(_Args):
    """Post a file to this conversation (a photo when it is an image): a job's report,
    a chart, a log. Only files inside the allowed directories can be sent."""

    path: str = Field(min_length=1, description="the file's path on this machine")
    caption: str | None = Field(None, description="a line to go with it")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool call may touch besides the task-local context."""

    #: post into the current conversation (and its transcript)
    reply: Callable[[str], Awaitable[SendResult]]
    #: say what the turn is doing, where the platform shows it (not in the transcript)
    status: Callable[[str], Awaitable[None]] | None = None
    #: post a file into the current conversation
    send_file: Callable[[str, str | None], Awaitable[SendResult]] | None = None

    async def say_status(self, text: str) -> None:
        if self.status is not None:
            await self.status(text)


Handler = Callable[[Any, ToolContext], Awaitable[Any]]


class ToolBox:
    def __init__(self, terminal: Terminal, *, delegations: DelegationManager | None = None,
                 sender: MessageSender | None = None, scheduler: Scheduler | None = None,
                 gate: ApprovalGate | None = None) -> None:
        self.terminal = terminal
        #: what must wait for a human (approvals.mode); None: nothing waits
        self.gate = gate
        self.processes = Processes(terminal.jobs)
        self.delegations = delegations
        self.sender = sender
        self.scheduler = scheduler
        self._tools: dict[str, tuple[type[_Args], Handler]] = {
            "terminal": (TerminalArgs, self._terminal),
            "process": (ProcessArgs, self._process),
        }
        if delegations is not None:
            self._tools["delegate_task"] = (DelegateTaskArgs, self._delegate)
        if sender is not None:
            self._tools["send_message"] = (SendMessageArgs, self._send)
        if scheduler is not None:
            self._tools["schedule"] = (ScheduleArgs, self._schedule)
        self._tools["send_file"] = (SendFileArgs, self._send_file)
        self._schemas: list[dict[str, Any]] | None = None

    @classmethod
    def foreground_only(cls, terminal: Terminal, gate: ApprovalGate | None = None) -> ToolBox:
        """A sub-agent's tools: a shell in the foreground and nothing else — no jobs that
        outlive it, and no reach into the conversation's own jobs. Its dangerous commands
        are asked in the conversation that delegated."""
        box = cls(terminal, gate=gate)
        box._tools = {"terminal": (ForegroundTerminalArgs, box._terminal)}
        return box

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as the chat-completions ``tools`` parameter (built once: pydantic
        takes half a millisecond per build, and every model request carries them)."""
        if self._schemas is None:
            self._schemas = [_schema(name, args) for name, (args, _) in self._tools.items()]
        return self._schemas

    async def call(self, call: ToolCall, ctx: ToolContext) -> str:
        """Run one tool call; the result, or a clear error, as text for the model."""
        entry = self._tools.get(call.name)
        if entry is None:
            return _error(f"there is no tool named {call.name!r}; the tools are: "
                          f"{', '.join(self._tools)}")
        args_model, handler = entry
        try:
            raw = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            return _error(f"the arguments of {call.name} are not valid JSON ({exc.msg} at "
                          f"character {exc.pos}); send a JSON object")
        try:
            args = args_model.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                                 for e in exc.errors())
            return _error(f"wrong arguments for {call.name}: {problems}")
        # a model turn that has run a tool is never replayed after a crash: the tool's
        # effect (a command, a message sent) must not happen twice
        await mark_acted(self.terminal.jobs.db)
        try:
            if self.gate is not None and (refused := await self.gate.clear(call.name, args)):
                return _error(refused)
            result = await handler(args, ctx)
        except (JobError, DelegationRefused, UnknownTarget, ScheduleError, FileRefused) as exc:
            return _error(str(exc))
        except Exception as exc:  # a tool bug must reach the model, not end the turn
            log.exception("tool_failed", tool=call.name)
            return _error(f"{call.name} failed: {exc!r}")
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        return _truncate(text)

    # the tools -----------------------------------------------------------------

    async def _terminal(self, args: ForegroundTerminalArgs, ctx: ToolContext) -> Any:
        if isinstance(args, TerminalArgs) and args.background:
            job = await self.terminal.start(args.command,
                                            notify_on_complete=args.notify_on_complete,
                                            watch_patterns=args.watch_patterns or None,
                                            artifact=args.artifact)
            return {"job_id": job.id, "status": "started",
                    "reports_back": _reports(args.notify_on_complete, args.watch_patterns)}
        await ctx.say_status(f"running `{_one_line(args.command)}`…")
        result = await self.terminal.run(args.command)
        return {"exit": "timed out and was killed" if result.timed_out
                else describe_exit(result.exit_code),
                "output": "\n".join(result.output[-OUTPUT_LINES:])}

    async def _process(self, args: ProcessArgs, ctx: ToolContext) -> Any:
        if args.action == "list":
            jobs = await self.processes.list()
            return {"jobs": [job_line(j) for j in jobs] or "no jobs in this conversation"}
        if not args.job_id:
            raise JobError(f"process {args.action} needs a job_id")
        if args.action == "log":
            job = await self.processes.own(args.job_id)
            return {"job": job_line(job),
                    "output": "\n".join(await self.processes.log(job, OUTPUT_LINES))}
        if args.action == "wait":
            await ctx.say_status(f"waiting for job {args.job_id}…")
            job, notices = await self.processes.wait(args.job_id, args.timeout_seconds)
            result: dict[str, Any] = {
                "job": job_line(job), "ended": job.state != "running",
                "output": "\n".join(await self.processes.log(job, OUTPUT_LINES))}
            if notices:
                result["notices"] = notices
                result["note"] = "the job's notices, its completion last; none is sent again"
            return result
        job = await self.processes.kill(args.job_id)
        return {"job": job.id, "status": "killed"}

    async def _delegate(self, args: DelegateTaskArgs, ctx: ToolContext) -> Any:
        assert self.delegations is not None
        record = await delegate_task(self.delegations, args.task)
        return {"delegation_id": record.id, "status": "started",
                "reports_back": "its summary arrives here as a notice"}

    async def _schedule(self, args: ScheduleArgs, ctx: ToolContext) -> Any:
        assert self.scheduler is not None
        key = current_session().session_key
        if args.action == "create":
            record = await self.scheduler.create(
                ReturnAddress.capture(), every=args.every, cron=args.cron, at=args.at,
                command=args.command, prompt=args.prompt, timezone=args.timezone)
            return {"schedule_id": record.id, "schedule": record.spec.describe(),
                    "timezone": record.spec.timezone,
                    "next_run": record.when(record.next_run_at),
                    "reports_back": "each run reports to this conversation"}
        if args.action == "list":
            records = await self.scheduler.list(key)
            return {"schedules": [r.line() for r in records] or "no schedules here"}
        if not args.schedule_id:
            raise ScheduleError(f"schedule {args.action} needs a schedule_id")
        record = await self.scheduler.own(args.schedule_id, key)
        if args.action == "pause":
            record = await self.scheduler.pause(record.id)
        elif args.action == "resume":
            record = await self.scheduler.resume(record.id)
        elif args.action == "run":
            await self.scheduler.run_now(record.id)
            return {"schedule_id": record.id, "status": "running now; its result comes here"}
        else:
            await self.scheduler.remove(record.id)
            return {"schedule_id": record.id, "status": "removed"}
        return {"schedule": record.line()}

    async def _send_file(self, args: SendFileArgs, ctx: ToolContext) -> Any:
        if ctx.send_file is None:
            raise JobError("files cannot be posted from here")
        result = await ctx.send_file(args.path, args.caption)
        if not result.ok:
            raise JobError(f"the file was not sent: {result.error}")
        return {"sent": True, "path": args.path}

    async def _send(self, args: SendMessageArgs, ctx: ToolContext) -> Any:
        assert self.sender is not None
        result = await self.sender.send(args.text, args.target, ctx.reply)
        if not result.ok:
            raise JobError(f"the message was not sent: {result.error}")
        return {"sent": True, "target": args.target}


def _reports(on_complete: bool, patterns: list[str]) -> str:
    parts = (["when it ends"] if on_complete else []) + (
        [f"on output matching {patterns}"] if patterns else [])
    return " and ".join(parts) or "never (neither notify_on_complete nor watch_patterns)"


def _schema(name: str, args: type[_Args]) -> dict[str, Any]:
    parameters = args.model_json_schema()
    description = parameters.pop("description", "")
    parameters.pop("title", None)
    for prop in parameters.get("properties", {}).values():
        prop.pop("title", None)
    return {"type": "function",
            "function": {"name": name, "description": " ".join(description.split()),
                         "parameters": parameters}}


def _error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


def _truncate(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"... [{len(text) - MAX_RESULT_CHARS} characters cut]"


def _one_line(command: str, limit: int = 80) -> str:
    line = " ".join(command.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"

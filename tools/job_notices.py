"""What job notices say: the job, its command, how it ended, and its output."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tools.plain_text import plain_lines
from tools.watch import WatchLimits, WatchNotice

if TYPE_CHECKING:
    from gateway.words.events import Outcome
    from tools.job_record import JobRecord

MAX_OUTPUT_CHARS = 3000
MAX_COMMAND_CHARS = 200


@dataclass(frozen=True, slots=True)
class EndDetails:
    """What the record alone does not say about how a job ended."""

    #: the kill needed SIGKILL after ``kill_grace`` seconds
    escalated: bool = False
    kill_grace: float = 0.0
    #: matching lines the watch breaker kept from the chat
    dropped: int = 0
    global_max_per_minute: int = 0
    #: lost with the instance that ran it (a shared store): that instance's name
    instance_lost: str | None = None


def completion_text(record: JobRecord, tail: list[str],
                    details: EndDetails = EndDetails(), *, cut: bool = False,
                    header: str | None = None, footer: str | None = None) -> str:
    """The completion notice; ``header`` and ``footer`` frame it (a schedule's run).
    ``cut``: the output had more lines than ``tail`` (the notice says so)."""
    body = _completion_body(record, tail, details, cut)
    return "\n".join(part for part in (header, body, footer) if part)


def _completion_body(record: JobRecord, tail: list[str], details: EndDetails,
                     cut: bool) -> str:
    took = _took(record.duration)
    if record.state == "failed":
        return (f"Job {record.id} did not start: the gateway stopped while starting it. "
                f"Run it again if it is still needed.\n$ {_short(record.command)}")
    if record.state == "lost" and details.instance_lost:
        head = (f"Job {record.id} was running on instance {details.instance_lost}, which "
                f"stopped answering: its end cannot be known from here (its output stays "
                f"on that host).")
    elif record.state == "lost":
        head = (f"Job {record.id} ended without recording an exit code: its shell was "
                f"killed from outside Homing.")
    elif record.killed and details.escalated:
        head = (f"Job {record.id} was killed {took}: it did not stop within "
                f"{details.kill_grace:g} s of SIGTERM, so it got SIGKILL.")
    elif record.killed:
        head = f"Job {record.id} was killed ({describe_exit(record.exit_code)}) {took}."
    else:
        head = f"Job {record.id} finished: {describe_exit(record.exit_code)} {took}."
    title = (f"last {len(tail)} lines of its output (/log {record.id} has more)" if cut
             else "output")
    lines = [head, f"$ {_short(record.command)}"]
    if not details.instance_lost:  # (what it printed is on the other host)
        lines.append(_output_block(tail, title))
    if record.left_running:
        n = record.left_running
        lines.append(f"It left {n} process{'es' if n != 1 else ''} running; their output "
                     f"still goes to the job's log (/log {record.id}).")
    if details.dropped:
        were = "s were" if details.dropped != 1 else " was"
        lines.append(f"{details.dropped} matching line{were} not reported: watch notices were over "
                     f"{details.global_max_per_minute} a minute across all jobs. "
                     f"/log {record.id} has the output.")
    return "\n".join(lines)


def job_outcome(record: JobRecord) -> Outcome:
    """A job went well only when it ran to an exit code of 0."""
    ok = record.state == "exited" and not record.killed and record.exit_code == 0
    return "ok" if ok else "failed"


def watch_text(record: JobRecord, notice: WatchNotice, limits: WatchLimits) -> str:
    if notice.kind == "watch_disabled":
        return (f"Job {record.id}: watch turned off after {limits.max_notices} notices; "
                f"you will get a notice when the job ends.\n$ {_short(record.command)}\n"
                f"{_output_block(list(notice.lines), 'latest matching lines')}")
    lines = notice.lines[-limits.max_lines:]
    patterns = " or ".join(f"`{p}`" for p in record.watch_patterns) or "its watch"
    text = f"Job {record.id} output matched {patterns}:\n{_output_block(list(lines), None)}"
    if notice.suppressed:
        text += (f"\n({notice.suppressed} matching line"
                 f"{'s were' if notice.suppressed != 1 else ' was'} held back since the last "
                 f"notice; the latest are shown)")
    return text


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"exit code {code} ({signal.Signals(code - 128).name})"
    if code < 0 and -code in signal.Signals._value2member_map_:
        return f"exit code {code} ({signal.Signals(-code).name})"
    return f"exit code {code}"


def output_text(lines: list[str]) -> str:
    """Output lines as a chat shows them: plain, and code fences kept intact."""
    return "\n".join(plain_lines(lines)).replace("```", "`\u200b``")


def _output_block(lines: list[str], title: str | None) -> str:
    if not lines:
        return "(no output)"
    body = output_text(lines)
    if len(body) > MAX_OUTPUT_CHARS:
        body = "…" + body[-MAX_OUTPUT_CHARS:]
    head = f"{title}:\n" if title else ""
    return f"{head}```\n{body}\n```"


def _short(command: str) -> str:
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= MAX_COMMAND_CHARS else one_line[:MAX_COMMAND_CHARS] + "…"


def _took(seconds: float) -> str:
    """How long a job ran, as the end of a sentence: a job quicker than the shown
    precision is "in under 0.1 s" (``after 0.0 s`` reads as if it never ran)."""
    if seconds < 0.05:  # what ``:.1f`` would show as 0.0
        return "in under 0.1 s"
    return f"after {_duration(seconds)}"


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"

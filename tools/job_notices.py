"""What job notices say: the job, its command, how it ended, and its output."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from .watch import WatchLimits, WatchNotice

if TYPE_CHECKING:
    from .jobs import JobRecord

MAX_OUTPUT_CHARS = 3000
MAX_COMMAND_CHARS = 200


def completion_text(record: JobRecord, tail: list[str]) -> str:
    took = _duration((record.ended_at or record.started_at) - record.started_at)
    if record.state == "lost":
        head = (f"Job {record.id} ended while the gateway was down; its exit code was "
                f"not recorded (it was probably killed).")
    elif record.killed:
        head = f"Job {record.id} was killed ({describe_exit(record.exit_code)}) after {took}."
    else:
        head = f"Job {record.id} finished: {describe_exit(record.exit_code)} after {took}."
    return f"{head}\n$ {_short(record.command)}\n{_output_block(tail, 'last output')}"


def watch_text(record: JobRecord, notice: WatchNotice, limits: WatchLimits) -> str:
    if notice.kind == "watch_disabled":
        return (f"Job {record.id}: watch turned off after {limits.max_notices} notices; "
                f"you will get a notice when the job ends.\n$ {_short(record.command)}\n"
                f"{_output_block(list(notice.lines), 'latest matching lines')}")
    lines = notice.lines[-limits.max_lines:]
    text = f"Job {record.id} output matched:\n{_output_block(list(lines), None)}"
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


def _output_block(lines: list[str], title: str | None) -> str:
    if not lines:
        return "(no output)"
    body = "\n".join(lines).replace("```", "`\u200b``")
    if len(body) > MAX_OUTPUT_CHARS:
        body = "…" + body[-MAX_OUTPUT_CHARS:]
    head = f"{title}:\n" if title else ""
    return f"{head}```\n{body}\n```"


def _short(command: str) -> str:
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= MAX_COMMAND_CHARS else one_line[:MAX_COMMAND_CHARS] + "…"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"

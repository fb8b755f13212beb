"""The schedule commands: ``/every``, ``/cron``, ``/at`` and ``/schedules``.

Each works in the conversation it is sent in, and only on that conversation's
schedules. A schedule made here reports here — in this topic or thread, under
the message that made it — whichever session of the conversation is live
when it runs.
"""

from __future__ import annotations

from agent.arguments import split_first_word
from gateway.messages.turn import Turn
from gateway.words.return_address import ReturnAddress
from tools.schedule_spec import ScheduleError
from tools.scheduler import Scheduler
from tools.schedules import ScheduleRecord

COMMANDS: dict[str, str] = {
    "every": "run a command again and again: /every 10m <command> (30s, 2h, 1d, 1h30m)",
    "cron": "run a command on a cron schedule: /cron '0 9 * * 1-5' <command>",
    "at": "run a command once: /at 18:30 <command>, /at 2026-12-24 09:00 …, /at +20m …",
    "schedules": "this conversation's schedules; /schedules pause|resume|run|remove <id>",
}
_ACTIONS = ("pause", "resume", "run", "remove")


class ScheduleCommands:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def every(self, turn: Turn, args: str) -> None:
        zone, args = _timezone_option(args)
        interval, _, command = args.partition(" ")
        _require(interval and command.strip(), "/every <interval> <command>, e.g. /every 10m "
                                               "./check.sh")
        await self._create(turn, every=interval, command=command.strip(), timezone=zone)

    async def cron(self, turn: Turn, args: str) -> None:
        zone, args = _timezone_option(args)
        expression, command = _first_word(args)
        _require(expression and command, "/cron '<minute hour day month weekday>' <command>, "
                                         "e.g. /cron '0 9 * * 1-5' ./standup.sh")
        await self._create(turn, cron=expression, command=command, timezone=zone)

    async def at(self, turn: Turn, args: str) -> None:
        zone, args = _timezone_option(args)
        words = args.split(" ", 2)
        if len(words) >= 3 and len(words[0]) == 10 and words[0][4] == "-":  # a date and a time
            when, command = f"{words[0]} {words[1]}", words[2]
        else:
            when, _, command = args.partition(" ")
        _require(when and command.strip(), "/at <HH:MM | YYYY-MM-DD HH:MM | +20m> <command>")
        await self._create(turn, at=when, command=command.strip(), timezone=zone)

    async def schedules(self, turn: Turn, args: str) -> None:
        action, _, schedule_id = args.strip().partition(" ")
        key = turn.session.session_key
        if not action:
            records = await self.scheduler.list(key)
            await turn.reply("\n".join(r.line() for r in records) if records
                             else "No schedules in this conversation.")
            return
        _require(action in _ACTIONS and schedule_id.strip(),
                 "/schedules, or /schedules pause|resume|run|remove <id>")
        record = await self.scheduler.own(schedule_id, key)
        if action == "pause":
            record = await self.scheduler.pause(record.id)
            await turn.reply(f"Schedule {record.id} is paused.")
        elif action == "resume":
            record = await self.scheduler.resume(record.id)
            await turn.reply(f"Schedule {record.id} is running again; next run "
                             f"{record.when(record.next_run_at)}.")
        elif action == "run":
            await self.scheduler.run_now(record.id)
            await turn.reply(f"Schedule {record.id} runs now; its result comes here.")
        else:
            await self.scheduler.remove(record.id)
            await turn.reply(f"Schedule {record.id} is removed.")

    async def _create(self, turn: Turn, **spec: str | None) -> None:
        record = await self.scheduler.create(ReturnAddress.capture(), **spec)
        await turn.reply(created_text(record))


def created_text(record: ScheduleRecord) -> str:
    return (f"Schedule {record.id}: {record.spec.describe()} ({record.spec.timezone}), next run "
            f"{record.when(record.next_run_at)}. Its runs report here. {record.task}")


def _timezone_option(args: str) -> tuple[str | None, str]:
    """``--tz Europe/Berlin`` before the rest, when given."""
    words = args.strip().split(" ", 2)
    if words and words[0] == "--tz":
        if len(words) < 3:
            raise ScheduleError("--tz needs a timezone and then the schedule, e.g. "
                                "/every --tz Europe/Berlin 1d ./report.sh")
        return words[1], words[2]
    return None, args.strip()


def _first_word(args: str) -> tuple[str, str]:
    try:
        return split_first_word(args)
    except ValueError:
        raise ScheduleError("unbalanced quotes in the cron expression") from None


def _require(value: object, usage: str) -> None:
    if not value:
        raise ScheduleError(f"Usage: {usage}")

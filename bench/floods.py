"""Notices under a flood limit: do the waiting ones go out together, and how soon?

Four cases, each against the fake Bot API with Telegram's flood control for a group
(``--per-minute`` messages a minute, all its topics together; one more is a 429 with
``retry_after``), through the real router, lanes, command agent and Telegram adapter:

- ``burst``: 50 jobs ending at once into 5 topics of one forum group (each end its own
  commit, as jobs' ends are).
- ``busy``: the same 50, while the topics' lanes are still sending the replies to 30
  pings people wrote there just before (the group's minute used up by them).
- ``schedule``: a schedule's run every second into one topic for a minute (61 notices).
- ``cron``: the same through a real schedule (``/every 1s``, the shell job it runs and
  the notice of its end), made by a person in the topic and paused after 61 runs.

With ``--model`` the same cases run with the model agent on a fake OpenAI-compatible
endpoint (in this process, answering at once): each notice gives the model a turn and its
answer is what is posted, so it shows whether the answers go together too (each answer
names its notice; counted once and in order like the notices).

For each: every notice delivered once and in order (or not), the messages it took, the
seconds from the last notice made to the last delivered, and the notices per message
after the first minute. Three runs and the load average.

    python -m bench.floods [--case burst,schedule] [--runs 3] [--per-minute 20] [--model]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
import time
from dataclasses import dataclass

from bench.common import bench_config, load_average, quiet, run_loop
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from gateway.words.session_key import build_session_key
from tests.fakes.openai_server import ChatRequest, FakeOpenAI, Say
from tests.fakes.telegram_server import FakeTelegram

FORUM = -1001
NOTICE = re.compile(r"\bJob (t\d+n\d+) finished|\btick-(\d+)-")
#: the model's answer to a notice, as the fake endpoint gives it (``--model``)
ANSWER = re.compile(r"\banswer-(t\d+n\d+|\d+):")


def _names(text: str) -> list[str]:
    return [a or b for a, b in NOTICE.findall(text)]


@dataclass
class Figures:
    notices: int
    delivered_once: int
    in_order: bool
    messages: int
    #: from the last notice made to the last one delivered
    drained_after: float
    #: notices a message carried, of those sent after the first minute
    per_message_later: float
    #: delivered within 90 s of the last notice made
    by_90s: int
    #: notices whose model answer arrived once, in order (``--model``; else None)
    answered: int | None = None


async def _addresses(gw: Gateway, topics: list[int]) -> dict[int, ReturnAddress]:
    addresses = {}
    for topic in topics:
        route = Route("telegram", "group", str(FORUM), thread_id=str(topic))
        key = build_session_key(route)
        session = await gw.store.get_or_create(key, route)
        addresses[topic] = ReturnAddress(key, session.id, route)
    return addresses


def _answer(req: ChatRequest) -> Say:
    """The fake model: an answer naming the notice it read, a word for anything else."""
    found = [a or b for a, b in NOTICE.findall(str(req.last.get("content") or ""))]
    return Say(f"answer-{found[-1]}: seen." if found else "pong")


def _model_section(fake: FakeOpenAI | None) -> dict[str, object]:
    if fake is None:
        return {}
    return {"agent": {"backend": "openai", "base_url": fake.base_url, "model": "fake-model",
                      "api_key": "sk-bench", "retry_backoff_seconds": 0.01}}


async def run_case(case: str, per_minute: int, fixed: bool,
                   believed: float | None, model: FakeOpenAI | None = None) -> Figures:
    topics = [42] if case in ("schedule", "cron") else [42, 43, 44, 45, 46]
    with tempfile.TemporaryDirectory() as home:
        async with FakeTelegram() as fake:
            fake.limit_group(FORUM, messages=per_minute, per=60.0, fixed=fixed)
            config = bench_config(home, platforms={"telegram": {
                "enabled": True, "token": fake.token, "base_url": fake.base_url,
                "allowed_users": ["1"],
                "group_messages_per_minute": believed or per_minute}},
                schedules={"min_interval_seconds": 1}, **_model_section(model))
            async with running_gateway(config) as gw:
                await gw.runner.adapters["telegram"].wait_connected()
                addresses = await _addresses(gw, topics)
                made: list[tuple[str, int]] = []
                began = time.monotonic()

                async def make(topic: int, i: int) -> None:
                    name = f"t{topic}n{i}"
                    made.append((name, topic))
                    await gw.outbox.produce([NewNotification(
                        f"{name}:completion:0", "completion", addresses[topic],
                        f"Job {name} finished: exit code 0 after {i} s.", job_id=name)])

                if case == "busy":  # replies under way in every topic
                    for i in range(30):
                        fake.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True,
                                          thread_id=topics[i % len(topics)],
                                          is_topic_message=True, text=f"ping {i}")
                    await fake.wait_for_sent(per_minute, timeout=120)
                if case in ("burst", "busy"):  # 50 ends at once, each its own commit
                    await asyncio.gather(*(make(topic, i) for i in range(1, 11)
                                           for topic in topics))
                elif case == "schedule":  # one a second for a minute
                    for i in range(61):
                        await make(42, i)
                        await asyncio.sleep(1.0)
                else:  # a real schedule: each run a job, each job's end its notice
                    fake.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True,
                                      thread_id=42, is_topic_message=True,
                                      text="/every 1s echo tick-$(date +%s%N)-")
                    while len(runs := await _completions(gw)) < 61:  # noqa: ASYNC110 - the store
                        await asyncio.sleep(0.5)
                    for record in await gw.scheduler.list():
                        await gw.scheduler.pause(record.id)
                    await asyncio.sleep(3)  # (a run under way as it paused ends)
                    runs = await _completions(gw)
                    made = [(tick, 42) for tick in runs]
                last_made = time.monotonic()
                arrival: dict[str, float] = {}
                deadline = last_made + 300
                by_90s = 0
                while time.monotonic() < deadline:
                    for s in fake.sent:
                        for name in _names(s.text):
                            arrival.setdefault(name, time.monotonic())
                    if time.monotonic() - last_made <= 90:
                        by_90s = len(arrival)
                    if len(arrival) == len(made):
                        break
                    await asyncio.sleep(0.2)
                sent = [s for s in fake.sent if NOTICE.search(s.text)]
    carried = [(s, _names(s.text)) for s in sent]
    answers = [a for s in sent for a in ANSWER.findall(s.text)]
    names = [n for _, found in carried for n in found]
    order = {topic: [n for n in names if made_topic(n) == topic] for topic in topics}
    expected = {topic: [n for n, t in made if t == topic] for topic in topics}
    later = [len(found) for s, found in carried if s.at - began > 60]
    return Figures(
        notices=len(made), delivered_once=sum(names.count(n) == 1 for n, _ in made),
        in_order=order == expected, messages=len(sent),
        drained_after=(max(arrival.values()) - last_made) if arrival else float("nan"),
        per_message_later=statistics.mean(later) if later else float("nan"),
        by_90s=by_90s, answered=None if model is None else _answered(answers, made))


def _answered(answers: list[str], made: list[tuple[str, int]]) -> int:
    """The notices whose model answer arrived once, in the order made in its topic (none
    counts when a topic's answers came out of order)."""
    by_topic: dict[int, list[str]] = {}
    for name in answers:
        by_topic.setdefault(made_topic(name), []).append(name)
    for topic, names in by_topic.items():
        if names != [n for n, t in made if t == topic and n in names]:
            return 0
    return sum(answers.count(name) == 1 for name, _ in made)


def made_topic(name: str) -> int:
    return 42 if name.isdigit() else int(name[1:].split("n", 1)[0])


async def _completions(gw: Gateway) -> list[str]:
    """The ticks whose runs' ends are in the outbox, in the order made."""
    rows = sorted(await gw.outbox.list(), key=lambda n: n.id)
    return [m.group(1) for n in rows if (m := re.search(r"tick-(\d+)-", n.text))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", default="burst,busy,schedule")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-minute", type=int, default=20)
    parser.add_argument("--adapter-per-minute", type=float, default=None,
                        help="what the adapter believes the group takes "
                             "(group_messages_per_minute; default: --per-minute), so a "
                             "limit it does not know is met with the platform's 429s")
    parser.add_argument("--fixed-window", action="store_true",
                        help="the fake counts in minutes that start anew (bursts at each "
                             "reset), not a sliding minute as the adapter does")
    parser.add_argument("--model", action="store_true",
                        help="the model agent on a fake endpoint: each notice a turn of "
                             "the model, its answer posted")
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    quiet()
    for case in args.case.split(","):
        window = "fixed minutes" if args.fixed_window else "a sliding minute"
        believed = args.adapter_per_minute or args.per_minute
        agent = "the model agent" if args.model else "the command agent"
        print(f"{case}: a group allowed {args.per_minute} messages a minute ({window}); "
              f"the adapter counting {believed:g}; {agent}")
        drains = []
        for run in range(1, args.runs + 1):
            if args.model:
                async with FakeOpenAI(_answer) as model:
                    f = await run_case(case, args.per_minute, args.fixed_window,
                                       args.adapter_per_minute, model)
            else:
                f = await run_case(case, args.per_minute, args.fixed_window,
                                   args.adapter_per_minute)
            drains.append(f.drained_after)
            answered = (f"; {f.answered}/{f.notices} model answers once, in order"
                        if f.answered is not None else "")
            print(f"  run {run}: {f.delivered_once}/{f.notices} once, in order {f.in_order}"
                  f"{answered}; {f.messages} messages; all delivered {f.drained_after:.1f} s "
                  f"after the last notice; {f.by_90s} within 90 s; after the first minute "
                  f"{f.per_message_later:.1f} notices a message; {load_average()}")
        if len(drains) > 1:
            print(f"  drain time: median {statistics.median(drains):.1f} s, spread "
                  f"{min(drains):.1f}-{max(drains):.1f} s")


if __name__ == "__main__":
    run_loop(main())

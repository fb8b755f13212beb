"""Flow control with a clock the test drives: every request is counted."""

from __future__ import annotations

import asyncio

from gateway.platforms.flow import FlowControl, RateLimits


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # the fake clock's sleep: time jumps, the loop still turns


async def test_each_part_counts_against_a_groups_minute() -> None:
    clock = Clock()
    flow = FlowControl(RateLimits(per_second=100, group_per_minute=3), clock=clock,
                       sleep=clock.sleep)
    async with flow.chat("-1"):
        for _ in range(5):  # five parts of one long message
            await flow.admit("-1", group=True)
    assert clock.now >= 60  # the fourth part waited for the minute to turn
    assert clock.slept and round(clock.slept[0]) == 60


async def test_a_dm_is_limited_only_by_the_global_rate() -> None:
    clock = Clock()
    flow = FlowControl(RateLimits(per_second=2, group_per_minute=1), clock=clock,
                       sleep=clock.sleep)
    for _ in range(3):
        await flow.admit("7", group=False)
    assert 0.9 <= clock.now <= 1.1  # the third waited for the second to pass, not a minute


async def test_two_chats_told_to_wait_at_once_means_everyone_waits() -> None:
    clock = Clock()
    flow = FlowControl(RateLimits(), clock=clock, sleep=clock.sleep)
    assert flow.pause("a", 5) is False  # one chat: only that chat waits
    await flow.admit("c", group=False)
    assert clock.now == 0
    assert flow.pause("b", 5) is True  # a second chat within a second: global
    await flow.admit("c", group=False)
    assert clock.now >= 5


async def test_a_chats_messages_keep_their_order() -> None:
    flow = FlowControl(RateLimits())
    order: list[int] = []

    async def send(n: int) -> None:
        async with flow.chat("x"):
            await asyncio.sleep(0.001 * (5 - n))  # later ones would finish first
            order.append(n)

    await asyncio.gather(*(send(n) for n in range(5)))
    assert order == [0, 1, 2, 3, 4]

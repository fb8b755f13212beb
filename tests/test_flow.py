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


def test_the_room_a_chat_has_left_is_what_its_limits_and_the_platform_leave() -> None:
    clock = Clock()
    flow = FlowControl(RateLimits(per_second=100, group_per_minute=3), clock=clock,
                       sleep=clock.sleep)
    assert flow.room("-1", group=True) == 3
    flow.try_admit("-1", group=True)  # a preview edit counts too
    assert flow.room("-1", group=True) == 2 and flow.room("7", group=False) == 99
    flow.pause("-1", 5)  # a 429's retry_after: nothing fits until it has passed
    assert flow.room("-1", group=True) == 0
    clock.now = 5.0
    assert flow.room("-1", group=True) == 2
    flow.report("9", remaining=1, reset_in=2.0)  # what the platform said (Discord)
    assert flow.room("9", group=False) == 1
    clock.now = 8.0
    assert flow.room("9", group=False) == 100  # that window has passed
    clock.now = 61.0
    assert flow.room("-1", group=True) == 3


def test_discord_answers_to_posts_say_how_much_the_channel_takes() -> None:
    from yarl import URL

    from gateway.platforms.discord.routes import rate_limit_report

    post = URL("http://127.0.0.1:1/api/v10/channels/500/messages")
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset-After": "2.5"}
    assert rate_limit_report("POST", post, 200, headers) == ("500", 0, 2.5)
    assert rate_limit_report("POST", post, 429, {"Retry-After": "3"}) == ("500", 0, 3.0)
    assert rate_limit_report("POST", post, 200, {}) is None  # no limit said
    assert rate_limit_report("PATCH", URL(f"{post}/1"), 200, headers) is None  # an edit
    assert rate_limit_report("POST", post, 200, {"X-RateLimit-Remaining": "x",
                                                 "X-RateLimit-Reset-After": "1"}) is None

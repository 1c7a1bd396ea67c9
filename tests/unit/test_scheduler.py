"""The work queue: dedup, bounded workers, events before resyncs, backoff, spread resyncs (virtual time)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_operator.controller.scheduler import Key, Priority, Scheduler, backoff


@dataclass(order=True)
class _Timer:
    when: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.t = 0.0
        self._timers: list[_Timer] = []
        self._seq = 0

    def now(self) -> float:
        return self.t

    def call_later(self, seconds: float, callback: Callable[[], None]) -> _Timer:
        self._seq += 1
        timer = _Timer(self.t + seconds, self._seq, callback)
        heapq.heappush(self._timers, timer)
        return timer

    async def sleep(self, seconds: float) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not done.done():
                done.set_result(None)

        self.call_later(seconds, wake)
        await done

    async def advance(self, seconds: float) -> None:
        target = self.t + seconds
        while self._timers and self._timers[0].when <= target:
            timer = heapq.heappop(self._timers)
            self.t = timer.when
            if not timer.cancelled:
                timer.callback()
            await settle()
        self.t = target
        await settle()


async def settle(rounds: int = 50) -> None:
    """Let every task that can run, run (no time passes: a bounded number of loop turns)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Work:
    """A reconcile stand-in that records calls and can be held until released."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[Key, float]] = []
        self.running: set[Key] = set()
        self.most_running = 0
        self.gate: asyncio.Event | None = None
        self.fail: set[Key] = set()
        self.requeue: dict[Key, float] = {}

    async def __call__(self, namespace: str, name: str) -> float | None:
        key = (namespace, name)
        self.calls.append((key, self.clock.now()))
        self.running.add(key)
        self.most_running = max(self.most_running, len(self.running))
        try:
            if self.gate is not None:
                await self.gate.wait()
            if key in self.fail:
                raise RuntimeError("the API server said no")
            return self.requeue.get(key)
        finally:
            self.running.discard(key)

    def names(self) -> list[str]:
        return [key[1] for key, _ in self.calls]


@pytest.fixture
async def queue() -> AsyncIterator[tuple[Scheduler, Work, FakeClock]]:
    clock = FakeClock()
    work = Work(clock)
    scheduler = Scheduler(work, workers=2, clock=clock, jitter=lambda: 0.0)
    scheduler.start()
    yield scheduler, work, clock
    await scheduler.stop()


async def test_a_server_requested_many_times_is_reconciled_once_and_once_more_if_asked_while_running(
    queue: tuple[Scheduler, Work, FakeClock],
) -> None:
    scheduler, work, _ = queue
    work.gate = asyncio.Event()
    for _ in range(5):
        scheduler.request("ns", "a")
    await settle()
    assert work.names() == ["a"]
    for _ in range(5):
        scheduler.request("ns", "a")  # while it runs
    work.gate.set()
    await settle()
    assert work.names() == ["a", "a"]
    assert scheduler.pending() == 0


async def test_no_more_reconciles_run_at_once_than_there_are_workers(
    queue: tuple[Scheduler, Work, FakeClock],
) -> None:
    scheduler, work, _ = queue
    work.gate = asyncio.Event()
    for i in range(6):
        scheduler.request("ns", f"s{i}")
    await settle()
    assert len(work.running) == 2
    work.gate.set()
    await settle()
    assert sorted(work.names()) == [f"s{i}" for i in range(6)]
    assert work.most_running == 2


async def test_events_go_before_queued_resyncs(queue: tuple[Scheduler, Work, FakeClock]) -> None:
    scheduler, work, _ = queue
    work.gate = asyncio.Event()
    scheduler.request("ns", "busy1")
    scheduler.request("ns", "busy2")
    await settle()
    for i in range(3):
        scheduler.request("ns", f"resync{i}", Priority.RESYNC)
    scheduler.request("ns", "event")
    scheduler.request("ns", "resync2")  # an event for a server already queued by the resync moves it up
    work.gate.set()
    await settle()
    assert work.names()[2:4] == ["event", "resync2"]
    assert sorted(work.names()[4:]) == ["resync0", "resync1"]


async def test_a_failing_server_is_retried_after_a_growing_backoff(queue: tuple[Scheduler, Work, FakeClock]) -> None:
    scheduler, work, clock = queue
    scheduler.known.add(("ns", "bad"))
    work.fail.add(("ns", "bad"))
    scheduler.request("ns", "bad")
    await settle()
    times = [t for _, t in work.calls]
    for _ in range(4):
        await clock.advance(100)
        times = [t for _, t in work.calls]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[:4] == [backoff(n, 0.0) for n in range(1, 5)] == [0.5, 1.0, 2.0, 4.0]
    work.fail.clear()
    await clock.advance(100)
    calls = len(work.calls)
    await clock.advance(1000)
    assert len(work.calls) == calls  # once it succeeds, no more retries


async def test_requeue_after_comes_back_as_an_event_and_forget_cancels_it(
    queue: tuple[Scheduler, Work, FakeClock],
) -> None:
    scheduler, work, clock = queue
    scheduler.known.update({("ns", "timed"), ("ns", "gone")})
    work.requeue = {("ns", "timed"): 5.0, ("ns", "gone"): 5.0}
    scheduler.request("ns", "timed")
    scheduler.request("ns", "gone")
    await settle()
    scheduler.forget("ns", "gone")
    await clock.advance(4.9)
    assert sorted(work.names()) == ["gone", "timed"]
    await clock.advance(0.2)
    assert sorted(work.names()) == ["gone", "timed", "timed"]


async def test_a_resync_requests_every_server_spread_over_the_interval(
    queue: tuple[Scheduler, Work, FakeClock],
) -> None:
    scheduler, work, clock = queue
    scheduler.known.update({("ns", f"s{i}") for i in range(4)})
    passes = asyncio.get_running_loop().create_task(scheduler.resync_forever(8.0))
    await settle()
    await clock.advance(8.0)  # the first pass starts one interval after start-up
    assert work.calls == [(("ns", "s0"), 8.0)]
    await clock.advance(7.0)
    assert work.calls == [(("ns", f"s{i}"), 8.0 + 2.0 * i) for i in range(4)]
    await clock.advance(8.0)  # the next pass follows at once
    assert [t for _, t in work.calls[4:]] == [16.0, 18.0, 20.0, 22.0]
    passes.cancel()


@given(st.integers(1, 40), st.floats(0.0, 0.999))
def test_backoff_doubles_up_to_its_cap_and_jitter_keeps_it_within_half(failures: int, jitter: float) -> None:
    delay = backoff(failures, jitter, base=1.0, cap=60.0)
    full = min(60.0, 2.0 ** (failures - 1))
    assert full / 2 <= delay <= full

"""The work queue of reconciles, after controller-runtime's.

- A server is queued at most once and reconciled by at most one worker at a time; a request that
  arrives while it runs queues it again once that run ends.
- A fixed number of workers run reconciles, so a resync of 1,000 servers never runs 1,000 at once.
- Events (a watch event, a requeue-after timer such as the fallback's, a retry) go before periodic
  resyncs, so failover timing holds while every server is resynced.
- A failing reconcile is retried after an exponential backoff with jitter, per server.
- A resync requests the servers one after another spread over the interval, not all at once.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from collections.abc import Awaitable, Callable
from enum import IntEnum
from typing import Protocol

from . import metrics

log = logging.getLogger("inference_operator.scheduler")
Key = tuple[str, str]
BASE_BACKOFF = 1.0
MAX_BACKOFF = 60.0


class Priority(IntEnum):
    EVENT = 0  # something changed, a timer came due, or a retry
    RESYNC = 1  # the periodic look at every server


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time as the scheduler sees it; tests substitute one they advance by hand."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Cancellable: ...


class LoopClock:
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(seconds, callback)


def backoff(failures: int, jitter: float, base: float = BASE_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """base * 2^(failures-1), at most `cap`, scaled into [1/2, 1] of itself by `jitter` in [0, 1)."""
    return min(cap, base * 2.0 ** (failures - 1)) * (0.5 + jitter / 2)


class Scheduler:
    def __init__(
        self,
        work: Callable[[str, str], Awaitable[float | None]],
        *,
        workers: int = 16,
        clock: Clock | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._work = work
        self._workers = workers
        self._clock: Clock = clock or LoopClock()
        self._jitter = jitter
        self._heap: list[tuple[int, int, Key]] = []
        self._seq = 0
        self._queued: dict[Key, tuple[Priority, int, float]] = {}  # key -> (priority, heap entry, since)
        self._running: set[Key] = set()
        self._again: dict[Key, Priority] = {}  # requested while running
        self._timers: dict[Key, Cancellable] = {}
        self._failures: dict[Key, int] = {}
        self._wakeup = asyncio.Event()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.known: set[Key] = set()

    # Requests ------------------------------------------------------------------------------------
    def request(self, namespace: str, name: str, priority: Priority = Priority.EVENT) -> None:
        key = (namespace, name)
        if key in self._running:
            self._again[key] = min(priority, self._again.get(key, priority))
            return
        queued = self._queued.get(key)
        if queued is not None and queued[0] <= priority:
            return
        self._seq += 1
        since = queued[2] if queued is not None else self._clock.now()
        self._queued[key] = (priority, self._seq, since)
        heapq.heappush(self._heap, (int(priority), self._seq, key))
        metrics.QUEUE_DEPTH.set(len(self._queued))
        self._wakeup.set()

    def forget(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self.known.discard(key)
        self._failures.pop(key, None)
        self._cancel_timer(key)

    def _cancel_timer(self, key: Key) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def after(self, namespace: str, name: str, delay: float) -> None:
        """Request a reconcile `delay` seconds from now (replacing an earlier timer of that server)."""
        key = (namespace, name)
        self._cancel_timer(key)
        self._timers[key] = self._clock.call_later(delay, lambda: self._due(key))

    def _due(self, key: Key) -> None:
        self._timers.pop(key, None)
        if key in self.known:
            self.request(*key)

    # Workers -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.get_running_loop().create_task(self._worker()) for _ in range(self._workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def pending(self, priority: Priority | None = None) -> int:
        """Servers queued or running (of one priority when given: running ones count under any)."""
        queued = sum(1 for p, _, _ in self._queued.values() if priority is None or p == priority)
        return queued + len(self._running)

    async def idle(self, priority: Priority | None = None) -> None:
        """Wait until nothing is queued or running (new requests may come afterwards)."""
        while self.pending(priority):
            self._changed.clear()
            await self._changed.wait()

    def _pop(self) -> Key | None:
        while self._heap:
            priority, seq, key = heapq.heappop(self._heap)
            queued = self._queued.get(key)
            if queued is None or queued[1] != seq:
                continue  # superseded by a request of higher priority
            del self._queued[key]
            metrics.QUEUE_DEPTH.set(len(self._queued))
            metrics.QUEUE_WAIT_SECONDS.labels(Priority(priority).name.lower()).observe(self._clock.now() - queued[2])
            return key
        return None

    async def _worker(self) -> None:
        while True:
            key = self._pop()
            if key is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self._running.add(key)
            try:
                requeue = await self._once(key)
            finally:
                self._running.discard(key)
                self._changed.set()
            again = self._again.pop(key, None)
            if again is not None:
                self.request(*key, again)
            elif requeue is not None and key in self.known:
                self.after(*key, requeue)
            else:
                self._cancel_timer(key)  # the latest reconcile is waiting for nothing

    async def _once(self, key: Key) -> float | None:
        started = self._clock.now()
        try:
            requeue = await self._work(*key)
        except Exception:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            metrics.RECONCILE_ERRORS.inc()
            metrics.RECONCILES.labels("error").inc()
            delay = backoff(failures, self._jitter())
            log.exception("reconcile of %s/%s failed (attempt %d); next in %.1f s", *key, failures, delay)
            return delay
        finally:
            metrics.RECONCILE_SECONDS.observe(self._clock.now() - started)
        self._failures.pop(key, None)
        metrics.RECONCILES.labels("ok").inc()
        return requeue

    # Resyncs -------------------------------------------------------------------------------------
    async def resync(self, every: float) -> None:
        """One pass: every known server requested once, spread evenly over `every` seconds; returns
        when the pass's reconciles are done and the interval is over."""
        keys = sorted(self.known)
        start = self._clock.now()
        for i, key in enumerate(keys):
            delay = start + every * i / len(keys) - self._clock.now()
            if delay > 0:
                await self._clock.sleep(delay)
            if key in self.known:
                self.request(*key, Priority.RESYNC)
        await self.idle(Priority.RESYNC)
        rest = start + every - self._clock.now()
        if rest > 0:
            await self._clock.sleep(rest)
        metrics.RESYNCS.inc()

    async def resync_forever(self, every: float) -> None:
        await self._clock.sleep(every)  # the watches' first listing has just reconciled every server
        while True:
            await self.resync(every)

"""Runs reconciles: at most one at a time per server, coalescing bursts, with timed re-checks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from . import metrics

log = logging.getLogger("inference_operator.scheduler")
Key = tuple[str, str]
MAX_BACKOFF = 60.0


class Scheduler:
    def __init__(self, work: Callable[[str, str], Awaitable[float | None]]) -> None:
        self._work = work
        self._running: dict[Key, asyncio.Task[None]] = {}
        self._dirty: set[Key] = set()
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._failures: dict[Key, int] = {}
        self.known: set[Key] = set()

    def request(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        if key in self._running:
            self._dirty.add(key)
            return
        self._running[key] = asyncio.get_running_loop().create_task(self._run(key))

    def forget(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self.known.discard(key)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    async def idle(self) -> None:
        """Wait until no reconcile runs (new ones may start afterwards)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def _run(self, key: Key) -> None:
        requeue: float | None = None
        try:
            while True:
                self._dirty.discard(key)
                requeue = await self._once(key)
                if key not in self._dirty:
                    break
        finally:
            self._running.pop(key, None)
        if requeue is not None and key in self.known:
            self._schedule(key, requeue)

    async def _once(self, key: Key) -> float | None:
        started = asyncio.get_running_loop().time()
        try:
            requeue = await self._work(*key)
        except Exception:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            metrics.RECONCILE_ERRORS.inc()
            metrics.RECONCILES.labels("error").inc()
            log.exception("reconcile of %s/%s failed (attempt %d)", *key, failures)
            return min(MAX_BACKOFF, 2.0**failures)
        finally:
            metrics.RECONCILE_SECONDS.observe(asyncio.get_running_loop().time() - started)
        self._failures.pop(key, None)
        metrics.RECONCILES.labels("ok").inc()
        return requeue

    def _schedule(self, key: Key, delay: float) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self.request, *key)

"""Leader election with a coordination.k8s.io Lease: of several replicas only the holder acts.

Expiry is judged as client-go judges it: a candidate never compares the holder's `renewTime` with its
own wall clock (clocks of two nodes differ). It remembers when it last saw the Lease's record change,
on its own monotonic clock, and counts the lease as expired only after `leaseDurationSeconds` more
without a change. The leader gives up once its renewals have failed for `renew_deadline`, which is
shorter than the lease duration, so it has stopped before any standby may take over; and it gives up
at once when the Lease names another holder.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from . import metrics
from .kube import Kube

log = logging.getLogger("inference_operator.leader")
LEASE_API = "coordination.k8s.io/v1"
# /healthz fails after this many lease durations without an answer from the API server: the
# election loop is stuck or the replica's credentials no longer work; a restart may cure either.
SILENCE_LEASES = 4


@dataclass(frozen=True)
class LeaseTiming:
    """The three numbers of client-go's leader election, with its usual values."""

    duration: float = 15.0  # a standby takes over after seeing no change for this long
    renew_deadline: float = 10.0  # the leader stops when it has not renewed for this long
    retry_period: float = 2.0  # the leader renews this often

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.duration:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration "
                f"(got {self.retry_period:g} s, {self.renew_deadline:g} s, {self.duration:g} s): "
                "the leader must stop acting before a standby may consider its lease expired"
            )

    @property
    def standby_period(self) -> float:
        # A standby looks twice as often as the leader renews, so it sees the last renewal of a
        # leader that dies within half a retry period, and takes over that soon after expiry.
        return self.retry_period / 2


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    """What a holder changes when it renews; any change counts as a sign of life."""
    spec = lease.get("spec") or {}
    return (
        spec.get("holderIdentity"),
        spec.get("renewTime"),
        spec.get("acquireTime"),
        spec.get("leaseDurationSeconds"),
        spec.get("leaseTransitions"),
        (lease.get("metadata") or {}).get("resourceVersion"),
    )


class LeaseElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or LeaseTiming()
        self.clock = clock
        self.wall_clock = wall_clock
        self.sleep = sleep
        self.holder: str | None = None  # as last seen in the Lease
        self.last_contact = clock()  # when the API server last answered an election request
        self._record: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._observed_duration = self.timing.duration
        self._renewed_at = 0.0

    def _observe(self, lease: dict[str, Any], now: float) -> None:
        self.last_contact = now
        spec = lease.get("spec") or {}
        self.holder = spec.get("holderIdentity") or None
        self._observed_duration = float(spec.get("leaseDurationSeconds") or self.timing.duration)
        record = _record(lease)
        if record != self._record:
            self._record = record
            self._observed_at = now

    def expires_in(self) -> float:
        """Seconds until the observed holder's lease expires, on this replica's own clock."""
        return self._observed_at + self._observed_duration - self.clock()

    def _spec(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        now = _micro(self.wall_clock())
        taking_over = previous is None or previous.get("holderIdentity") != self.identity
        spec = dict(previous or {})
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=round(self.timing.duration), renewTime=now)
        if taking_over:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int((previous or {}).get("leaseTransitions") or 0) + (1 if previous else 0)
        return spec

    async def try_acquire_or_renew(self) -> bool:
        """One look at the Lease: renew it if ours, take it if free or expired. True while leading."""
        lease = await self.kube.get(LEASE_API, "Lease", self.namespace, self.name)
        try:
            if lease is None:
                created = await self.kube.create(
                    {
                        "apiVersion": LEASE_API,
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": self._spec(None),
                    }
                )
                self._observe(created, self.clock())
                return True
            self._observe(lease, self.clock())
            if self.holder not in (None, self.identity) and self.expires_in() > 0:
                return False
            lease["spec"] = self._spec(lease.get("spec") or {})
            # The resourceVersion read above makes this a compare-and-swap: of two racing writers one gets 409.
            self._observe(await self.kube.replace(lease), self.clock())
            return True
        except ApiException as err:
            if err.status == 409:
                return False
            raise

    async def _attempt(self, limit: float) -> bool:
        try:
            async with asyncio.timeout(max(limit, 0.0)):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            log.warning("no answer from the API server about lease %s/%s", self.namespace, self.name)
        except Exception:
            log.exception("lease %s/%s could not be read or written", self.namespace, self.name)
        return False

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        log.info("waiting for leadership (lease %s/%s)", self.namespace, self.name)
        metrics.LEADER.set(0)
        while True:
            started = self.clock()
            if await self._attempt(self.timing.renew_deadline):
                self._renewed_at = started
                metrics.LEADER.set(1)
                log.info("leading as %s", self.identity)
                return
            wait = self.timing.standby_period
            if self.holder not in (None, self.identity) and 0 < self.expires_in() < wait:
                wait = self.expires_in() + 0.01  # wake at the expiry rather than after it
            await self.sleep(wait)

    async def keep(self, lost: asyncio.Event) -> None:
        """Renew until another replica holds the Lease or renewals failed for the renew deadline; then
        set `lost`. Cancelling it (a clean shutdown) leaves `lost` unset."""
        try:
            await self._renew_while_leading()
        except Exception:
            log.exception("lease renewal stopped")
        metrics.LEADER.set(0)
        lost.set()

    async def _renew_while_leading(self) -> None:
        while True:
            await self.sleep(self.timing.retry_period)
            started = self.clock()
            deadline = self._renewed_at + self.timing.renew_deadline
            if await self._attempt(deadline - started):
                self._renewed_at = started
                continue
            if self.holder not in (None, self.identity):
                log.error("lease %s/%s is held by %s; stopping", self.namespace, self.name, self.holder)
                return
            if self.clock() >= deadline:
                log.error("lease not renewed for %.0f s; stopping", self.clock() - self._renewed_at)
                return

    def liveness_problem(self) -> str | None:
        """Why /healthz should fail, or None: the election loop hears from the API server regularly."""
        silent = self.clock() - self.last_contact
        if silent > SILENCE_LEASES * self.timing.duration:
            return f"no answer from the API server about the leader Lease for {silent:.0f} s"
        return None

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown, so that a standby takes over without waiting for expiry."""
        lease = await self.kube.get(LEASE_API, "Lease", self.namespace, self.name)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        lease["spec"]["holderIdentity"] = ""
        try:
            await self.kube.replace(lease)
        except ApiException:
            log.warning("lease not released; it expires by itself")
        metrics.LEADER.set(0)

"""The Lease elector against kmock: expiry judged on the candidate's own clock, never on the holder's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from inference_operator.controller import metrics
from inference_operator.controller.kube import Kube
from inference_operator.controller.leader import LeaseElector, LeaseTiming
from inference_operator.controller.main import cancel_on
from tests.support.kmock_api import kube_on, serve_replace, store

LEASES = "coordination.k8s.io/v1/leases"
NS, NAME = "ops", "leader"
TIMING = LeaseTiming(duration=15, renew_deadline=10, retry_period=2)


class FakeClock:
    """A monotonic clock that moves only when the code under test sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
async def kube(kmock: Any) -> AsyncIterator[Kube]:
    serve_replace(kmock, LEASES)
    async with kube_on(kmock) as kube:
        yield kube


def elector(kube: Kube, identity: str, clock: FakeClock) -> LeaseElector:
    return LeaseElector(kube, NS, NAME, identity, TIMING, clock=clock, sleep=clock.sleep)


def lease(kmock: Any) -> dict[str, Any]:
    spec: dict[str, Any] = kmock.objects[LEASES, NS, NAME].raw["spec"]
    return spec


def micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def held_by(kmock: Any, holder: str, renewed: datetime) -> None:
    """Another replica writes the Lease (a renewal or a takeover)."""
    spec = {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": micro(renewed)}
    store(kmock, LEASES, NS, NAME, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": spec})


async def test_acquires_a_lease_that_does_not_exist_yet(kube: Kube, kmock: Any) -> None:
    assert await elector(kube, "b", FakeClock()).try_acquire_or_renew()
    assert lease(kmock)["holderIdentity"] == "b"
    assert lease(kmock)["leaseDurationSeconds"] == 15
    assert lease(kmock)["leaseTransitions"] == 0


async def test_acquires_the_empty_lease_the_chart_creates_at_once(kube: Kube, kmock: Any) -> None:
    store(kmock, LEASES, NS, NAME, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {}})
    clock = FakeClock()
    await elector(kube, "b", clock).acquire()
    assert lease(kmock)["holderIdentity"] == "b"
    assert clock.sleeps == []
    assert metrics.REGISTRY.get_sample_value("inference_operator_leader") == 1.0


async def test_waits_while_the_holder_renews(kube: Kube, kmock: Any) -> None:
    clock = FakeClock()
    standby = elector(kube, "b", clock)
    start = datetime.now(UTC)
    for step in range(30):  # 60 s of renewals every 2 s: four lease durations
        held_by(kmock, "a", start + timedelta(seconds=2 * step))
        assert not await standby.try_acquire_or_renew()
        clock.now += TIMING.retry_period
    assert lease(kmock)["holderIdentity"] == "a"
    assert standby.holder == "a"


async def test_takes_over_one_lease_duration_after_the_last_change_it_saw(kube: Kube, kmock: Any) -> None:
    held_by(kmock, "a", datetime.now(UTC))
    clock = FakeClock()
    standby = elector(kube, "b", clock)
    seen = clock.now
    await standby.acquire()  # the holder never renews again
    waited = clock.now - seen
    assert TIMING.duration <= waited <= TIMING.duration + TIMING.standby_period
    assert lease(kmock)["holderIdentity"] == "b"
    assert lease(kmock)["leaseTransitions"] == 1
    assert max(clock.sleeps) <= TIMING.standby_period


@pytest.mark.parametrize("skew", [timedelta(hours=-3), timedelta(hours=3)], ids=["holder-behind", "holder-ahead"])
async def test_the_holders_clock_does_not_matter(kube: Kube, kmock: Any, skew: timedelta) -> None:
    clock = FakeClock()
    standby = elector(kube, "b", clock)
    holder_time = datetime.now(UTC) + skew
    for _ in range(20):  # the holder renews every 2 s, by its own (skewed) clock
        holder_time += timedelta(seconds=2)
        held_by(kmock, "a", holder_time)
        assert not await standby.try_acquire_or_renew()
        clock.now += TIMING.retry_period
    assert lease(kmock)["holderIdentity"] == "a"

    # The holder stops: the lease expires one duration after the standby last saw a change.
    last_seen = clock.now - TIMING.retry_period
    clock.now = last_seen + TIMING.duration - 0.5
    assert not await standby.try_acquire_or_renew()
    clock.now = last_seen + TIMING.duration + 0.5
    assert await standby.try_acquire_or_renew()
    assert lease(kmock)["holderIdentity"] == "b"


async def test_the_leader_renews_and_keeps_leading(kube: Kube, kmock: Any) -> None:
    clock = FakeClock()
    leader = elector(kube, "a", clock)
    await leader.acquire()
    renewals: list[str] = []
    real_sleep = clock.sleep

    async def sleep(seconds: float) -> None:
        renewals.append(lease(kmock)["renewTime"])
        if len(renewals) > 30:
            asyncio.current_task().cancel()  # type: ignore[union-attr]  # a clean shutdown
        await real_sleep(seconds)

    leader.sleep = sleep
    lost = asyncio.Event()
    with pytest.raises(asyncio.CancelledError):
        await leader.keep(lost)
    assert not lost.is_set()
    assert lease(kmock)["holderIdentity"] == "a"
    assert len(set(renewals)) > 1
    assert set(clock.sleeps) == {TIMING.retry_period}


async def test_the_leader_stops_at_once_when_another_holds_the_lease(kube: Kube, kmock: Any) -> None:
    clock = FakeClock()
    leader = elector(kube, "a", clock)
    await leader.acquire()
    held_by(kmock, "b", datetime.now(UTC) - timedelta(hours=1))  # deposed, whatever the renewTime says
    started = clock.now
    lost = asyncio.Event()
    await leader.keep(lost)
    assert lost.is_set()
    assert clock.now - started == TIMING.retry_period  # the first look after the takeover
    assert metrics.REGISTRY.get_sample_value("inference_operator_leader") == 0.0
    assert lease(kmock)["holderIdentity"] == "b"


async def test_a_leader_whose_renewals_fail_stops_before_its_lease_can_expire(kube: Kube, kmock: Any) -> None:
    clock = FakeClock()
    leader = elector(kube, "a", clock)
    await leader.acquire()
    acquired = clock.now
    (kmock**1)["put", kmock.resource(LEASES)] << 500  # the API server fails every renewal from now on
    lost = asyncio.Event()
    await leader.keep(lost)
    assert lost.is_set()
    assert TIMING.renew_deadline <= clock.now - acquired < TIMING.duration


async def test_a_released_lease_is_taken_at_once(kube: Kube, kmock: Any) -> None:
    clock = FakeClock()
    leader, standby = elector(kube, "a", clock), elector(kube, "b", clock)
    await leader.acquire()
    assert not await standby.try_acquire_or_renew()
    await leader.release()
    assert lease(kmock)["holderIdentity"] == ""
    assert await standby.try_acquire_or_renew()
    assert lease(kmock)["holderIdentity"] == "b"


async def test_a_lost_race_for_the_lease_is_not_leadership(kube: Kube, kmock: Any) -> None:
    clock = FakeClock()
    first, second = elector(kube, "a", clock), elector(kube, "b", clock)
    store(kmock, LEASES, NS, NAME, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {}})
    read = kmock["get", kmock.resource(LEASES)]
    stale = await kube.get("coordination.k8s.io/v1", "Lease", NS, NAME)
    read << (lambda: stale)  # both candidates read the free Lease before either writes
    results = [await first.try_acquire_or_renew(), await second.try_acquire_or_renew()]
    assert results == [True, False]
    assert lease(kmock)["holderIdentity"] == "a"


async def test_liveness_fails_when_the_api_server_stops_answering(kube: Kube, kmock: Any) -> None:
    clock = FakeClock()
    standby = elector(kube, "b", clock)
    assert standby.liveness_problem() is None
    clock.now += 4 * TIMING.duration + 1
    problem = standby.liveness_problem()
    assert problem is not None
    assert "API server" in problem
    assert await standby.try_acquire_or_renew()  # the API server answered
    assert standby.liveness_problem() is None


@pytest.mark.parametrize(("duration", "deadline", "retry"), [(15, 15, 2), (15, 10, 10), (10, 15, 2), (15, 10, 0)])
def test_timing_that_would_let_two_replicas_act_is_refused(duration: float, deadline: float, retry: float) -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseTiming(duration, deadline, retry)


async def test_a_lost_lease_cancels_the_running_operator_at_once() -> None:
    lost, started, cancelled = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def operator() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # kopf runs until told otherwise
        except asyncio.CancelledError:
            cancelled.set()
            raise

    running = asyncio.create_task(cancel_on(lost, operator()))
    await started.wait()
    lost.set()
    await running  # returns: a loss is an orderly end of serving, reported by serve()'s exit code
    assert cancelled.is_set()


async def test_an_operator_that_stops_by_itself_or_fails_is_not_a_loss() -> None:
    async def stops() -> None:
        return None

    async def fails() -> None:
        raise RuntimeError("watch failed")

    lost = asyncio.Event()
    await cancel_on(lost, stops())
    with pytest.raises(RuntimeError, match="watch failed"):
        await cancel_on(lost, fails())
    assert not lost.is_set()

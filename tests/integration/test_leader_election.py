"""Leader election against the real API server: a standby is alive while it waits; a deposed leader stops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient

from tests.support.operator import MERGE, OperatorProcess
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration
Start = Callable[..., OperatorProcess]
RETRY_PERIOD = 2.0


def lease_args(namespace: str) -> list[str]:
    timing = ["--lease-seconds", "15", "--renew-deadline-seconds", "10", "--retry-period-seconds", str(RETRY_PERIOD)]
    return ["--leader-elect", "--leader-election-namespace", namespace, "--lease-name", "le", *timing]


async def leading(op: OperatorProcess) -> float:
    return (await asyncio.to_thread(op.metrics)).get("inference_operator_leader", -1.0)


async def test_a_standby_serves_healthz_and_metrics_while_it_waits_for_the_lease(
    operator_factory: Start, namespace: str
) -> None:
    leader = operator_factory(*lease_args(namespace))
    await wait_for(lambda: leading(leader), lambda v: v == 1.0, timeout=30, what="leading", retry_on=(OSError,))
    standby = operator_factory(*lease_args(namespace))
    await wait_for(
        lambda: asyncio.to_thread(standby.health), lambda status: status == 200, timeout=30, what="standby /healthz"
    )
    assert await leading(standby) == 0.0
    assert await leading(leader) == 1.0
    assert standby.proc is not None
    assert standby.proc.poll() is None


async def test_a_leader_that_sees_another_holder_stops_at_once(
    operator_factory: Start, namespace: str, api: ApiClient
) -> None:
    leader = operator_factory(*lease_args(namespace))
    await wait_for(lambda: leading(leader), lambda v: v == 1.0, timeout=30, what="leading", retry_on=(OSError,))
    leases = client.CoordinationV1Api(api)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    await leases.patch_namespaced_lease(
        "le", namespace, {"spec": {"holderIdentity": "another-replica", "renewTime": now, "acquireTime": now}},
        _content_type=MERGE,  # type: ignore[call-arg]
    )  # fmt: skip
    deposed = time.monotonic()
    assert leader.proc is not None
    proc = leader.proc
    code = await wait_for(
        lambda: asyncio.to_thread(proc.poll), lambda c: c is not None, timeout=30, what="deposed leader exits"
    )
    assert time.monotonic() - deposed <= RETRY_PERIOD + 2, leader.log_tail()
    assert code == 1
    lease = await leases.read_namespaced_lease("le", namespace)
    assert lease.spec.holder_identity == "another-replica"  # it stopped without writing the Lease again

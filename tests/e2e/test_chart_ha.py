"""The chart with two replicas: both stay alive under the chart's own livenessProbe, and when the leader
is killed the standby takes over within the lease duration plus 2 s.

The operator's image does not run in the test cluster, so both replicas run as local processes with the
installed Deployment's arguments and environment and the chart's ServiceAccount token; the test plays
the kubelet, probing each the way the Deployment's livenessProbe says.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient

from tests.conftest import ClusterHandle, kubectl
from tests.support.chart import CHART, helm, service_account_kubeconfig
from tests.support.operator import OperatorProcess
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e
RELEASE = "io-ha"
FULLNAME = f"{RELEASE}-inference-operator"
WATCHED_SECONDS = 180.0  # how long both replicas must stay alive under the probe


@pytest.fixture
async def release_namespace(crd_installed: ClusterHandle, tmp_path: Path) -> AsyncIterator[str]:
    namespace = f"io-ha-{uuid.uuid4().hex[:6]}"
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"replicaCount": 2}))
    helm(crd_installed, "install", RELEASE, str(CHART), "--namespace", namespace, "--create-namespace",
         "--values", str(values))  # fmt: skip
    yield namespace
    helm(crd_installed, "uninstall", RELEASE, "--namespace", namespace, "--wait")
    kubectl(crd_installed, "delete", "namespace", namespace, "--wait=false")


def chart_environment(container: Any, namespace: str) -> dict[str, str]:
    """The container's environment as the kubelet would give it (the only fieldRef is the namespace)."""
    env: dict[str, str] = {}
    for var in container.env:
        if var.value_from is not None:
            assert var.value_from.field_ref.field_path == "metadata.namespace", var
            env[var.name] = namespace
        else:
            env[var.name] = var.value or ""
    return env


async def probe_like_the_kubelet(replicas: list[OperatorProcess], probe: Any, seconds: float) -> list[int]:
    """Probe each replica every periodSeconds for `seconds`; the longest run of failures of each."""
    await asyncio.sleep(probe.initial_delay_seconds or 0)  # the kubelet's first probe comes after this
    streaks, longest = [0] * len(replicas), [0] * len(replicas)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for i, replica in enumerate(replicas):
            status = await asyncio.to_thread(replica.health, probe.http_get.path, probe.timeout_seconds)
            alive = 200 <= status < 400 and replica.proc is not None and replica.proc.poll() is None
            streaks[i] = 0 if alive else streaks[i] + 1
            longest[i] = max(longest[i], streaks[i])
        await asyncio.sleep(probe.period_seconds)  # the probe's period is what is being tested
    return longest


async def test_two_replicas_stay_alive_and_the_standby_takes_over_a_killed_leader(
    release_namespace: str, crd_installed: ClusterHandle, api: ApiClient, tmp_path: Path
) -> None:
    deployment = await client.AppsV1Api(api).read_namespaced_deployment(FULLNAME, release_namespace)
    assert deployment.spec.replicas == 2
    container = deployment.spec.template.spec.containers[0]
    probe = container.liveness_probe
    env = chart_environment(container, release_namespace)
    lease_seconds = float(env["LEASE_SECONDS"])
    kubeconfig = service_account_kubeconfig(crd_installed, release_namespace, FULLNAME, tmp_path / "sa.kubeconfig")
    assert container.args == ["run"]
    replicas = [
        OperatorProcess(kubeconfig, None, tmp_path / f"operator-{i}.log", env=env)  # cluster-wide, as the chart
        for i in range(2)
    ]
    for replica in replicas:
        replica.start()
    try:
        longest = await probe_like_the_kubelet(replicas, probe, WATCHED_SECONDS)
        assert all(streak < probe.failure_threshold for streak in longest), (longest, replicas[0].log_tail())
        assert all(r.proc is not None and r.proc.poll() is None for r in replicas)

        leading = [r.metrics().get("inference_operator_leader", -1.0) for r in replicas]
        assert sorted(leading) == [0.0, 1.0]
        leader, standby = (replicas[0], replicas[1]) if leading[0] == 1.0 else (replicas[1], replicas[0])
        leases = client.CoordinationV1Api(api)
        held = await leases.read_namespaced_lease(f"{FULLNAME}-leader", release_namespace)
        deposed = held.spec.holder_identity
        assert deposed

        killed = time.monotonic()
        leader.kill()
        taken = await wait_for(
            lambda: leases.read_namespaced_lease(f"{FULLNAME}-leader", release_namespace),
            lambda lease: lease.spec.holder_identity not in (None, "", deposed),
            timeout=lease_seconds + 30,
            what="the standby holds the Lease",
        )
        took = time.monotonic() - killed
        assert took <= lease_seconds + 2, (took, taken.spec)
        await wait_for(
            lambda: asyncio.to_thread(standby.metrics),
            lambda m: m.get("inference_operator_leader") == 1.0,
            timeout=10,
            what="the former standby leads",
        )
        assert standby.health(probe.http_get.path, probe.timeout_seconds) == 200
    finally:
        for replica in replicas:
            replica.stop()

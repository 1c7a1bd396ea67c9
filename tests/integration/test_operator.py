"""The operator against the local control plane with kwok GPU nodes (issue acceptance 1-9)."""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient

from inference_operator.controller.conditions import parse_time
from tests.conftest import ClusterHandle, kubectl
from tests.support.examples import EXAMPLES
from tests.support.operator import MERGE, OperatorProcess, Servers
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration
Start = Callable[..., OperatorProcess]

SMALL = {"name": "meta-llama/Llama-3.2-1B-Instruct"}
OTHER = {"name": "Qwen/Qwen2.5-0.5B-Instruct"}
ENGINE = {"image": "vllm/vllm-openai:v0.10.2"}


@pytest.fixture
def servers(api: ApiClient, namespace: str) -> Servers:
    return Servers(api, namespace)


class TrafficWatch:
    """Samples the stable Service's selector and ready endpoints until stopped."""

    def __init__(self, servers: Servers, name: str) -> None:
        self.servers, self.name = servers, name
        self.samples: list[tuple[dict[str, str], set[str]]] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.samples.append(await self.servers.traffic(self.name))
            await asyncio.sleep(0.1)

    def __enter__(self) -> TrafficWatch:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    def assert_one_backend_at_a_time(self) -> None:
        assert len(self.samples) >= 3, "the watcher took too few samples"
        for selector, backends in self.samples:
            role = selector.get("inference-operator.dev/role")
            assert role in ("vllm", "ollama"), selector
            if role == "vllm":
                assert selector.get("inference-operator.dev/revision"), selector
            assert len(backends) <= 1, f"two backends behind one Service: {backends}"

    async def reaches(self, backends: set[str], *, timeout: float, what: str) -> None:
        """Wait until a sample taken by this watcher (not a separate read) shows exactly `backends`."""
        start = len(self.samples)

        async def newest() -> set[str] | None:
            if self._task is not None and self._task.done():
                self._task.result()  # the sampler died: show why instead of timing out
            return self.samples[-1][1] if len(self.samples) > start else None

        await wait_for(newest, lambda b: b == backends, timeout=timeout, what=what, interval=0.05)

    def backends_seen(self) -> list[str]:
        seen: list[str] = []
        for _, backends in self.samples:
            for b in backends:
                if not seen or seen[-1] != b:
                    seen.append(b)
        return seen


async def volume_for_claims(servers: Servers, size: str) -> str:
    """No provisioner here: claims bind to volumes made by hand (no storage class on either side)."""
    name = f"{servers.namespace}-store-{size.lower()}"
    await servers.core.create_persistent_volume(client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeSpec(capacity={"storage": size}, access_modes=["ReadWriteOnce"],
                                           host_path=client.V1HostPathVolumeSource(path=f"/tmp/{name}"),
                                           persistent_volume_reclaim_policy="Retain", storage_class_name=""),
    ))  # fmt: skip
    return name


# Ollama's model store is a claim; the volumes above have no storage class.
OLLAMA_STORE = {"storageClassName": ""}
STORE_COMPONENT = "app.kubernetes.io/component=fallback-model-store"


async def kept_store_removed(servers: Servers, volume: str) -> None:
    """Check that Ollama's store outlived its deleted server, bound to `volume`; then remove both."""
    claims = await servers.core.list_namespaced_persistent_volume_claim(
        servers.namespace, label_selector=STORE_COMPONENT
    )
    [store] = claims.items
    assert store.metadata.deletion_timestamp is None
    assert not store.metadata.owner_references
    assert store.spec.volume_name == volume
    await servers.core.delete_namespaced_persistent_volume_claim(store.metadata.name, servers.namespace)
    await servers.core.delete_persistent_volume(volume)


async def ready_server(servers: Servers, name: str, spec: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    await servers.create(name, spec)
    return await servers.wait_condition(name, "Ready", "True", timeout=timeout)


# 1 --------------------------------------------------------------------------------------------
async def test_example_becomes_ready_with_owned_children_and_printer_columns(
    operator_factory: Start, servers: Servers, namespace: str, crd_installed: ClusterHandle
) -> None:
    operator_factory()
    doc = yaml.safe_load((EXAMPLES / "mistral-7b-with-fallback.yaml").read_text())
    await servers.create(doc["metadata"]["name"], doc["spec"])
    obj = await servers.wait_condition("mistral-7b", "Ready", "True")
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["endpoint"] == f"http://mistral-7b.{namespace}.svc.cluster.local:8000/v1"
    assert status["plan"]["gpus"] == 1
    assert status["plan"]["memory"]["maxSequences"] > 0
    assert "nvidia.com/gpu.memory" in status["plan"]["gpuMemorySource"]
    assert status["activeBackend"] == "vllm"
    uid = obj["metadata"]["uid"]
    deployments = await servers.deployments("mistral-7b")
    assert {d.metadata.labels["inference-operator.dev/role"] for d in deployments} == {"vllm", "ollama"}
    for name in ("mistral-7b", "mistral-7b-ollama"):
        svc = await servers.core.read_namespaced_service(name, namespace)
        assert svc.metadata.owner_references[0].uid == uid
    for dep in deployments:
        assert dep.metadata.owner_references[0].uid == uid

    table = kubectl(crd_installed, "get", "isrv", "-n", namespace, "--no-headers").stdout.split()
    assert table[:5] == ["mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3", "vllm", "True", "Ready"]
    assert table[5].startswith("http://mistral-7b.")


# 2 --------------------------------------------------------------------------------------------
UNREADY = {"annotations": {"sim.inference-operator.dev/ready": "false"}}


async def test_model_switch_moves_traffic_only_after_the_new_pods_are_ready(
    operator_factory: Start, servers: Servers
) -> None:
    operator_factory()
    obj = await ready_server(servers, "switch", {"model": SMALL, "engine": ENGINE, "replicas": 2})
    old = obj["status"]["activeRevision"]
    with TrafficWatch(servers, "switch") as watch:
        await watch.reaches({old}, timeout=30, what="old serving")
        # The new pods start unready (as while vLLM loads weights) until the test lets them pass /health.
        await servers.patch_spec("switch", {"model": OTHER, "podMetadata": UNREADY})
        mid = await servers.wait_status(
            "switch", lambda s: (s.get("rollout") or {}).get("toRevision") not in (None, old), "rollout started"
        )
        new = mid["status"]["rollout"]["toRevision"]
        await wait_for(lambda: servers.set_pod_readiness("switch", new, ready=False), lambda n: n == 2, timeout=30,
                       what="both new pods running")  # fmt: skip
        seen_before = len(watch.samples)

        async def samples() -> int:
            return len(watch.samples)

        await wait_for(samples, lambda n: n >= seen_before + 10, timeout=30, what="samples while new pods unready")
        assert all(backends == {old} for _, backends in watch.samples[seen_before:])
        await servers.set_pod_readiness("switch", new, ready=True)
        await servers.wait_status(
            "switch", lambda s: s.get("activeRevision") == new and s["rollout"]["result"] == "Succeeded", "switched"
        )
        await watch.reaches({new}, timeout=30, what="new serving")
    watch.assert_one_backend_at_a_time()
    assert watch.backends_seen() == [old, new]
    remaining = await wait_for(
        lambda: servers.deployments("switch"), lambda deps: len(deps) == 1, timeout=30, what="old revision removed"
    )
    assert remaining[0].metadata.labels["inference-operator.dev/revision"] == new
    await servers.wait_event("switch", "RolloutSucceeded")


# 3 --------------------------------------------------------------------------------------------
async def test_revision_that_never_becomes_ready_is_rolled_back(operator_factory: Start, servers: Servers) -> None:
    operator_factory()
    spec = {"model": SMALL, "engine": ENGINE, "rollout": {"strategy": "BlueGreen", "timeoutSeconds": 30}}
    obj = await ready_server(servers, "rb", spec)
    old = obj["status"]["activeRevision"]
    never_ready = {"podMetadata": {"annotations": {"sim.inference-operator.dev/ready": "false"}}, "model": OTHER}
    await servers.patch_spec("rb", never_ready)
    stalled = await servers.wait_condition("rb", "Stalled", "True", timeout=90)
    cond = next(c for c in stalled["status"]["conditions"] if c["type"] == "Stalled")
    assert cond["reason"] == "RolloutFailed"
    assert "was not ready within 30s" in cond["message"]
    assert stalled["status"]["activeRevision"] == old
    assert stalled["status"]["rollout"]["result"] == "RolledBack"
    selector, backends = await servers.traffic("rb")
    assert selector["inference-operator.dev/revision"] == old
    assert backends == {old}
    await wait_for(lambda: servers.deployments("rb"), lambda d: len(d) == 1, timeout=30, what="bad revision removed")
    rolled = await servers.wait_event("rb", "RolloutRolledBack")
    assert rolled.type == "Warning"

    await servers.patch_spec("rb", {"podMetadata": None, "model": {"name": "google/gemma-2-2b-it"}})
    done = await servers.wait_status(
        "rb", lambda s: s.get("activeRevision") != old and s["rollout"]["result"] == "Succeeded", "good spec rolled out"
    )
    assert next(c for c in done["status"]["conditions"] if c["type"] == "Stalled")["status"] == "False"


# 4 --------------------------------------------------------------------------------------------
async def wait_for_free_gpus(api: ApiClient, needed: int) -> None:
    core = client.CoreV1Api(api)

    async def free() -> int:
        nodes = await core.list_node()
        pods = await core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed")
        total = sum(int((n.status.allocatable or {}).get("nvidia.com/gpu", "0")) for n in nodes.items)
        used = sum(
            int((c.resources.requests or {}).get("nvidia.com/gpu", "0"))
            for p in pods.items if p.spec.node_name for c in p.spec.containers
        )  # fmt: skip
        return total - used

    await wait_for(free, lambda f: f >= needed, timeout=120, what=f"{needed} free GPUs")


async def test_auto_bridges_through_ollama_when_the_old_revision_holds_every_gpu(
    operator_factory: Start, servers: Servers, api: ApiClient
) -> None:
    await wait_for_free_gpus(api, 32)
    operator_factory()
    volume = await volume_for_claims(servers, "5Gi")
    spec = {
        "model": {"name": "meta-llama/Llama-3.3-70B-Instruct"},
        "engine": {**ENGINE, "tensorParallelSize": 8},
        "resources": {"gpus": 8},
        "replicas": 4,
        "rollout": {"strategy": "Auto"},
        "fallback": {"ollama": {"model": "llama3.2:1b", "mode": "Standby", "store": OLLAMA_STORE}},
    }
    obj = await ready_server(servers, "bridge", spec, timeout=90)
    old = obj["status"]["activeRevision"]
    with TrafficWatch(servers, "bridge") as watch:
        await watch.reaches({old}, timeout=30, what="old serving")
        await servers.patch_spec("bridge", {"model": {"name": "Qwen/Qwen2.5-72B-Instruct"}})
        done = await servers.wait_status(
            "bridge",
            lambda s: s.get("activeRevision") not in (None, old) and s["rollout"]["result"] == "Succeeded",
            "bridged rollout succeeded",
            timeout=120,
        )
        new = done["status"]["activeRevision"]
        await watch.reaches({new}, timeout=30, what="new serving")
    watch.assert_one_backend_at_a_time()
    assert watch.backends_seen() == [old, "ollama", new]
    await servers.wait_event("bridge", "RolloutBridging")
    await servers.delete("bridge")
    await wait_for(lambda: servers.deployments("bridge"), lambda d: not d, timeout=60, what="bridge GC")
    await kept_store_removed(servers, volume)


# 5 --------------------------------------------------------------------------------------------
async def test_unready_vllm_fails_over_to_ollama_and_back(operator_factory: Start, servers: Servers) -> None:
    operator_factory()
    volume = await volume_for_claims(servers, "5Gi")
    activate, recover = 5, 5
    spec = {
        "model": SMALL,
        "engine": ENGINE,
        "fallback": {"ollama": {"model": "llama3.2:1b", "activateAfterSeconds": activate,
                                "recoverAfterSeconds": recover, "store": OLLAMA_STORE}},
    }  # fmt: skip
    obj = await ready_server(servers, "fo", spec)
    rev = obj["status"]["activeRevision"]
    await wait_for(lambda: servers.traffic("fo"), lambda t: t[1] == {rev}, timeout=30, what="vLLM serving")

    # Windows are timed from just before the flip: the operator cannot see it earlier, while the test's own view
    # of it lags by a poll; the persisted timestamps are whole seconds, hence the 1.5 s of slack below.
    unready_at = time.monotonic()
    assert await servers.set_pod_readiness("fo", rev, ready=False) == 1
    await wait_for(
        lambda: servers.traffic("fo"),
        lambda t: t[1] == {"ollama"},
        timeout=activate + 30,
        what="traffic on Ollama",
        interval=0.1,
    )
    assert time.monotonic() - unready_at >= activate - 1.5
    failed_over = await servers.wait_condition("fo", "FallbackActive", "True", timeout=10)
    # How late the switch came, by the operator's own clock: free of kwok's and the test's delays.
    active = next(c for c in failed_over["status"]["conditions"] if c["type"] == "FallbackActive")
    switched = parse_time(active["lastTransitionTime"])
    since = parse_time(failed_over["status"].get("fallbackSince"))
    assert switched is not None
    assert since is not None
    assert activate <= (switched - since).total_seconds() <= activate + 5

    ready_at = time.monotonic()
    assert await servers.set_pod_readiness("fo", rev, ready=True) == 1
    await wait_for(lambda: servers.core.list_namespaced_pod(servers.namespace, label_selector=(
        f"inference-operator.dev/revision={rev}")), lambda pods: all(
        any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []) for p in pods.items),
        timeout=30, what="vLLM pod ready again")  # fmt: skip
    await wait_for(
        lambda: servers.traffic("fo"),
        lambda t: t[1] == {rev},
        timeout=recover + 15,
        what="traffic back on vLLM",
        interval=0.1,
    )
    assert time.monotonic() - ready_at >= recover - 1.5
    await servers.wait_condition("fo", "FallbackActive", "False", timeout=10)
    await servers.wait_event("fo", "FallbackActivated")
    await servers.wait_event("fo", "FallbackRecovered")

    # Ollama's models stay on their claim when the server goes: a new server finds them pulled.
    await servers.delete("fo")
    await wait_for(lambda: servers.deployments("fo"), lambda d: not d, timeout=60, what="fo GC")
    await kept_store_removed(servers, volume)


# 6 --------------------------------------------------------------------------------------------
async def test_operator_killed_mid_rollout_resumes_and_finishes(operator_factory: Start, servers: Servers) -> None:
    first = operator_factory()
    obj = await ready_server(servers, "crash", {"model": SMALL, "engine": ENGINE})
    old = obj["status"]["activeRevision"]
    # The new revision's pods start unready, so the rollout is caught half-way.
    await servers.patch_spec(
        "crash", {"model": OTHER, "podMetadata": {"annotations": {"sim.inference-operator.dev/ready": "false"}}}
    )
    mid = await servers.wait_status(
        "crash",
        lambda s: (s.get("rollout") or {}).get("state") == "Deploying" and s["rollout"]["toRevision"] != old,
        "rollout in progress",
    )
    new = mid["status"]["rollout"]["toRevision"]
    await wait_for(lambda: servers.deployments("crash"), lambda d: len(d) == 2, timeout=30, what="both revisions")
    first.kill()

    await wait_for(
        lambda: servers.set_pod_readiness("crash", new, ready=True),
        lambda n: n == 1,
        timeout=30,
        what="new pod marked ready",
    )
    operator_factory()
    done = await servers.wait_status(
        "crash", lambda s: s.get("activeRevision") == new and s["rollout"]["result"] == "Succeeded", "resumed rollout"
    )
    assert done["status"]["rollout"]["fromRevision"] == old
    await wait_for(lambda: servers.traffic("crash"), lambda t: t[1] == {new}, timeout=30, what="new serving")
    await wait_for(lambda: servers.deployments("crash"), lambda d: len(d) == 1, timeout=30, what="old removed")


# 7 --------------------------------------------------------------------------------------------
async def test_drifted_children_are_restored_and_deletion_keeps_the_cache(
    operator_factory: Start, servers: Servers, namespace: str
) -> None:
    operator_factory()
    for size in ("20Gi", "5Gi"):  # no provisioner here: claims bind to volumes made by hand
        await servers.core.create_persistent_volume(client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"{namespace}-{size.lower()}"),
            spec=client.V1PersistentVolumeSpec(capacity={"storage": size}, access_modes=["ReadWriteOnce"],
                                               host_path=client.V1HostPathVolumeSource(path=f"/tmp/{size}"),
                                               persistent_volume_reclaim_policy="Retain", storage_class_name=""),
        ))  # fmt: skip
    spec = {"model": SMALL, "engine": ENGINE, "cache": {"size": "20Gi", "storageClassName": ""}}
    obj = await ready_server(servers, "drift", spec)
    rev = obj["status"]["activeRevision"]
    dep_name = f"drift-vllm-{rev}"

    await servers.apps.patch_namespaced_deployment_scale(
        dep_name,
        namespace,
        {"spec": {"replicas": 3}},
        _content_type=MERGE,  # type: ignore[call-arg]
    )
    await wait_for(
        lambda: servers.apps.read_namespaced_deployment(dep_name, namespace),
        lambda d: d.spec.replicas == 1,
        timeout=30,
        what="replicas restored to 1",
    )
    await servers.apps.delete_namespaced_deployment(dep_name, namespace)
    await wait_for(lambda: servers.deployments("drift"), lambda deps: any(
        d.metadata.name == dep_name and d.metadata.deletion_timestamp is None for d in deps),
        timeout=30, what="deleted Deployment recreated")  # fmt: skip
    await servers.core.delete_namespaced_service("drift", namespace)
    await wait_for(lambda: servers.core.list_namespaced_service(namespace, field_selector="metadata.name=drift"),
                   lambda s: len(s.items) == 1 and s.items[0].metadata.deletion_timestamp is None, timeout=30,
                   what="deleted Service recreated")  # fmt: skip

    unretained = {"model": SMALL, "engine": ENGINE, "cache": {"size": "5Gi", "retain": False, "storageClassName": ""}}
    await ready_server(servers, "scratch", unretained)
    await servers.delete("drift")
    await servers.delete("scratch")
    for name in ("drift", "scratch"):
        await wait_for(lambda n=name: servers.deployments(n), lambda d: not d, timeout=60, what=f"{name} GC")  # type: ignore[misc]
    claims = await wait_for(
        lambda: servers.core.list_namespaced_persistent_volume_claim(namespace),
        lambda c: [p.metadata.name for p in c.items if p.metadata.deletion_timestamp is None] == ["drift-model-cache"],
        timeout=60, what="retained cache kept, unretained cache collected",
    )  # fmt: skip
    assert claims.items[0].spec.resources.requests["storage"] == "20Gi"
    for size in ("20gi", "5gi"):
        await servers.core.delete_persistent_volume(f"{namespace}-{size}")


# 8 --------------------------------------------------------------------------------------------
async def test_spec_the_planner_refuses_stalls_without_pods_until_fixed(
    operator_factory: Start, servers: Servers
) -> None:
    operator_factory()
    too_big = {
        "model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
        "engine": {**ENGINE, "tensorParallelSize": 1},
        "resources": {"gpus": 1},
    }
    await servers.create("big", too_big)
    obj = await servers.wait_condition("big", "Stalled", "True")
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")
    assert cond["reason"] == "PlanRefused"
    assert "spec.resources.gpus: the model does not fit" in cond["message"]
    assert obj["status"]["phase"] == "Stalled"
    assert await servers.deployments("big") == []
    await servers.wait_event("big", "PlanRefused")

    await servers.patch_spec("big", {"model": SMALL})
    fixed = await servers.wait_condition("big", "Ready", "True")
    assert next(c for c in fixed["status"]["conditions"] if c["type"] == "Stalled")["status"] == "False"


# 9 --------------------------------------------------------------------------------------------
def audit_writes(path: Any, namespace: str, since: float) -> list[dict[str, Any]]:
    writes = []
    for line in path.read_text().splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # the API server is still writing this entry
        entry = json.loads(line)
        ref = entry.get("objectRef") or {}
        stamp = entry.get("stageTimestamp", "")
        if (
            entry.get("user", {}).get("username") == "admin"
            and ref.get("namespace") == namespace
            and entry.get("verb") in ("create", "update", "patch", "delete")
            and calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) >= since
        ):
            writes.append(entry)
    return writes


async def test_full_resync_of_twenty_ready_servers_reads_and_writes_nothing(
    operator_factory: Start, servers: Servers, namespace: str, cluster: ClusterHandle
) -> None:
    op = operator_factory("--resync-seconds", "3")
    names = [f"s{i:02d}" for i in range(20)]
    for name in names:
        await servers.create(name, {"model": SMALL, "engine": ENGINE})
    for name in names:
        await servers.wait_condition(name, "Ready", "True", timeout=120)

    def resyncs() -> float:
        return op.metrics().get("inference_operator_resyncs_total", 0.0)

    async def metrics_now() -> float:
        return resyncs()

    start = resyncs()
    await wait_for(metrics_now, lambda r: r >= start + 1, timeout=30, what="a resync after all are Ready")
    writes_before, reads_before = op.writes(), op.reads()
    window_start = time.time()
    settled = resyncs()
    await wait_for(metrics_now, lambda r: r >= settled + 2, timeout=30, what="two more full resyncs")
    assert op.writes() == writes_before
    assert op.reads() == reads_before  # the servers, their children and the nodes come from the watches
    reconciles = op.metrics()['inference_operator_reconciles_total{result="ok"}']
    assert reconciles >= 60  # the resyncs did reconcile every server
    if cluster.audit_log is not None:
        with contextlib.suppress(FileNotFoundError):
            assert audit_writes(cluster.audit_log, namespace, window_start + 1) == []


# Two replicas -------------------------------------------------------------------------------------
async def test_of_two_replicas_only_the_lease_holder_acts_and_the_other_takes_over(
    operator_factory: Start, servers: Servers, namespace: str
) -> None:
    lease = ["--leader-elect", "--leader-election-namespace", namespace, "--lease-name", "ha", "--lease-seconds", "15"]
    first, second = operator_factory(*lease), operator_factory(*lease)

    async def leaders() -> list[float]:
        out = []
        for op in (first, second):
            try:
                out.append(op.metrics().get("inference_operator_leader", 0.0))
            except OSError:
                out.append(-1.0)  # metrics endpoint not up yet
        return out

    states = await wait_for(leaders, lambda ls: sorted(ls) == [0.0, 1.0], timeout=30, what="one leader, one standby")
    leader, standby = (first, second) if states[0] == 1.0 else (second, first)
    await ready_server(servers, "ha", {"model": SMALL, "engine": ENGINE})
    standby_reconciles = standby.metrics().get('inference_operator_reconciles_total{result="ok"}', 0.0)
    assert standby_reconciles == 0.0

    leader.kill()
    await wait_for(lambda: asyncio.to_thread(standby.metrics), lambda m: m.get("inference_operator_leader") == 1.0,
                   timeout=60, what="standby took the lease", retry_on=(OSError,))  # fmt: skip
    await servers.patch_spec("ha", {"replicas": 2})
    await servers.wait_status("ha", lambda s: s.get("readyReplicas") == 2, "scaled by the new leader", timeout=60)

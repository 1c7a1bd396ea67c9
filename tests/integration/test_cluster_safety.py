"""What a real cluster does besides the happy path: nodes joining, names taken, pods that cannot schedule,
status lost mid-switch, and the order of traffic and removal in a switch."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from inference_operator.api import GROUP, PLURAL, VERSION
from localcluster.shape import NodePool
from tests.integration.test_operator import ENGINE, SMALL, UNREADY, TrafficWatch, ready_server
from tests.support.operator import MERGE, OperatorProcess, Servers
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration
Start = Callable[..., OperatorProcess]


@pytest.fixture
def servers(api: ApiClient, namespace: str) -> Servers:
    return Servers(api, namespace)


def ready_reason(obj: dict[str, Any]) -> str | None:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c["reason"] for c in conds if c["type"] == "Ready"), None)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


@contextlib.asynccontextmanager
async def extra_nodes(api: ApiClient, pool: NodePool) -> AsyncIterator[list[str]]:
    """kwok nodes that exist for one test only."""
    core = client.CoreV1Api(api)
    names = []
    try:
        for node in pool.manifests():
            await core.create_node(node)  # type: ignore[arg-type]
            names.append(node["metadata"]["name"])
        yield names
    finally:
        for name in names:
            with contextlib.suppress(ApiException):
                await core.delete_node(name)


# A node joining ---------------------------------------------------------------------------------------
async def test_a_node_joining_does_not_replan_and_says_what_a_replan_would_change(
    operator_factory: Start, servers: Servers, api: ApiClient, namespace: str
) -> None:
    pool = {"inference-operator.dev/test-pool": namespace}
    big = NodePool(prefix=f"{namespace}-h100", count=1, gpus=8, labels=pool)
    small = NodePool(
        prefix=f"{namespace}-t4", count=1, gpus=8, gpu_product="Tesla-T4", gpu_memory_mib=15360, labels=pool
    )
    async with extra_nodes(api, big):
        operator_factory("--resync-seconds", "10")
        spec = {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "engine": {**ENGINE, "maxModelLen": 8192},
            "scheduling": {"nodeSelector": pool},
        }
        obj = await ready_server(servers, "pinned", spec)
        rev = obj["status"]["activeRevision"]
        assert obj["status"]["plan"]["tensorParallelSize"] == 1
        assert obj["status"]["plan"]["inputs"]["generation"] == obj["metadata"]["generation"]

        async with extra_nodes(api, small):
            outdated = await servers.wait_condition("pinned", "PlanOutdated", "True", timeout=90)
            message = condition(outdated, "PlanOutdated")["message"]
            assert "tensorParallelSize 1 -> " in message
            assert "inference-operator.dev/replan" in message
            event = await servers.wait_event("pinned", "ReplanAvailable")
            assert "tensorParallelSize" in event.message
            # Nothing rolled out: one Deployment, the same revision, the same plan.
            assert outdated["status"]["activeRevision"] == rev
            assert outdated["status"]["plan"]["tensorParallelSize"] == 1
            assert [
                d.metadata.labels["inference-operator.dev/revision"] for d in await servers.deployments("pinned")
            ] == [rev]
            # Asked for, the re-plan rolls out.
            await servers.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "pinned",
                {"metadata": {"annotations": {"inference-operator.dev/replan": "1"}}},
                _content_type=MERGE,  # type: ignore[call-arg]
            )  # fmt: skip
            replanned = await servers.wait_status(
                "pinned", lambda s: (s.get("rollout") or {}).get("toRevision") not in (None, rev), "re-plan started"
            )
            assert replanned["status"]["plan"]["tensorParallelSize"] > 1


# Names and ownership ------------------------------------------------------------------------------------
async def test_a_server_name_that_would_take_another_servers_fallback_service_is_refused(
    operator_factory: Start, servers: Servers
) -> None:
    operator_factory()
    await ready_server(servers, "foo", {"model": SMALL, "engine": ENGINE, "fallback": {"ollama": {"model": "m:1b"}}})
    with pytest.raises(ApiException) as refused:
        await servers.create("foo-ollama", {"model": SMALL, "engine": ENGINE})
    assert refused.value.status == 422
    assert "must not end with -ollama" in str(refused.value.body)


async def test_a_child_name_held_by_another_object_is_reported_never_taken_over(
    operator_factory: Start, servers: Servers, namespace: str
) -> None:
    theirs = client.V1Service(
        metadata=client.V1ObjectMeta(name="taken", labels={"app": "theirs"}),
        spec=client.V1ServiceSpec(selector={"app": "theirs"}, ports=[client.V1ServicePort(port=80)]),
    )
    await servers.core.create_namespaced_service(namespace, theirs)
    operator_factory()
    await servers.create("taken", {"model": SMALL, "engine": ENGINE})
    stalled = await servers.wait_condition("taken", "Stalled", "True", timeout=30)
    cond = condition(stalled, "Stalled")
    assert cond["reason"] == "ChildConflict"
    assert f"Service {namespace}/taken" in cond["message"]
    await servers.wait_event("taken", "ChildConflict")
    untouched = await servers.core.read_namespaced_service("taken", namespace)
    assert untouched.spec.selector == {"app": "theirs"}
    assert not untouched.metadata.owner_references
    assert await servers.deployments("taken") == []

    await servers.core.delete_namespaced_service("taken", namespace)
    await servers.wait_condition("taken", "Ready", "True", timeout=90)


async def test_a_claim_the_operator_did_not_create_is_used_but_never_owned(
    operator_factory: Start, servers: Servers, namespace: str
) -> None:
    claim = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="scratch-model-cache"),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"], resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"})
        ),
    )
    await servers.core.create_namespaced_persistent_volume_claim(namespace, claim)
    operator_factory()
    spec = {"model": SMALL, "engine": ENGINE, "cache": {"size": "5Gi", "retain": False}}
    await servers.create("scratch", spec)
    await wait_for(lambda: servers.deployments("scratch"), lambda d: len(d) == 1, timeout=60, what="a revision")
    await servers.delete("scratch")
    await wait_for(lambda: servers.deployments("scratch"), lambda d: not d, timeout=60, what="children collected")
    kept = await servers.core.read_namespaced_persistent_volume_claim("scratch-model-cache", namespace)
    assert kept.metadata.deletion_timestamp is None
    assert not kept.metadata.owner_references
    assert kept.spec.resources.requests["storage"] == "1Gi"


# Trouble in seconds -------------------------------------------------------------------------------------
async def reported_unschedulable_within(
    servers: Servers, name: str, spec: dict[str, Any], seconds: float
) -> dict[str, Any]:
    """Create the server; its Ready condition must say Unschedulable within `seconds` of the create."""
    started = time.monotonic()
    await servers.create(name, spec)
    obj = await wait_for(
        lambda: servers.get(name),
        lambda o: ready_reason(o) == "Unschedulable",
        timeout=seconds,
        what="Ready=False with reason Unschedulable",
    )
    assert time.monotonic() - started <= seconds
    return obj


async def test_a_pod_that_cannot_schedule_is_reported_within_seconds(operator_factory: Start, servers: Servers) -> None:
    operator_factory()
    spec = {"model": SMALL, "engine": ENGINE, "scheduling": {"nodeSelector": {"no-such-pool": "anywhere"}}}
    obj = await reported_unschedulable_within(servers, "nowhere", spec, seconds=10)
    assert "node" in condition(obj, "Ready")["message"]
    event = await servers.wait_event("nowhere", "Unschedulable", timeout=10)
    assert event.type == "Warning"


async def test_more_gpus_than_any_node_has_is_reported_within_seconds(
    operator_factory: Start, servers: Servers
) -> None:
    operator_factory()
    spec = {
        "model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
        "engine": {**ENGINE, "tensorParallelSize": 16},
    }
    obj = await reported_unschedulable_within(servers, "tp16", spec, seconds=10)
    assert "more than the 8 GPUs of the largest eligible node" in condition(obj, "Ready")["message"]
    assert condition(obj, "Stalled")["status"] == "True"
    await servers.wait_event("tp16", "Unschedulable", timeout=10)
    assert await servers.deployments("tp16") == []


# Status lost mid-switch ---------------------------------------------------------------------------------
async def test_status_wiped_mid_switch_keeps_the_old_revision_serving_and_the_switch_finishes(
    operator_factory: Start, servers: Servers, namespace: str
) -> None:
    operator_factory()
    obj = await ready_server(servers, "wiped", {"model": SMALL, "engine": ENGINE, "rollout": {"strategy": "BlueGreen"}})
    old = obj["status"]["activeRevision"]
    with TrafficWatch(servers, "wiped") as traffic:
        await traffic.reaches({old}, timeout=30, what="old serving")
        await servers.patch_spec("wiped", {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "podMetadata": UNREADY})
        mid = await servers.wait_status(
            "wiped", lambda s: (s.get("rollout") or {}).get("toRevision") not in (None, old), "rollout started"
        )
        new = mid["status"]["rollout"]["toRevision"]
        await wait_for(lambda: servers.deployments("wiped"), lambda d: len(d) == 2, timeout=30, what="both revisions")
        # Status lost, as after a restore: only the spec is left.
        await servers.custom.replace_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, "wiped",
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceServer",
             "metadata": {"name": "wiped", "resourceVersion": mid["metadata"]["resourceVersion"]}, "status": {}},
        )  # fmt: skip
        rebuilt = await servers.wait_status(
            "wiped", lambda s: (s.get("rollout") or {}).get("toRevision") == new, "status rebuilt from the cluster"
        )
        assert rebuilt["status"]["activeRevision"] == old
        assert rebuilt["status"]["rollout"]["result"] == "InProgress"
        assert {d.metadata.labels["inference-operator.dev/revision"] for d in await servers.deployments("wiped")} == {
            old,
            new,
        }
        await wait_for(
            lambda: servers.set_pod_readiness("wiped", new, ready=True), lambda n: n == 1, timeout=30, what="new ready"
        )
        await servers.wait_status(
            "wiped", lambda s: s.get("activeRevision") == new and s["rollout"]["result"] == "Succeeded", "switched"
        )
        await traffic.reaches({new}, timeout=30, what="new serving")
    traffic.assert_one_backend_at_a_time()
    assert traffic.backends_seen() == [old, new]


# Drain ordering ----------------------------------------------------------------------------------------
class PodDeletions:
    """When each pod of a server got its deletion timestamp, from a watch (kwok removes pods quickly)."""

    def __init__(self, api: ApiClient, namespace: str, server: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.server = namespace, server
        self.deleted: dict[str, tuple[float, Any]] = {}
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        w = watch.Watch()
        async with w.stream(
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=f"inference-operator.dev/server={self.server}",
            timeout_seconds=600,
        ) as stream:
            async for event in stream:
                pod = event["object"]
                if pod.metadata.deletion_timestamp is not None and pod.metadata.name not in self.deleted:
                    self.deleted[pod.metadata.name] = (time.monotonic(), pod)

    def __enter__(self) -> PodDeletions:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def test_a_switch_moves_traffic_before_the_old_pods_are_deleted_and_drains_them(
    operator_factory: Start, servers: Servers, api: ApiClient, namespace: str
) -> None:
    drain = 5
    operator_factory()
    spec = {"model": SMALL, "engine": ENGINE, "rollout": {"strategy": "BlueGreen", "drainSeconds": drain}}
    obj = await ready_server(servers, "drain", spec)
    old = obj["status"]["activeRevision"]
    listed: dict[str, float] = {}
    with TrafficWatch(servers, "drain") as traffic, PodDeletions(api, namespace, "drain") as deletions:
        await traffic.reaches({old}, timeout=30, what="old serving")
        await servers.patch_spec("drain", {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
        done = await servers.wait_status(
            "drain", lambda s: s.get("activeRevision") not in (None, old), "switched", timeout=60
        )
        new = done["status"]["activeRevision"]
        await traffic.reaches({new}, timeout=30, what="new serving")
        listed["new"] = time.monotonic()

        async def old_deleted() -> bool:
            return any(name.startswith(f"drain-vllm-{old}-") for name in deletions.deleted)

        await wait_for(old_deleted, lambda d: d, timeout=60, what="old pods deleted")
    deleted_at, pod = next(v for k, v in deletions.deleted.items() if k.startswith(f"drain-vllm-{old}-"))
    # The new revision's endpoints were ready before the old pods got their deletion timestamp, by the window.
    assert listed["new"] < deleted_at
    assert deleted_at - listed["new"] >= drain - 1.5
    container = pod.spec.containers[0]
    assert container.lifecycle.pre_stop.sleep.seconds == drain
    assert pod.spec.termination_grace_period_seconds >= drain + 60
    traffic.assert_one_backend_at_a_time()

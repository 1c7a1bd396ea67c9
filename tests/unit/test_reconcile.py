"""One reconcile against kmock's emulator: what it writes, what it leaves alone, what status and Events say."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import kmock as km
import pytest

from inference_operator.api import API_VERSION, KIND, InferenceServer
from inference_operator.controller.facts import gpu_facts
from inference_operator.controller.reconcile import Context, reconcile
from inference_operator.planner import Defaults, load_flag_catalog, plan
from inference_operator.render import LABEL_REVISION, LABEL_ROLE, LABEL_SERVER, revision
from localcluster import NodePool
from tests.support.kmock_api import ApiServer, kube_on, store

pytestmark = pytest.mark.kmock(cls=ApiServer)

NS, NAME, UID = "llm", "s", "server-uid"
SERVERS = f"{API_VERSION}/inferenceservers"
DEPLOYMENTS, SERVICES, PODS, NODES, EVENTS = "apps/v1/deployments", "v1/services", "v1/pods", "v1/nodes", "v1/events"
SLICES, CLAIMS = "discovery.k8s.io/v1/endpointslices", "v1/persistentvolumeclaims"
BUDGETS = "policy/v1/poddisruptionbudgets"
WRITES = {"POST", "PUT", "PATCH", "DELETE"}
SPEC: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": {"maxModelLen": 8192}}
H100 = NodePool("h100", count=2, gpus=8)  # GPU feature discovery labels: nvidia.com/gpu.memory=81559
T4 = NodePool("t4", count=1, gpus=8, gpu_product="Tesla-T4", gpu_memory_mib=15360, gpu_family="turing")
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
START = datetime(2026, 1, 1, 12, tzinfo=UTC)


class Clock:
    """The operator's clock: it moves only when a test says so."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Cluster:
    api: ApiServer
    ctx: Context
    clock: Clock
    name: str = NAME
    uid: str = UID

    async def reconcile(self) -> float | None:
        return await reconcile(self.ctx, NS, self.name)

    def writes(self) -> list[km.Request]:
        return [r for r in self.api if r.method in WRITES]

    def obj(self, resource: str, name: str) -> dict[str, Any] | None:
        try:
            found = self.api.objects[resource, NS, name]
        except KeyError:
            return None
        return None if found.deleted else copy.deepcopy(found.raw)

    def must(self, resource: str, name: str) -> dict[str, Any]:
        found = self.obj(resource, name)
        assert found is not None, f"{resource} {name} is absent"
        return found

    def names(self, resource: str) -> set[str]:
        wanted = km.resource(resource)
        return {key[2] for key, o in self.api.objects.items() if key[0] == wanted and not o.deleted}

    def server(self) -> dict[str, Any]:
        return self.must(SERVERS, self.name)

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.server().get("status") or {}
        return status

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.status()["conditions"] if c["type"] == kind)

    def events(self) -> list[tuple[str, str, str]]:
        wanted = km.resource(EVENTS)
        return [
            (o.raw["type"], o.raw["reason"], o.raw["message"])
            for key, o in self.api.objects.items()
            if key[0] == wanted and not o.deleted
        ]

    def selected(self) -> str | None:
        selector: dict[str, str] = self.must(SERVICES, self.name)["spec"]["selector"]
        assert selector[LABEL_SERVER] == self.name
        return selector.get(LABEL_REVISION)

    def revisions(self) -> dict[str, int]:
        """Revision -> replicas of the vLLM Deployments there are."""
        out = {}
        for name in self.names(DEPLOYMENTS):
            dep = self.must(DEPLOYMENTS, name)
            labels = dep["metadata"]["labels"]
            if labels.get(LABEL_SERVER) == self.name and labels.get(LABEL_ROLE) == "vllm":
                out[dep["metadata"]["labels"][LABEL_REVISION]] = int(dep["spec"]["replicas"])
        return out

    def put_server(self, spec: dict[str, Any], generation: int, status: dict[str, Any] | None = None) -> None:
        """The server as a user (spec, generation) or a restore (status) leaves it."""
        meta = {"name": self.name, "namespace": NS, "uid": self.uid, "generation": generation}
        doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}
        if status is not None:
            doc["status"] = status
        store(self.api, SERVERS, NS, self.name, doc)

    def pods_of(self, rev: str, status: dict[str, Any] | None = None, count: int = 1) -> list[str]:
        """Pods of a revision as the kubelet reports them: Running and Ready unless `status` says otherwise."""
        names = []
        for i in range(count):
            name = f"{self.name}-vllm-{rev}-{i}"
            labels = {LABEL_SERVER: self.name, LABEL_ROLE: "vllm", LABEL_REVISION: rev}
            self.pod(name, labels, status or READY)
            names.append(name)
        return names

    def ollama_ready(self) -> str:
        """The Ollama Deployment reports a ready replica, and its pod exists; returns the pod's name."""
        dep = self.must(DEPLOYMENTS, f"{self.name}-ollama")
        store(self.api, DEPLOYMENTS, NS, f"{self.name}-ollama", {**dep, "status": {"readyReplicas": 1}})
        name = f"{self.name}-ollama-0"
        self.pod(name, {LABEL_SERVER: self.name, LABEL_ROLE: "ollama"}, READY)
        return name

    def pod(self, name: str, labels: dict[str, str], status: dict[str, Any]) -> None:
        store(
            self.api,
            PODS,
            NS,
            name,
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": labels}, "status": status},
        )

    def endpoints(self, *pods: str) -> None:
        """The Service's EndpointSlice as the EndpointSlice controller writes it: these pods, ready."""
        endpoints = [{"targetRef": {"kind": "Pod", "name": p}, "conditions": {"ready": True}} for p in pods]
        meta = {"labels": {"kubernetes.io/service-name": self.name}}
        doc = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta, "endpoints": endpoints}
        store(self.api, SLICES, NS, f"{self.name}-abcde", doc)

    def add_nodes(self, pool: NodePool) -> None:
        for node in pool.manifests():
            store(self.api, NODES, None, node["metadata"]["name"], node)

    def another(self, name: str) -> Cluster:
        """The same cluster and operator, looking at another server."""
        return dataclasses.replace(self, name=name, uid=f"{name}-uid")

    def fresh_context(self) -> None:
        """A restarted operator (or one whose node cache expired): it reads the nodes again."""
        self.ctx = Context(kube=self.ctx.kube, catalog=self.ctx.catalog, defaults=Defaults(), clock=self.clock)

    async def serving(self) -> str:
        """Brings the server to a ready revision that serves, and returns it."""
        await self.reconcile()
        (rev,) = self.revisions()
        self.endpoints(*self.pods_of(rev))
        await self.reconcile()
        assert self.selected() == rev
        assert self.condition("Ready")["status"] == "True"
        return rev


@pytest.fixture
async def cluster(kmock: ApiServer) -> AsyncIterator[Cluster]:
    clock = Clock()
    kmock.clock = clock
    async with kube_on(kmock) as kube:
        ctx = Context(kube=kube, catalog=load_flag_catalog(), defaults=Defaults(), clock=clock, instance="test")
        c = Cluster(kmock, ctx, clock)
        c.add_nodes(H100)
        c.put_server(SPEC, generation=1)
        yield c


def planned_revision(spec: dict[str, Any], *pools: NodePool) -> str:
    """The revision the planner and renderer give this spec on these nodes (what reconcile should deploy)."""
    nodes = [n for pool in pools for n in pool.manifests()]
    server = InferenceServer.model_validate({"metadata": {"name": NAME, "namespace": NS}, "spec": spec})
    facts = gpu_facts(nodes, {}, "nvidia.com/gpu")
    return revision(plan(server, load_flag_catalog(), facts, Defaults()))


def changed_spec() -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["engine"]["maxModelLen"] = 4096
    return spec


async def test_a_new_server_gets_its_revision_service_and_budget_in_one_reconcile(cluster: Cluster) -> None:
    requeue = await cluster.reconcile()

    rev = planned_revision(SPEC, H100)
    assert cluster.revisions() == {rev: 1}
    dep = cluster.must(DEPLOYMENTS, f"{NAME}-vllm-{rev}")
    assert [r["uid"] for r in dep["metadata"]["ownerReferences"]] == [UID]
    assert dep["metadata"]["annotations"]["inference-operator.dev/generation"] == "1"
    assert cluster.selected() == rev
    assert cluster.must(SERVICES, NAME)["metadata"]["ownerReferences"][0]["uid"] == UID
    budget = cluster.must(BUDGETS, f"{NAME}-vllm")
    assert budget["spec"]["selector"]["matchLabels"][LABEL_SERVER] == NAME

    status = cluster.status()
    assert status["observedGeneration"] == 1
    inputs = status["plan"]["inputs"]
    assert inputs["generation"] == 1
    assert inputs["facts"]["gpu_memory_gib"] == round(81559 / 1024, 2)
    assert (status["plan"]["gpus"], status["plan"]["tensorParallelSize"]) == (1, 1)
    assert {c["type"] for c in status["conditions"]} == {
        "Ready", "Reconciling", "Stalled", "Degraded", "FallbackActive", "PlanOutdated"
    }  # fmt: skip
    assert (cluster.condition("Reconciling")["status"], cluster.condition("Reconciling")["reason"]) == (
        "True",
        "RolloutInProgress",
    )
    assert cluster.condition("Ready")["status"] == "False"
    rollout = status["rollout"]
    assert (rollout["toRevision"], rollout["result"], rollout["state"]) == (rev, "InProgress", "Deploying")
    assert rollout["startTime"] == "2026-01-01T12:00:00Z"
    assert ("Normal", "RolloutStarted") in {(t, r) for t, r, _ in cluster.events()}
    assert requeue is not None
    assert requeue <= 1800


async def test_a_second_reconcile_with_nothing_changed_writes_nothing(cluster: Cluster) -> None:
    await cluster.reconcile()
    before = len(cluster.writes())
    assert before > 0
    await cluster.reconcile()
    assert cluster.writes()[before:] == []


async def test_a_serving_server_reconciled_again_writes_nothing(cluster: Cluster) -> None:
    await cluster.serving()
    before = len(cluster.writes())
    await cluster.reconcile()
    assert [(str(r.method), r.url.path) for r in cluster.writes()[before:]] == []


async def test_status_written_by_another_version_is_no_invalid_spec_and_the_revision_keeps_serving(
    cluster: Cluster,
) -> None:
    rev = await cluster.serving()
    foreign = {
        "rollout": {"state": "Teleporting", "toRevision": 7, "newField": True},
        "fallbackSince": "yesterday",
        "vllmReadySince": 12,
        "draining": [{"bogus": 1}],
        "conditions": [{"type": "Ready", "status": "Maybe", "reason": 3, "since": "long ago"}],
        "plan": {"inputs": {"generation": "one"}},
        "somethingNew": {"x": 1},
    }
    cluster.put_server(SPEC, generation=1, status=foreign)

    await cluster.reconcile()

    assert cluster.condition("Stalled")["status"] == "False"
    assert cluster.condition("Ready")["reason"] != "InvalidSpec"
    assert (cluster.condition("Ready")["status"], cluster.condition("Ready")["reason"]) == ("True", "Serving")
    assert cluster.selected() == rev
    assert cluster.revisions() == {rev: 1}
    assert cluster.status()["activeRevision"] == rev
    assert "InvalidSpec" not in {r for _, r, _ in cluster.events()}


@pytest.mark.parametrize("conditions", [["junk"], {"Ready": "True"}], ids=["entry-not-an-object", "not-a-list"])
async def test_conditions_of_another_shape_are_ignored(cluster: Cluster, conditions: Any) -> None:
    rev = await cluster.serving()
    cluster.put_server(SPEC, generation=1, status={"conditions": conditions})

    await cluster.reconcile()

    assert (cluster.condition("Ready")["status"], cluster.condition("Ready")["reason"]) == ("True", "Serving")
    assert cluster.selected() == rev


async def test_lost_status_mid_switch_keeps_the_old_revision_serving_and_resumes_the_rollout(
    cluster: Cluster,
) -> None:
    old = await cluster.serving()
    cluster.put_server(changed_spec(), generation=2, status=cluster.status())
    await cluster.reconcile()
    new = planned_revision(changed_spec(), H100)
    assert cluster.revisions() == {old: 1, new: 1}
    started = cluster.status()["rollout"]["startTime"]

    cluster.clock.advance(60)
    cluster.put_server(changed_spec(), generation=2, status={})  # a restore, or a copy to another cluster
    await cluster.reconcile()

    assert cluster.selected() == old
    assert cluster.revisions() == {old: 1, new: 1}
    rollout = cluster.status()["rollout"]
    assert (rollout["fromRevision"], rollout["toRevision"], rollout["result"]) == (old, new, "InProgress")
    assert rollout["startTime"] == started  # the target Deployment's creation: the same deadline
    assert cluster.status()["activeRevision"] == old
    assert cluster.condition("Reconciling")["status"] == "True"

    # The resumed rollout completes: the new revision takes the traffic once ready, the old one drains.
    cluster.endpoints(*cluster.pods_of(old), *cluster.pods_of(new))
    await cluster.reconcile()
    assert cluster.selected() == new
    assert cluster.status()["rollout"]["result"] == "Succeeded"
    assert cluster.revisions() == {old: 1, new: 1}


async def test_a_service_of_the_stable_name_that_the_server_does_not_own_is_never_written(
    cluster: Cluster,
) -> None:
    theirs = {"apiVersion": "v1", "kind": "Service", "metadata": {}, "spec": {"selector": {"app": "other"}}}
    store(cluster.api, SERVICES, NS, NAME, theirs)

    requeue = await cluster.reconcile()

    assert [r for r in cluster.writes() if r.url.path.endswith(f"/services/{NAME}")] == []
    assert cluster.must(SERVICES, NAME)["spec"] == {"selector": {"app": "other"}}
    stalled = cluster.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ChildConflict")
    assert f"Service {NS}/{NAME}" in stalled["message"]
    assert "was not created by this server" in stalled["message"]
    assert ("Warning", "ChildConflict") in {(t, r) for t, r, _ in cluster.events()}
    assert requeue == 30.0


async def test_a_service_of_another_server_is_named_with_its_owner(cluster: Cluster) -> None:
    ref = {"apiVersion": API_VERSION, "kind": KIND, "name": "other", "uid": "other-uid", "controller": True}
    theirs = {"apiVersion": "v1", "kind": "Service", "metadata": {"ownerReferences": [ref]}, "spec": {}}
    store(cluster.api, SERVICES, NS, NAME, theirs)

    await cluster.reconcile()

    assert cluster.must(SERVICES, NAME)["metadata"]["ownerReferences"] == [ref]
    assert "belongs to InferenceServer other" in cluster.condition("Stalled")["message"]


@pytest.mark.parametrize("labelled", [False, True], ids=["unlabelled", "with-the-server-label"])
async def test_a_cache_claim_the_operator_did_not_create_is_mounted_and_never_written(
    cluster: Cluster, labelled: bool
) -> None:
    spec = {**SPEC, "cache": {"size": "100Gi", "retain": False}}
    cluster.put_server(spec, generation=1)
    claim = f"{NAME}-model-cache"
    meta: dict[str, Any] = {"labels": {LABEL_SERVER: NAME}} if labelled else {}
    theirs = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": {"storageClassName": "x"}}
    stored = store(cluster.api, CLAIMS, NS, claim, theirs)

    await cluster.reconcile()
    await cluster.reconcile()

    assert [r for r in cluster.writes() if "/persistentvolumeclaims" in r.url.path] == []
    assert cluster.must(CLAIMS, claim) == stored
    (rev,) = cluster.revisions()
    volumes = cluster.must(DEPLOYMENTS, f"{NAME}-vllm-{rev}")["spec"]["template"]["spec"]["volumes"]
    assert {"claimName": claim} in [v.get("persistentVolumeClaim") for v in volumes]
    assert cluster.condition("Stalled")["status"] == "False"


async def test_a_cache_claim_the_server_creates_is_its_own(cluster: Cluster) -> None:
    cluster.put_server({**SPEC, "cache": {"size": "100Gi", "retain": False}}, generation=1)
    await cluster.reconcile()
    claim = cluster.must(CLAIMS, f"{NAME}-model-cache")
    assert [r["uid"] for r in claim["metadata"]["ownerReferences"]] == [UID]
    before = len(cluster.writes())
    await cluster.reconcile()
    assert cluster.writes()[before:] == []


async def test_the_old_revision_goes_only_after_its_endpoints_and_the_drain_window(cluster: Cluster) -> None:
    old = await cluster.serving()
    cluster.put_server(changed_spec(), generation=2, status=cluster.status())
    await cluster.reconcile()
    new = planned_revision(changed_spec(), H100)
    new_pods = cluster.pods_of(new)

    # The new revision is ready: traffic moves, the old revision keeps running.
    requeue = await cluster.reconcile()
    assert cluster.selected() == new
    assert cluster.revisions() == {old: 1, new: 1}
    assert [d["backend"] for d in cluster.status()["draining"]] == [old]
    assert requeue is not None

    # The EndpointSlice still lists the old pod as ready: it stays, however long that takes.
    cluster.clock.advance(60)
    await cluster.reconcile()
    assert cluster.revisions() == {old: 1, new: 1}

    # Endpoints moved (at 60 s, beyond the 15 s window counted from the switch)...
    cluster.endpoints(*new_pods)
    await cluster.reconcile()
    assert cluster.revisions() == {new: 1}
    assert "draining" not in cluster.status()


async def test_the_drain_window_is_counted_from_the_switch(cluster: Cluster) -> None:
    old = await cluster.serving()
    cluster.put_server(changed_spec(), generation=2, status=cluster.status())
    await cluster.reconcile()
    new = planned_revision(changed_spec(), H100)
    new_pods = cluster.pods_of(new)
    await cluster.reconcile()
    assert cluster.selected() == new
    switched = cluster.clock.now

    cluster.endpoints(*new_pods)  # endpoints follow at once
    cluster.clock.advance(14)
    requeue = await cluster.reconcile()
    assert cluster.revisions() == {old: 1, new: 1}
    assert requeue is not None
    assert requeue <= 1.0  # looks again when the window ends

    cluster.clock.now = switched + timedelta(seconds=15)
    await cluster.reconcile()
    assert cluster.revisions() == {new: 1}
    assert cluster.selected() == new


async def test_a_node_joining_changes_no_deployment_and_says_what_a_replan_would_change(cluster: Cluster) -> None:
    await cluster.reconcile()
    first = cluster.revisions()
    cluster.add_nodes(T4)
    cluster.fresh_context()
    before = len(cluster.writes())

    await cluster.reconcile()

    assert cluster.revisions() == first
    assert [r for r in cluster.writes()[before:] if "/deployments" in r.url.path] == []
    outdated = cluster.condition("PlanOutdated")
    assert (outdated["status"], outdated["reason"]) == ("True", "ReplanAvailable")
    assert "tensorParallelSize 1 -> 2" in outdated["message"]
    assert cluster.status()["plan"]["inputs"]["facts"]["gpu_memory_gib"] == round(81559 / 1024, 2)
    assert ("Normal", "ReplanAvailable") in {(t, r) for t, r, _ in cluster.events()}


async def test_a_spec_change_replans_with_the_cluster_of_today(cluster: Cluster) -> None:
    await cluster.reconcile()
    (first,) = cluster.revisions()
    cluster.add_nodes(T4)
    cluster.fresh_context()
    await cluster.reconcile()

    cluster.put_server(SPEC, generation=2, status=cluster.status())
    await cluster.reconcile()

    replanned = planned_revision(SPEC, H100, T4)
    assert replanned != first
    assert replanned in cluster.revisions()
    inputs = cluster.status()["plan"]["inputs"]
    assert (inputs["generation"], inputs["facts"]["gpu_memory_gib"]) == (2, 15.0)
    assert cluster.status()["plan"]["tensorParallelSize"] == 2
    assert cluster.condition("PlanOutdated")["status"] == "False"
    assert cluster.status()["rollout"]["toRevision"] == replanned


async def test_an_unschedulable_pod_is_the_ready_reason_and_a_warning_event(cluster: Cluster) -> None:
    await cluster.reconcile()
    (rev,) = cluster.revisions()
    message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available."
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    cluster.pods_of(rev, {"phase": "Pending", "conditions": [scheduled]})

    await cluster.reconcile()

    ready = cluster.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Unschedulable")
    assert message in ready["message"]
    warnings = [(r, m) for t, r, m in cluster.events() if t == "Warning"]
    assert [r for r, _ in warnings] == ["Unschedulable"]
    assert message in warnings[0][1]

    await cluster.reconcile()  # the same trouble again: no second Event
    assert len([e for e in cluster.events() if e[0] == "Warning"]) == 1


async def test_a_refusal_writes_back_no_foreign_status_part_of_the_wrong_type(cluster: Cluster) -> None:
    foreign = {
        "replicas": "three",
        "endpoint": 5,
        "rollout": {"state": "Teleporting", "toRevision": 7},
        "fallbackSince": "yesterday",
    }
    cluster.put_server(SPEC, generation=1, status=foreign)
    theirs = {"apiVersion": "v1", "kind": "Service", "metadata": {}, "spec": {"selector": {"app": "other"}}}
    store(cluster.api, SERVICES, NS, NAME, theirs)

    await cluster.reconcile()

    assert cluster.condition("Stalled")["reason"] == "ChildConflict"


async def test_a_lost_drain_timer_starts_again_and_never_ends_the_drain_early(cluster: Cluster) -> None:
    old = await cluster.serving()
    cluster.put_server(changed_spec(), generation=2, status=cluster.status())
    await cluster.reconcile()
    new = planned_revision(changed_spec(), H100)
    cluster.endpoints(*cluster.pods_of(new))
    await cluster.reconcile()
    assert cluster.selected() == new
    assert cluster.revisions() == {old: 1, new: 1}

    cluster.put_server(changed_spec(), generation=2, status={})
    cluster.clock.advance(1)
    await cluster.reconcile()

    assert cluster.revisions() == {old: 1, new: 1}


async def test_an_operator_upgrade_with_a_new_default_image_rolls_nothing(cluster: Cluster) -> None:
    await cluster.serving()
    first = cluster.revisions()
    cluster.ctx = Context(
        kube=cluster.ctx.kube,
        catalog=cluster.ctx.catalog,
        defaults=Defaults(vllm_image="vllm/vllm-openai:v0.99.0"),
        clock=cluster.clock,
    )

    await cluster.reconcile()

    assert cluster.revisions() == first
    outdated = cluster.condition("PlanOutdated")
    assert outdated["status"] == "True"
    assert "vllm/vllm-openai:v0.99.0" in outdated["message"]
    assert cluster.status()["plan"]["inputs"]["image"] == Defaults().vllm_image


async def test_the_replan_annotation_replans_without_a_spec_change(cluster: Cluster) -> None:
    await cluster.reconcile()
    (first,) = cluster.revisions()
    cluster.add_nodes(T4)
    cluster.fresh_context()
    await cluster.reconcile()
    assert cluster.revisions() == {first: 1}

    server = cluster.server()
    server["metadata"]["annotations"] = {"inference-operator.dev/replan": "1"}
    store(cluster.api, SERVERS, NS, NAME, server)
    await cluster.reconcile()

    replanned = planned_revision(SPEC, H100, T4)
    assert replanned in cluster.revisions()
    assert cluster.status()["plan"]["inputs"]["replanToken"] == "1"
    assert cluster.condition("PlanOutdated")["status"] == "False"


async def test_a_server_with_a_fallback_is_idempotent_too(cluster: Cluster) -> None:
    fallback = {"ollama": {"model": "llama3.1:8b", "mode": "Standby"}}
    cluster.put_server({**SPEC, "fallback": fallback}, generation=1)
    await cluster.reconcile()
    assert {f"{NAME}-ollama"} <= cluster.names(DEPLOYMENTS)
    assert cluster.must(SERVICES, f"{NAME}-ollama")["spec"]["selector"][LABEL_ROLE] == "ollama"
    before = len(cluster.writes())

    await cluster.reconcile()

    assert [(str(r.method), r.url.path) for r in cluster.writes()[before:]] == []


async def test_an_invalid_spec_stalls_and_leaves_the_serving_revision_alone(cluster: Cluster) -> None:
    rev = await cluster.serving()
    bad = copy.deepcopy(SPEC)
    bad["replicas"] = -1
    cluster.put_server(bad, generation=2, status=cluster.status())
    before = len(cluster.writes())

    assert await cluster.reconcile() is None

    stalled = cluster.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidSpec")
    assert "replicas" in stalled["message"]
    assert (cluster.condition("Ready")["status"], cluster.condition("Ready")["reason"]) == ("False", "InvalidSpec")
    assert cluster.selected() == rev
    assert cluster.revisions() == {rev: 1}
    assert {r.url.path for r in cluster.writes()[before:]} <= {
        f"/apis/{API_VERSION}/namespaces/{NS}/inferenceservers/{NAME}/status",
        f"/api/v1/namespaces/{NS}/events",
    }


async def test_ollama_on_demand_goes_only_after_traffic_is_back_on_vllm_and_drained(cluster: Cluster) -> None:
    ollama_spec = {"model": "llama3.1:8b", "mode": "OnDemand", "activateAfterSeconds": 30, "recoverAfterSeconds": 60}
    fallback = {"ollama": ollama_spec}
    cluster.put_server({**SPEC, "fallback": fallback}, generation=1)
    rev = await cluster.serving()
    ollama = f"{NAME}-ollama"
    assert cluster.must(DEPLOYMENTS, ollama)["spec"]["replicas"] == 0

    # vLLM loses its ready replica: Ollama starts at once, takes the traffic after activateAfterSeconds.
    unready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    cluster.pods_of(rev, unready)
    cluster.endpoints()
    await cluster.reconcile()
    assert cluster.must(DEPLOYMENTS, ollama)["spec"]["replicas"] == 1
    assert cluster.selected() == rev
    ollama_pod = cluster.ollama_ready()
    cluster.clock.advance(30)
    await cluster.reconcile()
    assert cluster.must(SERVICES, NAME)["spec"]["selector"][LABEL_ROLE] == "ollama"
    assert ("Warning", "FallbackActivated") in {(t, r) for t, r, _ in cluster.events()}
    cluster.endpoints(ollama_pod)

    # vLLM is ready again for recoverAfterSeconds: traffic goes back; Ollama keeps running while it drains.
    vllm_pods = cluster.pods_of(rev)
    await cluster.reconcile()
    cluster.clock.advance(60)
    await cluster.reconcile()
    assert cluster.selected() == rev
    assert cluster.must(DEPLOYMENTS, ollama)["spec"]["replicas"] == 1
    cluster.endpoints(*vllm_pods)
    cluster.clock.advance(14)
    await cluster.reconcile()
    assert cluster.must(DEPLOYMENTS, ollama)["spec"]["replicas"] == 1

    cluster.clock.advance(1)
    await cluster.reconcile()
    assert cluster.must(DEPLOYMENTS, ollama)["spec"]["replicas"] == 0
    assert cluster.selected() == rev


async def test_a_model_switch_waits_while_max_concurrent_rollouts_others_run(cluster: Cluster) -> None:
    cluster.ctx.max_concurrent_rollouts = 1
    first, second = cluster, cluster.another("t")
    second.put_server(SPEC, generation=1)
    await first.serving()
    serving = await second.serving()
    first.put_server(changed_spec(), generation=2, status=first.status())
    await first.reconcile()
    assert len(first.revisions()) == 2

    second.put_server(changed_spec(), generation=2, status=second.status())
    requeue = await second.reconcile()

    assert second.revisions() == {serving: 1}
    assert second.selected() == serving
    for kind in ("Ready", "Reconciling"):
        assert second.condition(kind)["reason"] == "RolloutQueued"
    assert requeue is not None
    assert requeue <= 5.0

    # The first switch completes: the second one starts at its next look.
    new = planned_revision(changed_spec(), H100)
    first.endpoints(*first.pods_of(new))
    await first.reconcile()
    assert first.status()["rollout"]["result"] == "Succeeded"
    await second.reconcile()
    assert len(second.revisions()) == 2
    assert second.status()["rollout"]["result"] == "InProgress"


async def test_an_unschedulable_pod_of_the_serving_revision_is_a_degraded_reason_and_a_warning_event(
    cluster: Cluster,
) -> None:
    rev = await cluster.serving()
    cluster.put_server({**SPEC, "replicas": 2}, generation=2, status=cluster.status())
    await cluster.reconcile()
    assert cluster.revisions() == {rev: 2}
    message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    labels = {LABEL_SERVER: NAME, LABEL_ROLE: "vllm", LABEL_REVISION: rev}
    cluster.pod(f"{NAME}-vllm-{rev}-1", labels, {"phase": "Pending", "conditions": [scheduled]})

    await cluster.reconcile()

    degraded = cluster.condition("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "Unschedulable")
    assert message in degraded["message"]
    assert ("Warning", "Unschedulable") in {(t, r) for t, r, _ in cluster.events()}


async def test_a_crash_looping_new_revision_is_rolled_back_and_not_retried(cluster: Cluster) -> None:
    old = await cluster.serving()
    cluster.put_server(changed_spec(), generation=2, status=cluster.status())
    await cluster.reconcile()
    new = planned_revision(changed_spec(), H100)
    waiting = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}}
    crashing = {"phase": "Running", "containerStatuses": [{"name": "vllm", "restartCount": 4, "state": waiting}]}
    cluster.pods_of(new, crashing)

    await cluster.reconcile()

    assert cluster.selected() == old
    assert cluster.revisions() == {old: 1}
    assert cluster.must(SERVICES, NAME)["metadata"]["annotations"]["inference-operator.dev/rolled-back-revision"] == new
    stalled = cluster.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "RolloutFailed")
    assert "CrashLoopBackOff" in stalled["message"]
    assert ("Warning", "RolloutRolledBack") in {(t, r) for t, r, _ in cluster.events()}

    cluster.put_server(changed_spec(), generation=2, status={})  # even with status lost, it is not retried
    await cluster.reconcile()
    assert cluster.revisions() == {old: 1}
    assert cluster.selected() == old

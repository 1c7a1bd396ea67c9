"""The state read from the cluster, pinned plan inputs, ownership and endpoints (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from inference_operator.api.status import PlanInputs
from inference_operator.controller.observe import ready_endpoints
from inference_operator.controller.ownership import conflict_of, owned
from inference_operator.controller.pinning import describe_change, facts_from_dict, pinned
from inference_operator.controller.rollout import OLLAMA
from inference_operator.controller.state import read_memory
from inference_operator.planner import ClusterFacts, load_flag_catalog, plan
from tests.support.examples import server

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
ROLE, REV = "inference-operator.dev/role", "inference-operator.dev/revision"


def service(selected: str, active: str | None = None, rolled_back: str = "") -> dict[str, Any]:
    selector = {ROLE: "ollama"} if selected == OLLAMA else {ROLE: "vllm", REV: selected}
    annotations = {"inference-operator.dev/rolled-back-revision": rolled_back}
    if active is not None:
        annotations["inference-operator.dev/active-revision"] = active
    return {"metadata": {"name": "s", "annotations": annotations}, "spec": {"selector": selector}}


def deployment(
    rev: str, replicas: int = 1, created: str = "2026-01-01T11:00:00Z", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    marks = {"inference-operator.dev/generation": "2", **(annotations or {})}
    return {
        "metadata": {"labels": {ROLE: "vllm", REV: rev}, "creationTimestamp": created, "annotations": marks},
        "spec": {"replicas": replicas},
    }


def test_lost_status_mid_switch_resumes_the_rollout_with_its_own_start() -> None:
    mem = read_memory({}, service("a", "a"), [deployment("a"), deployment("b")], "b", "BlueGreen", NOW, 2)
    assert (mem.active_revision, mem.backend, mem.serving) == ("a", "vllm", "a")
    assert mem.rollout.in_progress
    assert (mem.rollout.from_revision, mem.rollout.to_revision) == ("a", "b")
    assert mem.rollout.state == "Deploying"
    assert mem.rollout.start_time == datetime(2026, 1, 1, 11, tzinfo=UTC)


def test_a_revision_kept_from_an_earlier_spec_is_not_taken_for_the_rollout_in_progress() -> None:
    stale = deployment("b", annotations={"inference-operator.dev/generation": "1"})
    mem = read_memory({}, service("a", "a"), [deployment("a"), stale], "b", "BlueGreen", NOW, 2)
    assert not mem.rollout.in_progress  # a new rollout starts, with its own deadline


def test_lost_status_mid_bridge_knows_the_old_revision_is_down() -> None:
    mem = read_memory({}, service(OLLAMA, "a"), [deployment("a", replicas=0), deployment("b")], "b", "Auto", NOW, 2)
    assert (mem.active_revision, mem.backend, mem.serving) == ("a", "ollama", OLLAMA)
    assert mem.rollout.state == "Bridging"


def test_the_service_wins_over_a_stale_status() -> None:
    stale = {"activeRevision": "a", "activeBackend": "vllm", "rollout": {"toRevision": "b", "result": "InProgress"}}
    mem = read_memory(stale, service("b", "b"), [deployment("a"), deployment("b")], "b", "BlueGreen", NOW, 2)
    assert mem.active_revision == "b"
    # The switch happened; only its record was lost: it is closed, not reported as a rollback.
    assert mem.rollout.result == "Succeeded"


def test_status_from_another_version_is_read_where_it_can_be_and_ignored_elsewhere() -> None:
    foreign = {
        "rollout": {"state": "Teleporting", "toRevision": 7, "newField": True},
        "fallbackSince": "yesterday",
        "draining": [{"backend": "a", "since": "2026-01-01T11:59:50Z"}, {"bogus": 1}],
        "somethingNew": {"x": 1},
    }
    mem = read_memory(foreign, service("a", "a"), [deployment("a")], "a", "Auto", NOW, 2)
    assert mem.active_revision == "a"
    assert mem.rollout.result is None
    assert mem.fallback_since is None
    assert mem.draining == {"a": datetime(2026, 1, 1, 11, 59, 50, tzinfo=UTC)}


def test_a_rolled_back_revision_is_remembered_by_the_service() -> None:
    mem = read_memory({}, service("a", "a", rolled_back="b"), [deployment("a")], "b", "Recreate", NOW, 2)
    assert (mem.rollout.to_revision, mem.rollout.result) == ("b", "RolledBack")


def test_without_a_service_status_names_the_active_revision_only_if_it_runs() -> None:
    status = {"activeRevision": "a"}
    assert read_memory(status, None, [deployment("a")], "a", "Auto", NOW, 2).active_revision == "a"
    assert read_memory(status, None, [], "a", "Auto", NOW, 2).active_revision is None


def test_endpoints_name_the_backends_of_ready_pods() -> None:
    pods = [
        {"metadata": {"name": "p-a", "labels": {ROLE: "vllm", REV: "a"}}},
        {"metadata": {"name": "p-o", "labels": {ROLE: "ollama"}}},
    ]
    slices = [
        {
            "endpoints": [
                {"targetRef": {"kind": "Pod", "name": "p-a"}, "conditions": {"ready": True}},
                {"targetRef": {"kind": "Pod", "name": "p-o"}, "conditions": {"ready": False}},
                {"targetRef": {"kind": "Pod", "name": "p-new"}, "conditions": {"ready": True}},
            ]
        }
    ]
    assert ready_endpoints(slices, pods) == {"a", "unknown"}


def test_ownership_by_reference_or_by_the_mark_of_a_retained_claim() -> None:
    mine = {"metadata": {"ownerReferences": [{"uid": "u1", "kind": "InferenceServer", "name": "x"}]}}
    claim = {"metadata": {"annotations": {"inference-operator.dev/created-for": "u1"}}}
    theirs = {
        "kind": "Service",
        "metadata": {
            "name": "foo-ollama",
            "namespace": "ns",
            "ownerReferences": [{"uid": "u2", "kind": "InferenceServer", "name": "foo", "controller": True}],
        },
    }
    assert owned(mine, "u1")
    assert owned(claim, "u1")
    assert not owned(theirs, "u1")
    assert not owned({"metadata": {}}, "u1")
    message = conflict_of(theirs).message
    assert "Service ns/foo-ollama" in message
    assert "belongs to InferenceServer foo" in message
    assert "was not created by this server" in conflict_of({"kind": "Service", "metadata": {"name": "x"}}).message


def inputs(generation: int, token: str | None = None) -> PlanInputs:
    return PlanInputs(
        generation=generation, image="vllm/vllm-openai:v0.10.2", ollama_image="ollama/ollama:0.12.6", replan_token=token
    )


def test_pinned_inputs_come_from_status_then_from_the_deployment_of_the_generation() -> None:
    recorded = inputs(3)
    status = {"plan": {"inputs": recorded.model_dump(by_alias=True, exclude_none=True)}}
    annotated = deployment(
        "r3",
        annotations={
            "inference-operator.dev/generation": "3",
            "inference-operator.dev/plan-inputs": json.dumps(recorded.model_dump(by_alias=True, exclude_none=True)),
        },
    )
    assert pinned(status, [annotated], 3, None) == (recorded, "r3")
    assert pinned({}, [annotated], 3, None) == (recorded, "r3")  # status lost
    assert pinned(status, [annotated], 4, None) == (None, None)  # the spec changed
    assert pinned(status, [annotated], 3, "again") == (None, None)  # a re-plan was asked for


def test_facts_recorded_by_another_version_keep_what_this_one_knows() -> None:
    facts = facts_from_dict({"gpu_memory_gib": 15.0, "gpu_memory_source": "x", "future_fact": 1})
    assert facts.gpu_memory_gib == 15.0
    assert facts_from_dict({"gpu_memory_gib": "not a number", "max_gpus_per_node": 8}).max_gpus_per_node == 8


def test_a_replan_says_what_it_would_change() -> None:
    srv = server({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": {"maxModelLen": 8192}})
    catalog = load_flag_catalog()
    on_h100 = plan(srv, catalog, ClusterFacts(gpu_memory_gib=79.6, max_gpus_per_node=8))
    on_t4 = plan(srv, catalog, ClusterFacts(gpu_memory_gib=15.0, max_gpus_per_node=8))
    change = describe_change(on_h100, on_t4)
    assert change is not None
    assert "tensorParallelSize 1 -> " in change
    assert "inference-operator.dev/replan" in change
    assert describe_change(on_h100, on_h100) is None


def test_model_switches_beyond_the_bound_wait_while_first_deployments_do_not() -> None:
    from inference_operator.controller.reconcile import Context, _queued
    from inference_operator.planner import Defaults

    ctx = Context(kube=None, catalog=load_flag_catalog(), defaults=Defaults(), max_concurrent_rollouts=2)  # type: ignore[arg-type]
    ctx.rollouts = {("ns", "one"), ("ns", "two")}
    assert _queued(ctx, ("ns", "three"), active="a", in_progress=False, target="b")
    assert not _queued(ctx, ("ns", "three"), active=None, in_progress=False, target="b")  # first deployment
    assert not _queued(ctx, ("ns", "one"), active="a", in_progress=False, target="b")  # counted already
    assert not _queued(ctx, ("ns", "three"), active="a", in_progress=True, target="b")  # under way already
    ctx.max_concurrent_rollouts = 0
    assert not _queued(ctx, ("ns", "three"), active="a", in_progress=False, target="b")

"""Pure helpers of the controller: health signals, drift comparison, GPU facts, status."""

from datetime import UTC, datetime
from typing import Any

from inference_operator.controller.conditions import (
    build_status,
    decided_conditions,
    phase,
    refused_conditions,
)
from inference_operator.controller.diff import contains
from inference_operator.controller.facts import gpu_facts
from inference_operator.controller.observe import observe, pod_health
from inference_operator.controller.rollout import Decision, Memory, Rollout
from inference_operator.controller.state import read_memory

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def pod(rev: str, *, ready: bool = True, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"inference-operator.dev/role": "vllm", "inference-operator.dev/revision": rev}},
        "status": {
            "phase": "Running" if ready else status.pop("phase", "Running"),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}, *status.pop("conditions", [])],
            **status,
        },
    }


def deployment(rev: str | None, role: str = "vllm", ready: int = 1, replicas: int = 1) -> dict[str, Any]:
    labels = {"inference-operator.dev/role": role}
    if rev:
        labels["inference-operator.dev/revision"] = rev
    return {"metadata": {"labels": labels}, "spec": {"replicas": replicas}, "status": {"readyReplicas": ready}}


def test_crash_loop_oom_and_image_pull_are_failures() -> None:
    crash = pod(
        "a",
        ready=False,
        containerStatuses=[{"name": "vllm", "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
    )
    oom = pod(
        "a",
        ready=False,
        containerStatuses=[{"name": "vllm", "restartCount": 1, "lastState": {"terminated": {"reason": "OOMKilled"}}}],
    )
    pull = pod(
        "a",
        ready=False,
        containerStatuses=[
            {
                "name": "vllm",
                "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}},
            }
        ],
    )
    assert "CrashLoopBackOff" in (pod_health(crash, "nvidia.com/gpu").failure or "")
    assert "OOMKilled" in (pod_health(oom, "nvidia.com/gpu").failure or "")
    assert "ImagePullBackOff: not found" in (pod_health(pull, "nvidia.com/gpu").failure or "")
    assert pod_health(pod("a"), "nvidia.com/gpu").failure is None


def test_unschedulable_for_gpus_is_a_shortage() -> None:
    msg = "0/6 nodes are available: 4 Insufficient nvidia.com/gpu, 2 node(s) didn't match"
    p = pod(
        "a",
        ready=False,
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}],
    )
    health = pod_health(p, "nvidia.com/gpu")
    assert health.unschedulable == msg
    assert health.gpu_shortage
    assert not pod_health(p, "amd.com/gpu").gpu_shortage


def test_observe_groups_pods_by_revision_and_reads_ollama() -> None:
    obs = observe(
        [deployment("a"), deployment("b", ready=0), deployment(None, role="ollama", ready=1)],
        [pod("a"), pod("b", ready=False)],
        "nvidia.com/gpu",
    )
    assert obs.revisions["a"].ready == 1
    assert obs.revisions["b"].ready == 0
    assert obs.ollama_ready


def test_contains_ignores_server_defaults_and_canonical_quantities() -> None:
    desired = {
        "spec": {"template": {"spec": {"containers": [{"name": "v", "resources": {"limits": {"memory": "49152Mi"}}}]}}}
    }
    live: dict[str, Any] = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "v", "imagePullPolicy": "IfNotPresent", "resources": {"limits": {"memory": "48Gi"}}}
                    ]
                }
            }
        }
    }
    assert contains(live, desired)
    live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "47Gi"
    assert not contains(live, desired)


def test_contains_sees_a_selector_that_lost_or_gained_a_key() -> None:
    desired = {"spec": {"selector": {"server": "s", "role": "ollama"}}}
    assert not contains({"spec": {"selector": {"server": "s", "role": "ollama", "revision": "a"}}}, desired)
    assert contains({"spec": {"selector": {"server": "s", "role": "ollama"}}}, desired)


def test_contains_sees_hand_edited_replicas_and_missing_lists() -> None:
    assert not contains({"spec": {"replicas": 3}}, {"spec": {"replicas": 1}})
    assert contains({"spec": {}}, {"spec": {"tolerations": []}})
    assert not contains({"spec": {"args": ["--a"]}}, {"spec": {"args": ["--a", "--b"]}})


def node(name: str, gpus: int, mib: str | None, product: str = "NVIDIA-A100", **labels: str) -> dict[str, Any]:
    all_labels = {"nvidia.com/gpu.product": product, **labels}
    if mib:
        all_labels["nvidia.com/gpu.memory"] = mib
    return {"metadata": {"name": name, "labels": all_labels}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def test_gpu_facts_take_the_smallest_memory_of_eligible_nodes() -> None:
    nodes = [
        node("a", 8, "81559", "NVIDIA-H100-80GB-HBM3", pool="h100"),
        node("b", 4, "40960", pool="a100"),
        node("cpu", 0, None),
    ]
    facts = gpu_facts(nodes, {}, "nvidia.com/gpu")
    assert facts.gpu_memory_gib == 40.0
    assert facts.max_gpus_per_node == 8
    assert "nvidia.com/gpu.memory=40960" in facts.gpu_memory_source
    only_h100 = gpu_facts(nodes, {"pool": "h100"}, "nvidia.com/gpu")
    assert only_h100.gpu_memory_gib == round(81559 / 1024, 2)
    assert gpu_facts([node("cpu", 0, None)], {}, "nvidia.com/gpu").gpu_memory_gib is None


def decision(**kw: Any) -> Decision:
    base: dict[str, Any] = dict(
        deployments={"a": 1},
        backend="vllm",
        revision="a",
        ollama_replicas=0,
        memory=Memory("a", "vllm", Rollout(to_revision="a", result="Succeeded")),
        events=(),
        requeue_after=None,
        serving_ready=True,
    )
    base.update(kw)
    return Decision(**base)


def by_type(conds: list[Any]) -> dict[str, Any]:
    return {c.type: c for c in conds}


def test_serving_desired_revision_is_ready() -> None:
    conds = decided_conditions(decision(), "a", 1, 1)
    c = by_type(conds)
    assert c["Ready"].status
    assert not c["Stalled"].status
    assert not c["Reconciling"].status
    assert phase(conds) == "Ready"


def test_rollout_in_progress_is_reconciling() -> None:
    mem = Memory(
        "a",
        "vllm",
        Rollout(state="Deploying", strategy="BlueGreen", from_revision="a", to_revision="b", result="InProgress"),
    )
    conds = decided_conditions(decision(memory=mem), "b", 1, 1)
    assert by_type(conds)["Reconciling"].status
    assert not by_type(conds)["Ready"].status
    assert phase(conds) == "Deploying"


def test_rolled_back_rollout_stalls_and_degrades() -> None:
    mem = Memory("a", "vllm", Rollout(to_revision="b", result="RolledBack", message="revision b failed: crash"))
    conds = decided_conditions(decision(memory=mem), "b", 1, 1)
    c = by_type(conds)
    assert c["Stalled"].status
    assert "revision b failed: crash" in c["Stalled"].message
    assert c["Degraded"].status
    assert phase(conds) == "Stalled"


def test_fallback_is_degraded_with_fallback_active() -> None:
    conds = decided_conditions(decision(backend="ollama"), "a", 1, 0)
    c = by_type(conds)
    assert c["FallbackActive"].status
    assert c["Degraded"].status
    assert not c["Ready"].status
    assert phase(conds) == "Fallback"


def test_refusal_is_stalled_with_the_message() -> None:
    conds = refused_conditions("spec.resources.gpus: does not fit", "PlanRefused", serving=False)
    c = by_type(conds)
    assert c["Stalled"].status
    assert c["Stalled"].message == "spec.resources.gpus: does not fit"
    assert phase(conds) == "Stalled"


def test_status_keeps_transition_times_while_conditions_hold_and_round_trips_memory() -> None:
    mem = Memory(
        "a",
        "vllm",
        Rollout(state="Idle", to_revision="a", result="Succeeded", start_time=NOW, end_time=NOW),
        fallback_since=NOW,
        serving="a",
    )
    conds = decided_conditions(decision(memory=mem), "a", 1, 1)
    first = build_status(
        previous={}, generation=2, conds=conds, now=NOW, endpoint="e", plan=None, memory=mem, replicas=1, ready=1
    )
    later = datetime(2026, 1, 1, 13, tzinfo=UTC)
    second = build_status(
        previous=first, generation=2, conds=conds, now=later, endpoint="e", plan=None, memory=mem, replicas=1, ready=1
    )
    assert second == first
    service = {
        "metadata": {"name": "s", "annotations": {"inference-operator.dev/active-revision": "a"}},
        "spec": {"selector": {"inference-operator.dev/role": "vllm", "inference-operator.dev/revision": "a"}},
    }
    deployment = {
        "metadata": {"labels": {"inference-operator.dev/role": "vllm", "inference-operator.dev/revision": "a"}}
    }
    assert read_memory(second, service, [deployment], "a", "Auto", NOW, 2) == mem


def test_gpu_facts_read_the_compute_capability_and_fill_in_from_the_product() -> None:
    nodes = [
        node(
            "a100",
            8,
            "81920",
            "NVIDIA-A100-SXM4-80GB",
            **{"nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0"},
        ),
        # Only a product label: memory and compute capability come from the GPU catalog.
        node("t4", 1, None, "Tesla-T4"),
    ]
    facts = gpu_facts(nodes, {}, "nvidia.com/gpu")
    assert facts.gpu_memory_gib == 15.0
    assert "GPU catalog (Tesla-T4)" in facts.gpu_memory_source
    assert str(facts.compute_capability) == "7.5"
    assert "Tesla-T4" in facts.compute_capability_source
    assert facts.gpu_product == "Tesla-T4"
    only_a100 = gpu_facts(nodes[:1], {}, "nvidia.com/gpu")
    assert str(only_a100.compute_capability) == "8.0"
    assert "nvidia.com/gpu.compute.major" in only_a100.compute_capability_source
    unknown = gpu_facts([node("x", 2, None, "Some-Future-GPU")], {}, "nvidia.com/gpu")
    assert (unknown.gpu_memory_gib, unknown.compute_capability, unknown.max_gpus_per_node) == (None, None, 2)

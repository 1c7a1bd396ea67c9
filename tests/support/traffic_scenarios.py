"""Model switches, rollbacks and failovers driven on a real node while clients keep sending requests.

The data-plane tests and bench/traffic_bench.py run the same scenarios; each returns the traffic report and the
times that matter (when the change was applied, when the new model first answered).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from localcluster.realnode import REAL_NODE_LABEL
from tests.support.operator import OperatorProcess, Servers
from tests.support.traffic import Traffic, TrafficReport, check_local
from tests.support.wait import wait_for

SERVED = "chat"
IMAGE = "vllm/vllm-openai:v0.33.0"
MODEL_A = "meta-llama/Llama-3.2-1B-Instruct"
MODEL_B = "Qwen/Qwen2.5-0.5B-Instruct"
# Models whose attention heads split over 8 GPUs, for the scenario where one replica holds every GPU.
BIG_MODEL_A = "meta-llama/Llama-3.3-70B-Instruct"
BIG_MODEL_B = "Qwen/Qwen2.5-72B-Instruct"
OLLAMA_MODEL = "llama3.2:1b"
# What the Ollama stand-in names as the model behind the served id (the pulled model, with its tag).
OLLAMA_BACKEND = "llama3.2:1b"
LABEL_REVISION = "inference-operator.dev/revision"
ON_REAL_NODE = {
    "nodeSelector": {REAL_NODE_LABEL: "true"},
    "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}


@dataclass(frozen=True)
class Load:
    """How much traffic a scenario sends: at least `min_requests`, from `clients` concurrent clients."""

    clients: int = 8
    min_requests: int = 2000
    max_seconds: float = 300.0


@dataclass
class ScenarioResult:
    name: str
    report: TrafficReport
    applied_at: float = 0.0
    first_new_answer_at: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def apply_to_first_answer(self) -> float | None:
        if self.first_new_answer_at is None:
            return None
        return self.first_new_answer_at - self.applied_at

    def line(self) -> str:
        r = self.report
        first = self.apply_to_first_answer()
        first_text = f"{first:.1f} s" if first is not None else "n/a"
        return (
            f"{self.name}: sent {r.sent}, failed {len(r.failures)}, longest gap {r.longest_gap():.2f} s, "
            f"apply to first answer {first_text}"
        )


def server_spec(
    model: str,
    *,
    gpus: int = 1,
    strategy: str = "BlueGreen",
    engine: dict[str, Any] | None = None,
    fallback: dict[str, Any] | None = None,
    timeout_seconds: int = 60,
    drain_seconds: int = 5,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": model, "servedName": SERVED},
        "engine": {"image": IMAGE, **(engine or {})},
        # Real pods on a 2-core machine: tiny requests, and a small /dev/shm.
        "resources": {"gpus": gpus, "cpu": "10m", "memory": "64Mi", "sharedMemory": "16Mi"},
        "scheduling": ON_REAL_NODE,
        # A short drain keeps the tier quick; it still covers kube-proxy's lag on one node.
        "rollout": {"strategy": strategy, "timeoutSeconds": timeout_seconds, "drainSeconds": drain_seconds},
    }
    if gpus > 1:
        spec["engine"]["tensorParallelSize"] = gpus
    if fallback is not None:
        spec["fallback"] = {"ollama": fallback}
    return spec


def switched_from(old: str) -> Callable[[dict[str, Any]], bool]:
    """A status predicate: another revision is active and its rollout succeeded."""

    def check(status: dict[str, Any]) -> bool:
        rollout = status.get("rollout") or {}
        return status.get("activeRevision") not in (None, old) and rollout.get("result") == "Succeeded"

    return check


async def service_address(servers: Servers, name: str) -> tuple[str, int]:
    svc = await servers.core.read_namespaced_service(name, servers.namespace)
    return str(svc.spec.cluster_ip), int(svc.spec.ports[0].port)


async def revision_pods(servers: Servers, name: str, revision: str) -> list[Any]:
    pods = await servers.core.list_namespaced_pod(
        servers.namespace, label_selector=f"inference-operator.dev/server={name},{LABEL_REVISION}={revision}"
    )
    return list(pods.items)


async def set_faults(servers: Servers, name: str, revision: str, faults: dict[str, Any]) -> int:
    """Switch the stand-in's faults in every pod of a revision, through its pod address."""
    pods = await revision_pods(servers, name, revision)
    body = json.dumps(faults).encode()

    def post(ip: str) -> None:
        check_local(ip)
        req = urllib.request.Request(f"http://{ip}:8000/standin/faults", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()

    for pod in pods:
        await asyncio.to_thread(post, pod.status.pod_ip)
    return len(pods)


async def _ready(servers: Servers, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    await servers.create(name, spec)
    return await servers.wait_condition(name, "Ready", "True", timeout=180)


async def _until_enough(traffic: Traffic, load: Load) -> None:
    remaining = load.min_requests - traffic.report.sent
    if remaining > 0:
        await traffic.wait_for_answers(remaining, timeout=load.max_seconds)


async def _gone(servers: Servers, name: str, revision: str, timeout: float = 120) -> None:
    await wait_for(
        lambda: revision_pods(servers, name, revision),
        lambda pods: not pods,
        timeout=timeout,
        what=f"pods of revision {revision} gone",
    )


async def _first_answer_from(traffic: Traffic, backend: str, after: float, timeout: float) -> float:
    async def first() -> float | None:
        return traffic.report.first_answer_after(after, backend)

    found = await wait_for(first, lambda t: t is not None, timeout=timeout, what=f"an answer from {backend}")
    assert found is not None
    return found


async def steady(servers: Servers, load: Load) -> ScenarioResult:
    """One server, nothing changing: the baseline of the other scenarios."""
    name = "steady"
    applied = time.monotonic()
    await _ready(servers, name, server_spec(MODEL_A))
    host, port = await service_address(servers, name)
    async with Traffic(host, port, SERVED, clients=load.clients, max_seconds=load.max_seconds) as traffic:
        first = await _first_answer_from(traffic, MODEL_A, applied, timeout=60)
        await _until_enough(traffic, load)
    return ScenarioResult("steady", traffic.report, applied, first)


async def bluegreen_switch(servers: Servers, load: Load) -> ScenarioResult:
    name = "switch"
    obj = await _ready(servers, name, server_spec(MODEL_A))
    old = obj["status"]["activeRevision"]
    host, port = await service_address(servers, name)
    async with Traffic(host, port, SERVED, clients=load.clients, max_seconds=load.max_seconds) as traffic:
        await traffic.wait_for_answers(50, timeout=60)
        applied = time.monotonic()
        await servers.patch_spec(name, {"model": {"name": MODEL_B}})
        await servers.wait_status(
            name,
            switched_from(old),
            "switch succeeded",
            timeout=180,
        )
        first = await _first_answer_from(traffic, MODEL_B, applied, timeout=60)
        await _gone(servers, name, old)
        await traffic.wait_for_answers(50, timeout=60)
        await _until_enough(traffic, load)
    return ScenarioResult("bluegreen-switch", traffic.report, applied, first)


async def auto_bridge(servers: Servers, load: Load, gpus: int) -> ScenarioResult:
    """Every GPU of the node is held by the old revision: Auto bridges through Ollama while it is replaced."""
    name = "bridge"
    fallback = {"model": OLLAMA_MODEL, "mode": "Standby", "activateAfterSeconds": 0, "recoverAfterSeconds": 0}
    # The new revision waits for the GPUs until the old one has drained and stopped: a longer deadline.
    spec = server_spec(BIG_MODEL_A, gpus=gpus, strategy="Auto", fallback=fallback, timeout_seconds=180)
    obj = await _ready(servers, name, spec)
    old = obj["status"]["activeRevision"]
    host, port = await service_address(servers, name)
    async with Traffic(host, port, SERVED, clients=load.clients, max_seconds=load.max_seconds) as traffic:
        await traffic.wait_for_answers(50, timeout=60)
        applied = time.monotonic()
        await servers.patch_spec(name, {"model": {"name": BIG_MODEL_B}})
        await servers.wait_status(name, switched_from(old), "bridged switch succeeded", timeout=240)
        first = await _first_answer_from(traffic, BIG_MODEL_B, applied, timeout=60)
        await traffic.wait_for_answers(50, timeout=60)
        await _until_enough(traffic, load)
    return ScenarioResult("auto-bridge", traffic.report, applied, first)


async def rollback(servers: Servers, load: Load, bad: dict[str, Any], scenario: str) -> ScenarioResult:
    """A revision that fails (`bad` is merged into the spec) is rolled back while the old one keeps serving."""
    name = "rollback"
    obj = await _ready(servers, name, server_spec(MODEL_A, engine={"version": "0.33.0"}, timeout_seconds=30))
    old = obj["status"]["activeRevision"]
    host, port = await service_address(servers, name)
    async with Traffic(host, port, SERVED, clients=load.clients, max_seconds=load.max_seconds) as traffic:
        await traffic.wait_for_answers(50, timeout=60)
        applied = time.monotonic()
        await servers.patch_spec(name, bad)
        rolled = await servers.wait_status(
            name, lambda s: (s.get("rollout") or {}).get("result") == "RolledBack", "rolled back", timeout=180
        )
        await wait_for(
            lambda: servers.deployments(name), lambda d: len(d) == 1, timeout=60, what="bad revision removed"
        )
        await _until_enough(traffic, load)
    result = ScenarioResult(scenario, traffic.report, applied, None)
    result.notes["active_revision_after"] = rolled["status"]["activeRevision"]
    result.notes["old_revision"] = old
    return result


# A flag vLLM 0.33 has and 0.6.0 does not, passed to a mirror's stale image: its tag says v0.33.0 but it holds
# vLLM 0.6.0 (hack/build_images.py). The operator plans by the tag and cannot know; the engine refuses to start.
REJECTED_COMMAND_LINE = {
    "model": {"name": MODEL_B},
    "engine": {"image": "registry.example/vllm/vllm-openai:v0.33.0", "extraArgs": ["--async-scheduling"]},
}
NEVER_READY = {"model": {"name": MODEL_B}, "engine": {"env": [{"name": "STANDIN_UNHEALTHY", "value": "true"}]}}


def _vllm_serving(status: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return status.get("activeBackend") == "vllm" and conditions.get("FallbackActive") == "False"


async def failover(servers: Servers, load: Load, activate: int = 5, recover: int = 5) -> ScenarioResult:
    """vLLM stops answering (requests and probes hang): traffic moves to Ollama, and back once vLLM answers again."""
    name = "failover"
    fallback = {"model": OLLAMA_MODEL, "activateAfterSeconds": activate, "recoverAfterSeconds": recover}
    obj = await _ready(servers, name, server_spec(MODEL_A, fallback=fallback))
    rev = obj["status"]["activeRevision"]
    # vLLM's first start can take longer than activateAfterSeconds (its startup probe runs every 10 s), so Ollama
    # may serve first: begin once vLLM does.
    await servers.wait_status(name, _vllm_serving, "vLLM serving, fallback inactive", timeout=120)
    host, port = await service_address(servers, name)
    async with Traffic(host, port, SERVED, clients=load.clients, max_seconds=load.max_seconds, timeout=5) as traffic:
        await traffic.wait_for_answers(50, timeout=60)
        applied = time.monotonic()
        assert await set_faults(servers, name, rev, {"hang": True}) == 1
        await servers.wait_condition(name, "FallbackActive", "True", timeout=120)
        on_ollama = await _first_answer_from(traffic, OLLAMA_BACKEND, applied, timeout=60)
        await traffic.wait_for_answers(50, timeout=60)
        cleared = time.monotonic()
        assert await set_faults(servers, name, rev, {"hang": False}) == 1
        await servers.wait_condition(name, "FallbackActive", "False", timeout=120)
        back = await _first_answer_from(traffic, MODEL_A, cleared, timeout=60)
        await traffic.wait_for_answers(50, timeout=60)
        await _until_enough(traffic, load)
    result = ScenarioResult("failover", traffic.report, applied, on_ollama)
    result.notes.update(hang_at=applied, on_ollama_at=on_ollama, cleared_at=cleared, back_at=back)
    return result


async def operator_killed_mid_switch(
    servers: Servers, load: Load, start_operator: Callable[[], OperatorProcess], operator: OperatorProcess
) -> ScenarioResult:
    """The operator is SIGKILLed while the new revision starts; a new operator process finishes the switch."""
    name = "killed"
    obj = await _ready(servers, name, server_spec(MODEL_A))
    old = obj["status"]["activeRevision"]
    host, port = await service_address(servers, name)
    slow_start = {"env": [{"name": "STANDIN_STARTUP_SECONDS", "value": "8"}]}
    async with Traffic(host, port, SERVED, clients=load.clients, max_seconds=load.max_seconds) as traffic:
        await traffic.wait_for_answers(50, timeout=60)
        applied = time.monotonic()
        await servers.patch_spec(name, {"model": {"name": MODEL_B}, "engine": slow_start})
        await servers.wait_status(
            name,
            lambda s: (s.get("rollout") or {}).get("state") == "Deploying" and s["rollout"].get("toRevision") != old,
            "rollout in progress",
            timeout=60,
        )
        operator.kill()
        start_operator()
        await servers.wait_status(
            name,
            switched_from(old),
            "switch finished by the new operator",
            timeout=180,
        )
        first = await _first_answer_from(traffic, MODEL_B, applied, timeout=60)
        await _gone(servers, name, old)
        await _until_enough(traffic, load)
    return ScenarioResult("operator-killed-mid-switch", traffic.report, applied, first)


Scenario = Callable[[Servers, Load], Awaitable[ScenarioResult]]

"""Status of an InferenceServer from a decision or a refusal (pure, kstatus-compatible).

Ready, Reconciling, Stalled, Degraded and FallbackActive are always present, so that kubectl, Argo CD
and Flux see the same picture. A condition keeps its lastTransitionTime while its status holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api.status import DrainStatus, PlanStatus, RolloutStatus, format_time, read_status_part
from ..api.types import ApiModel
from ..planner import LaunchPlan
from .rollout import Decision, Memory
from .state import parse_time as read_time

CONDITION_TYPES = ("Ready", "Reconciling", "Stalled", "Degraded", "FallbackActive", "PlanOutdated")
# Reasons Kubernetes gives for pods that cannot serve; each becomes a condition reason and a Warning Event.
TROUBLE_REASONS = (
    "Unschedulable",
    "CrashLoopBackOff",
    "OOMKilled",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
)


@dataclass(frozen=True)
class Cond:
    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Trouble:
    """Why pods of a revision cannot serve, in Kubernetes' own word and with its message."""

    reason: str
    message: str


def iso(t: datetime | None) -> str | None:
    return None if t is None else format_time(t)


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def outdated_condition(change: str | None) -> Cond:
    if change is None:
        return Cond("PlanOutdated", False, "AsExpected", "")
    return Cond("PlanOutdated", True, "ReplanAvailable", change)


def merge_conditions(
    previous: list[dict[str, Any]], new: list[Cond], generation: int, now: datetime
) -> list[dict[str, Any]]:
    entries = previous if isinstance(previous, list) else []  # status is a cache: another shape is ignored
    old = {c.get("type"): c for c in entries if isinstance(c, dict)}
    out = []
    for c in new:
        status = "True" if c.status else "False"
        before = old.get(c.type)
        changed = before is None or before.get("status") != status
        out.append(
            {
                "type": c.type,
                "status": status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": iso(now) if changed else before.get("lastTransitionTime"),  # type: ignore[union-attr]
                "observedGeneration": generation,
            }
        )
    return out


def refused_conditions(field_message: str, reason: str, serving: bool) -> list[Cond]:
    """The spec cannot be served (or a child cannot be written): nothing changes until the user acts."""
    return [
        Cond("Ready", False, reason, field_message),
        Cond("Reconciling", False, reason, "waiting for the spec to change"),
        Cond("Stalled", True, reason, field_message),
        Cond(
            "Degraded",
            serving,
            reason if serving else "AsExpected",
            "the previous revision keeps serving" if serving else "",
        ),
        Cond("FallbackActive", False, "AsExpected", ""),
        outdated_condition(None),
    ]


def decided_conditions(
    decision: Decision,
    desired_revision: str,
    replicas: int,
    ready: int,
    trouble: Trouble | None = None,
    outdated: str | None = None,
) -> list[Cond]:
    mem = decision.memory
    rollout = mem.rollout
    on_ollama = decision.backend == "ollama"
    serving_desired = not on_ollama and mem.active_revision == desired_revision and decision.serving_ready
    failed = rollout.to_revision == desired_revision and rollout.result in ("RolledBack", "Failed")
    failed = failed and mem.active_revision != desired_revision

    if failed:
        stalled = Cond("Stalled", True, "RolloutFailed", f"{rollout.message}; change the spec to try again")
    else:
        stalled = Cond("Stalled", False, "AsExpected", "")

    if rollout.in_progress:
        progress = f"rolling out revision {rollout.to_revision} ({rollout.state}, {rollout.strategy})"
        if trouble is not None:
            reconciling = Cond("Reconciling", True, trouble.reason, f"{progress}: {trouble.message}")
        else:
            reconciling = Cond("Reconciling", True, "RolloutInProgress", progress)
    elif rollout.state == "RollingBack":
        reconciling = Cond("Reconciling", True, "RollingBack", f"restoring revision {mem.active_revision}")
    else:
        reconciling = Cond("Reconciling", False, "AsExpected", "")

    if on_ollama:
        why = "bridging a model switch" if rollout.in_progress else "no ready vLLM replica"
        fallback = Cond("FallbackActive", True, "OllamaServing", f"traffic is served by the Ollama fallback: {why}")
    else:
        fallback = Cond("FallbackActive", False, "AsExpected", "")

    if on_ollama and not rollout.in_progress:
        degraded = Cond("Degraded", True, "FallbackActive", "vLLM has no ready replica; Ollama serves")
    elif failed:
        degraded = Cond("Degraded", True, "RolledBack", f"serving revision {mem.active_revision}: {rollout.message}")
    elif mem.active_revision is not None and ready < replicas and not rollout.in_progress:
        why = f"{ready} of {replicas} vLLM replicas ready"
        if trouble is not None:
            degraded = Cond("Degraded", True, trouble.reason, f"{why}: {trouble.message}")
        else:
            degraded = Cond("Degraded", True, "ReplicasNotReady", why)
    else:
        degraded = Cond("Degraded", False, "AsExpected", "")

    if serving_desired:
        ready_cond = Cond("Ready", True, "Serving", f"vLLM revision {mem.active_revision} serves {ready}/{replicas}")
    elif rollout.in_progress:
        ready_cond = Cond("Ready", False, reconciling.reason, reconciling.message)
    elif failed:
        ready_cond = Cond("Ready", False, "RolloutFailed", stalled.message)
    elif on_ollama:
        ready_cond = Cond("Ready", False, "FallbackActive", fallback.message)
    elif trouble is not None:
        ready_cond = Cond("Ready", False, trouble.reason, trouble.message)
    else:
        ready_cond = Cond("Ready", False, "NotReady", "no ready vLLM replica")
    return [ready_cond, reconciling, stalled, degraded, fallback, outdated_condition(outdated)]


def phase(conds: list[Cond]) -> str:
    by = {c.type: c for c in conds}
    if by["Stalled"].status:
        return "Stalled"
    if by["FallbackActive"].status:
        return "Fallback"
    if by["Reconciling"].status:
        return "Deploying"
    if by["Degraded"].status:
        return "Degraded"
    if by["Ready"].status:
        return "Ready"
    return "Pending"


def kept_status(previous: dict[str, Any]) -> dict[str, Any]:
    """The parts of a previous status this operator can read, in its own form; the rest is dropped.

    A refusal keeps what status said (the serving revision, the last rollout) without writing back a part
    another version wrote in a shape the API server would refuse.
    """

    def dumped(model: type[ApiModel], value: Any) -> Any:
        part = read_status_part(model, value)
        return None if part is None else part.model_dump(by_alias=True, exclude_none=True, mode="json")

    def text(value: Any) -> str | None:
        return value if isinstance(value, str) and value else None

    def count(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    draining = previous.get("draining")
    kept = {
        "endpoint": text(previous.get("endpoint")),
        "replicas": count(previous.get("replicas")),
        "readyReplicas": count(previous.get("readyReplicas")),
        "activeRevision": text(previous.get("activeRevision")),
        "activeBackend": previous.get("activeBackend") if previous.get("activeBackend") in ("vllm", "ollama") else None,
        "rollout": dumped(RolloutStatus, previous.get("rollout")),
        "plan": dumped(PlanStatus, previous.get("plan")),
        "fallbackSince": iso(read_time(previous.get("fallbackSince"))),
        "vllmReadySince": iso(read_time(previous.get("vllmReadySince"))),
        "draining": [d for d in (dumped(DrainStatus, x) for x in draining) if d]
        if isinstance(draining, list)
        else None,
    }
    return {k: v for k, v in kept.items() if v not in (None, [])}


def build_status(
    *,
    previous: dict[str, Any],
    generation: int,
    conds: list[Cond],
    now: datetime,
    endpoint: str | None,
    plan: LaunchPlan | None,
    memory: Memory | None,
    plan_inputs: dict[str, Any] | None = None,
    replicas: int | None,
    ready: int | None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": merge_conditions(previous.get("conditions") or [], conds, generation, now),
        "phase": phase(conds),
        "endpoint": endpoint,
        "replicas": replicas,
        "readyReplicas": ready,
    }
    if plan is not None:
        status["plan"] = plan.status().model_dump(by_alias=True, exclude_none=True)
        if plan_inputs is not None:
            status["plan"]["inputs"] = plan_inputs
    elif kept_status(previous).get("plan") is not None:
        status["plan"] = kept_status(previous)["plan"]
    source = memory
    if source is None:
        kept = kept_status(previous)
        for key in ("activeRevision", "activeBackend", "rollout", "fallbackSince", "vllmReadySince", "draining"):
            if kept.get(key) is not None:
                status[key] = kept[key]
    else:
        status["activeRevision"] = source.active_revision
        status["activeBackend"] = source.backend
        if source.rollout.to_revision is not None:
            status["rollout"] = source.rollout.model_dump(by_alias=True, exclude_none=True, mode="json")
        status["fallbackSince"] = iso(source.fallback_since)
        status["vllmReadySince"] = iso(source.vllm_ready_since)
        if source.draining:
            status["draining"] = [
                {"backend": k, "since": iso(v)} for k, v in sorted(source.draining.items(), key=lambda kv: kv[0])
            ]
    return {k: v for k, v in status.items() if v is not None}

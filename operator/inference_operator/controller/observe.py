"""Reads Kubernetes' own health signals from child objects (pure: dicts in, observations out)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ..render import LABEL_REVISION, LABEL_ROLE, ROLE_OLLAMA, ROLE_VLLM
from .rollout import OLLAMA, Observed, RevisionObservation

CRASH_RESTARTS = 3
FATAL_WAITING = {
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
}


@dataclass(frozen=True)
class PodHealth:
    ready: bool
    failure: str | None
    unschedulable: str | None
    gpu_shortage: bool
    failure_reason: str | None = None


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def pod_health(pod: dict[str, Any], gpu_resource: str) -> PodHealth:
    status = pod.get("status") or {}
    ready_cond = _condition(pod, "Ready")
    ready = status.get("phase") == "Running" and ready_cond is not None and ready_cond.get("status") == "True"
    failure = None
    reason = None
    for cs in status.get("containerStatuses") or []:
        name = cs.get("name", "?")
        waiting = (cs.get("state") or {}).get("waiting") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        restarts = int(cs.get("restartCount") or 0)
        if last.get("reason") == "OOMKilled" and restarts >= 1:
            reason = "OOMKilled"
            failure = f"container {name} was OOMKilled ({restarts} restarts): raise spec.resources.memory"
        elif waiting.get("reason") in FATAL_WAITING:
            reason = "ImagePullBackOff" if waiting["reason"] == "ErrImagePull" else waiting["reason"]
            detail = waiting.get("message") or ""
            failure = f"container {name}: {waiting['reason']}" + (f": {detail}" if detail else "")
        elif restarts >= CRASH_RESTARTS and not cs.get("ready"):
            reason = "CrashLoopBackOff"
            failure = f"container {name} restarted {restarts} times"
        if failure:
            break
    unschedulable = None
    shortage = False
    scheduled = _condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        unschedulable = scheduled.get("message") or "no node fits the pod"
        shortage = f"Insufficient {gpu_resource}" in unschedulable
    return PodHealth(
        ready=ready, failure=failure, unschedulable=unschedulable, gpu_shortage=shortage, failure_reason=reason
    )


def ready_endpoints(slices: list[dict[str, Any]], pods: list[dict[str, Any]]) -> frozenset[str]:
    """The backends (a revision, or OLLAMA) whose pods the Service's EndpointSlices list as ready."""
    backend_of: dict[str, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LABEL_ROLE) == ROLE_OLLAMA:
            backend_of[meta.get("name", "")] = OLLAMA
        elif labels.get(LABEL_ROLE) == ROLE_VLLM and labels.get(LABEL_REVISION):
            backend_of[meta.get("name", "")] = labels[LABEL_REVISION]
    out = set()
    for sl in slices:
        for ep in sl.get("endpoints") or []:
            ref = ep.get("targetRef") or {}
            if (ep.get("conditions") or {}).get("ready") is False or ref.get("kind") != "Pod":
                continue
            backend = backend_of.get(ref.get("name", ""))
            if backend is None:
                # A pod this list does not know yet (just created): count it as some backend, never as none.
                backend = "unknown"
            out.add(backend)
    return frozenset(out)


def observe(
    deployments: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    gpu_resource: str,
    slices: list[dict[str, Any]] | None = None,
) -> Observed:
    """Per vLLM revision: replicas, ready pods and the worst signal of its pods; Ollama; the Service's endpoints."""
    by_revision: dict[str, list[PodHealth]] = defaultdict(list)
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_ROLE) != ROLE_VLLM or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        by_revision[labels.get(LABEL_REVISION, "")].append(pod_health(pod, gpu_resource))
    revisions: dict[str, RevisionObservation] = {}
    ollama_ready = False
    ollama_replicas = 0
    for dep in deployments:
        labels = dep["metadata"].get("labels") or {}
        status = dep.get("status") or {}
        if labels.get(LABEL_ROLE) == ROLE_OLLAMA:
            ollama_ready = int(status.get("readyReplicas") or 0) >= 1
            ollama_replicas = int((dep.get("spec") or {}).get("replicas") or 0)
            continue
        rev = labels.get(LABEL_REVISION)
        if not rev:
            continue
        health = by_revision.get(rev, [])
        revisions[rev] = RevisionObservation(
            replicas=int((dep.get("spec") or {}).get("replicas") or 0),
            ready=sum(1 for h in health if h.ready),
            failure=next((h.failure for h in health if h.failure), None),
            failure_reason=next((h.failure_reason for h in health if h.failure), None),
            unschedulable=next((h.unschedulable for h in health if h.unschedulable), None),
            gpu_shortage=any(h.gpu_shortage for h in health),
        )
    return Observed(
        revisions=revisions,
        ollama_ready=ollama_ready,
        ollama_replicas=ollama_replicas,
        endpoints=ready_endpoints(slices or [], pods),
    )

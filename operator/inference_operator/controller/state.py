"""The state machine's memory, read from the cluster first and from status second (pure).

What serves is what the stable Service selects: its selector names the backend (a vLLM revision or the
Ollama fallback) and its annotation names the active vLLM revision. Revisions are Deployments labelled with
their hash. Status only adds what the cluster cannot show: the rollout record and the timers. A status that
is lost, stale or written by another version of the operator therefore never moves traffic or deletes the
serving revision: the worst it costs is a timer started again.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..api.status import DrainStatus, RolloutStatus, read_status_part
from ..render import (
    ANNOTATION_ACTIVE_REVISION,
    ANNOTATION_GENERATION,
    ANNOTATION_ROLLED_BACK,
    ANNOTATION_ROLLOUT_START,
    LABEL_REVISION,
    LABEL_ROLE,
    ROLE_OLLAMA,
    ROLE_VLLM,
)
from .rollout import OLLAMA, Memory


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _draining(value: Any) -> dict[str, datetime]:
    out: dict[str, datetime] = {}
    for item in value if isinstance(value, list) else []:
        entry = read_status_part(DrainStatus, item)
        if entry is not None:
            out[entry.backend] = entry.since
    return out


def _revision_deployments(deployments: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for dep in deployments:
        labels = dep["metadata"].get("labels") or {}
        if labels.get(LABEL_ROLE) == ROLE_VLLM and labels.get(LABEL_REVISION):
            out[labels[LABEL_REVISION]] = dep
    return out


def _rollout_start(dep: dict[str, Any]) -> datetime | None:
    """When the rollout to this revision started; a Deployment kept from an earlier rollout is older than that."""
    meta = dep["metadata"]
    return parse_time((meta.get("annotations") or {}).get(ANNOTATION_ROLLOUT_START)) or parse_time(
        meta.get("creationTimestamp")
    )


def read_memory(
    status: Mapping[str, Any],
    service: dict[str, Any] | None,
    deployments: list[dict[str, Any]],
    desired_revision: str,
    strategy: str,
    now: datetime,
    generation: int,
) -> Memory:
    """`service` is the stable Service when it exists and this server owns it; `deployments` are its own.

    A rollout whose record is lost is rebuilt only from a target Deployment applied for this very spec
    generation: one kept from an earlier rollout (draining, say) is not mistaken for the current one.
    """
    revisions = _revision_deployments(deployments)
    rollout = read_status_part(RolloutStatus, status.get("rollout"))
    timers: dict[str, Any] = {
        "fallback_since": parse_time(status.get("fallbackSince")),
        "vllm_ready_since": parse_time(status.get("vllmReadySince")),
        "draining": _draining(status.get("draining")),
    }

    annotations = (service or {}).get("metadata", {}).get("annotations") or {}
    if rollout is None:
        # The record is gone; the Service still tells which revision a rollout gave up on, so it is not retried.
        failed = annotations.get(ANNOTATION_ROLLED_BACK) or None
        rollout = RolloutStatus(to_revision=failed, result="RolledBack") if failed else RolloutStatus()
    if service is not None:
        selector = (service.get("spec") or {}).get("selector") or {}
        if selector.get(LABEL_ROLE) == ROLE_OLLAMA:
            serving: str | None = OLLAMA
            backend: str | None = "ollama"
            active = annotations.get(ANNOTATION_ACTIVE_REVISION) or None
        else:
            serving = selector.get(LABEL_REVISION)
            backend = "vllm" if serving else None
            active = annotations.get(ANNOTATION_ACTIVE_REVISION, serving) or None
    else:
        # No Service (yet, or deleted by hand): status may name the active revision, if it still runs.
        serving = None
        recorded = status.get("activeRevision")
        active = recorded if isinstance(recorded, str) and recorded in revisions else None
        backend = "vllm" if active else None
    if active is not None and active not in revisions:
        active = None

    if rollout.in_progress and rollout.to_revision is not None and rollout.to_revision == active:
        # The Service already moved to the target: the switch happened and only its record was lost.
        rollout = rollout.model_copy(update={"state": "Idle", "result": "Succeeded", "end_time": now})
    elif not rollout.in_progress and rollout.to_revision != desired_revision and active not in (None, desired_revision):
        target = revisions.get(desired_revision)
        target_generation = ((target or {}).get("metadata", {}).get("annotations") or {}).get(ANNOTATION_GENERATION)
        if target is not None and target_generation == str(generation):
            # A rollout whose record is gone: its target runs; it resumes with its own start time.
            old = revisions.get(active) if active else None
            old_stopped = old is not None and int((old.get("spec") or {}).get("replicas") or 0) == 0
            state = ("Switching" if strategy == "Recreate" else "Bridging") if old_stopped else "Deploying"
            rollout = RolloutStatus(
                state=state,
                strategy=strategy,
                from_revision=active,
                to_revision=desired_revision,
                start_time=_rollout_start(target) or now,
                result="InProgress",
            )
    return Memory(
        active_revision=active,
        backend="ollama" if backend == "ollama" else ("vllm" if backend else None),
        rollout=rollout,
        serving=serving,
        **timers,
    )

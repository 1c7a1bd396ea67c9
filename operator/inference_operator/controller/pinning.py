"""Pinned plans: what the cluster and the operator's defaults contribute, fixed per spec generation (pure).

A plan is a function of the spec and of its inputs (images the operator defaults to, GPU facts read from
nodes). The inputs are resolved when the spec's generation changes (or when the user asks for a re-plan with
the annotation), recorded in status and on the revision's Deployment, and reused until then. A node joining
or an operator upgrade therefore never rolls a server out; it shows as the PlanOutdated condition instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ..api.status import PlanInputs, read_status_part
from ..planner import ClusterFacts, Defaults, LaunchPlan
from ..planner.gpu_catalog import ComputeCapability
from ..render import ANNOTATION_GENERATION, ANNOTATION_PLAN_INPUTS, LABEL_REVISION

REPLAN_ANNOTATION = "inference-operator.dev/replan"


def facts_to_dict(facts: ClusterFacts) -> dict[str, Any]:
    """JSON-ready: a compute capability is written as its usual text, 8.0."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(ClusterFacts):
        value = getattr(facts, f.name)
        if value in (None, ""):
            continue
        out[f.name] = str(value) if isinstance(value, ComputeCapability) else value
    return out


_KINDS: dict[str, tuple[type, ...]] = {
    "gpu_memory_gib": (int, float),
    "gpu_memory_source": (str,),
    "max_gpus_per_node": (int,),
    "compute_capability_source": (str,),
    "gpu_product": (str,),
}


def facts_from_dict(data: Mapping[str, Any]) -> ClusterFacts:
    """Facts recorded by this or another version of the operator; what it does not know or cannot read is left out."""
    kept: dict[str, Any] = {}
    for name, kinds in _KINDS.items():
        value = data.get(name)
        if isinstance(value, kinds) and not isinstance(value, bool):
            kept[name] = value
    capability = data.get("compute_capability")
    if isinstance(capability, str):
        with contextlib.suppress(ValueError):
            kept["compute_capability"] = ComputeCapability.parse(capability)
    return ClusterFacts(**kept)


def fresh_inputs(generation: int, facts: ClusterFacts, defaults: Defaults, token: str | None) -> PlanInputs:
    return PlanInputs(
        generation=generation,
        image=defaults.vllm_image,
        ollama_image=defaults.ollama_image,
        facts=facts_to_dict(facts),
        replan_token=token,
    )


def defaults_of(inputs: PlanInputs) -> Defaults:
    return Defaults(vllm_image=inputs.image, ollama_image=inputs.ollama_image)


def deployment_annotations(inputs: PlanInputs) -> dict[str, str]:
    return {
        ANNOTATION_GENERATION: str(inputs.generation),
        ANNOTATION_PLAN_INPUTS: json.dumps(inputs.model_dump(by_alias=True, exclude_none=True), sort_keys=True),
    }


def _from_deployment(dep: Mapping[str, Any]) -> PlanInputs | None:
    text = (dep.get("metadata") or {}).get("annotations", {}).get(ANNOTATION_PLAN_INPUTS)
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    inputs: PlanInputs | None = read_status_part(PlanInputs, data)
    return inputs


def pinned(
    status: Mapping[str, Any], deployments: list[dict[str, Any]], generation: int, token: str | None
) -> tuple[PlanInputs | None, str | None]:
    """The inputs recorded for this generation, and the revision rendered from them, when there are any.

    Status comes first; when it is lost, the Deployment of this generation carries the same record.
    """
    revision = None
    from_deployment = None
    for dep in deployments:
        annotations = dep["metadata"].get("annotations") or {}
        if annotations.get(ANNOTATION_GENERATION) == str(generation):
            revision = (dep["metadata"].get("labels") or {}).get(LABEL_REVISION)
            from_deployment = _from_deployment(dep)
    plan = status.get("plan") if isinstance(status.get("plan"), dict) else {}
    recorded = read_status_part(PlanInputs, (plan or {}).get("inputs")) or from_deployment
    if recorded is None or recorded.generation != generation or recorded.replan_token != token:
        return None, None
    return recorded, revision


def describe_change(current: LaunchPlan, replanned: LaunchPlan) -> str | None:
    """What a re-plan with today's cluster and defaults would change, in the spec's words; None if nothing."""
    changes = []
    for label, old, new in (
        ("image", current.image, replanned.image),
        ("gpus", current.gpus, replanned.gpus),
        ("tensorParallelSize", current.tensor_parallel_size, replanned.tensor_parallel_size),
        ("pipelineParallelSize", current.pipeline_parallel_size, replanned.pipeline_parallel_size),
        ("maxModelLen", current.max_model_len, replanned.max_model_len),
        ("gpuMemoryGiB", current.gpu_memory_gib, replanned.gpu_memory_gib),
    ):
        if old != new:
            changes.append(f"{label} {old} -> {new}")
    if not changes and current.args != replanned.args:
        changes.append("vLLM arguments " + " ".join(a for a in replanned.args if a not in current.args))
    if not changes:
        return None
    return (
        "a re-plan with the cluster and operator defaults of today would change "
        + ", ".join(changes)
        + f"; annotate the server with {REPLAN_ANNOTATION}=<a new value> to apply it"
    )

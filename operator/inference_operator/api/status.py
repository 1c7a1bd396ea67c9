"""What the operator reports in an InferenceServer's status (kstatus-compatible)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field, PlainSerializer, ValidationError, WithJsonSchema

from .types import ApiModel


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, as Kubernetes writes times."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Timestamp = Annotated[
    datetime,
    PlainSerializer(format_time, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]

ConditionType = Literal["Ready", "Reconciling", "Stalled", "Degraded", "FallbackActive"]
Phase = Literal["Pending", "Deploying", "Ready", "Degraded", "Fallback", "Stalled"]
Backend = Literal["vllm", "ollama"]


class Condition(ApiModel):
    type: str = Field(max_length=64)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=128)
    message: str = Field(default="", max_length=4096)
    last_transition_time: str | None = None
    observed_generation: int | None = None


class MemoryEstimate(ApiModel):
    """Per-GPU memory estimate, in GiB."""

    weights_gib: float = Field(alias="weightsGiB")
    kv_cache_per_sequence_gib: float = Field(alias="kvCachePerSequenceGiB")
    overhead_gib: float = Field(alias="overheadGiB")
    required_gib: float = Field(alias="requiredGiB")
    available_gib: float = Field(alias="availableGiB")
    max_sequences: int = Field(description="Max-length sequences the KV cache holds at once.")


class PlanInputs(ApiModel):
    """What the cluster and the operator's defaults contributed to a plan, fixed when the spec's generation changed.

    Reused until the next spec change (or the re-plan annotation), so that a node joining or an operator
    upgrade never changes a plan by itself.
    """

    generation: int = Field(description="The spec generation these inputs were resolved for.")
    image: str = Field(description="The vLLM image, from the spec or the operator's default at that time.")
    ollama_image: str = Field(description="The Ollama image, from the spec or the operator's default at that time.")
    facts: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="GPU facts read from the nodes the server may use.",
    )
    replan_token: str | None = Field(default=None, description="The re-plan annotation's value they answered.")


class PlanStatus(ApiModel):
    vllm_version: str
    flag_catalog: str = Field(description="vLLM release whose flag catalog checked the arguments.")
    gpus: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int | None = None
    gpu_memory_gib: float | None = Field(default=None, alias="gpuMemoryGiB")
    gpu_memory_source: str = Field(description="Where the GPU memory figure came from.")
    memory: MemoryEstimate | None = None
    sizing: str = Field(description="Where the model's sizes came from, or why it could not be sized.")
    warnings: list[str] = Field(default_factory=list)
    inputs: PlanInputs | None = None


RolloutState = Literal["Idle", "Deploying", "Bridging", "Switching", "RollingBack"]
RolloutResult = Literal["InProgress", "Succeeded", "RolledBack", "Failed"]


class RolloutStatus(ApiModel):
    """The rollout in progress, or the last one: the state machine's own record, kept in status as a cache.

    The cluster stays the truth: what serves is what the stable Service selects, and a rollout's target is a
    Deployment labelled with its revision, so a lost record is rebuilt from them.
    """

    state: RolloutState = "Idle"
    strategy: str | None = None
    from_revision: str | None = None
    to_revision: str | None = None
    start_time: Timestamp | None = None
    end_time: Timestamp | None = None
    result: RolloutResult | None = None
    message: str | None = Field(default=None, max_length=4096)

    @property
    def in_progress(self) -> bool:
        return self.result == "InProgress"


class DrainStatus(ApiModel):
    """A backend the Service no longer selects, kept running until its endpoints are gone and the window passed."""

    backend: str = Field(max_length=64, description="A vLLM revision, or ollama.")
    since: Timestamp


class InferenceServerStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    phase: Phase | None = None
    endpoint: str | None = None
    active_revision: str | None = None
    active_backend: Backend | None = None
    replicas: int | None = None
    ready_replicas: int | None = None
    plan: PlanStatus | None = None
    rollout: RolloutStatus | None = None
    fallback_since: Timestamp | None = Field(default=None, description="When vLLM stopped having a ready replica.")
    vllm_ready_since: Timestamp | None = Field(default=None, description="When vLLM became ready again in fallback.")
    draining: list[DrainStatus] = Field(
        default_factory=list, max_length=16, description="Backends that traffic left, waiting to be removed."
    )


def read_status_part(model: type[ApiModel], value: Any) -> Any:
    """One part of a status as this operator understands it, or None.

    Status is a cache that another version of the operator may have written: what cannot be read is
    ignored, never refused like a spec.
    """
    if value is None:
        return None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None

"""What the operator reports in an InferenceServer's status (kstatus-compatible)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .types import ApiModel

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


class RolloutStatus(ApiModel):
    """The rollout in progress, or the last one; persisted so a restarted operator resumes it."""

    state: Literal["Idle", "Deploying", "Bridging", "Switching", "RollingBack"] = "Idle"
    strategy: str | None = None
    from_revision: str | None = None
    to_revision: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    result: Literal["InProgress", "Succeeded", "RolledBack", "Failed"] | None = None
    message: str | None = None


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
    fallback_since: str | None = Field(default=None, description="When vLLM stopped having a ready replica.")
    vllm_ready_since: str | None = Field(default=None, description="When vLLM became ready again in fallback.")

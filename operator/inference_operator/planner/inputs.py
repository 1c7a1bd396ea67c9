"""What the planner needs besides the spec: the operator's defaults and facts about the cluster."""

from __future__ import annotations

from dataclasses import dataclass

from .gpu_catalog import ComputeCapability

DEFAULT_VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
DEFAULT_OLLAMA_IMAGE = "ollama/ollama:0.12.6"
DEFAULT_MAX_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Defaults:
    vllm_image: str = DEFAULT_VLLM_IMAGE
    ollama_image: str = DEFAULT_OLLAMA_IMAGE


@dataclass(frozen=True)
class ClusterFacts:
    """GPU facts of the nodes a server may run on (from GPU feature discovery labels)."""

    gpu_memory_gib: float | None = None
    gpu_memory_source: str = ""
    max_gpus_per_node: int | None = None
    # The weakest GPU of the candidate nodes: the lowest compute capability, and the product of the smallest memory.
    compute_capability: ComputeCapability | None = None
    compute_capability_source: str = ""
    gpu_product: str | None = None


NO_FACTS = ClusterFacts()

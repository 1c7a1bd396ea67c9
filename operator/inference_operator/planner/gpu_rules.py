"""What the GPUs of a plan are, and what they cannot run: bfloat16 below Ampere, FP8 below Ada."""

from __future__ import annotations

from dataclasses import dataclass

from ..api import InferenceServerSpec
from .engine import Engine
from .errors import PlanError
from .gpu_catalog import BF16_MIN, FP8_MIN, ComputeCapability
from .inputs import ClusterFacts
from .memory import WeightFormat
from .model_catalog import ModelSize


@dataclass(frozen=True)
class GpuFacts:
    """The GPU a replica gets, from the spec, the nodes' labels or the command line."""

    memory_gib: float | None
    memory_source: str
    capability: ComputeCapability | None
    capability_source: str
    max_per_node: int | None


def gpu_facts_for(spec: InferenceServerSpec, facts: ClusterFacts) -> GpuFacts:
    if spec.resources.gpu_memory_gib is not None:
        memory, source = spec.resources.gpu_memory_gib, "spec.resources.gpuMemoryGiB"
    elif facts.gpu_memory_gib is not None:
        memory, source = facts.gpu_memory_gib, facts.gpu_memory_source or "cluster nodes"
    else:
        memory, source = None, "unknown: set spec.resources.gpuMemoryGiB or label GPU nodes with nvidia.com/gpu.memory"
    return GpuFacts(
        memory_gib=memory,
        memory_source=source,
        capability=facts.compute_capability,
        capability_source=facts.compute_capability_source or "cluster nodes",
        max_per_node=facts.max_gpus_per_node,
    )


_HALF_CHECKPOINT_METHODS = ("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin")
_FP8_WEIGHT_METHODS = ("fp8", "fbgemm_fp8", "modelopt")


def dtype_for_gpu(
    spec: InferenceServerSpec,
    size: ModelSize | None,
    weights: WeightFormat | None,
    sizing_engine: Engine,
    gpu: GpuFacts,
) -> tuple[str | None, list[str]]:
    """The --dtype to render instead of the spec's (None: the spec's), refusing what the GPU cannot run."""
    cc = gpu.capability
    if cc is None:
        return None, []
    engine = spec.engine
    where = f"compute capability {cc} ({gpu.capability_source})"
    if engine.dtype == "bfloat16" and cc < BF16_MIN:
        raise PlanError(
            "spec.engine.dtype",
            f"bfloat16 needs GPUs of compute capability {BF16_MIN} or higher; these GPUs have {where}: use dtype half",
        )
    method = weights.method if weights else engine.quantization
    if method in _FP8_WEIGHT_METHODS and cc < FP8_MIN:
        field_name = "spec.engine.quantization" if engine.quantization else "spec.model.name"
        raise PlanError(
            field_name,
            f"FP8 weights need GPUs of compute capability {FP8_MIN} or higher; these GPUs have {where}: "
            "use a 16-bit, AWQ or GPTQ checkpoint",
        )
    if engine.kv_cache_dtype.startswith("fp8") and cc < FP8_MIN:
        raise PlanError(
            "spec.engine.kvCacheDtype",
            f"an FP8 KV cache needs GPUs of compute capability {FP8_MIN} or higher; these GPUs have {where}: "
            "use kvCacheDtype auto",
        )
    if engine.dtype != "auto" or cc >= BF16_MIN:
        return None, []
    native = "float16" if method in _HALF_CHECKPOINT_METHODS else (size.torch_dtype if size else None)
    if native is not None and native != "bfloat16":
        return None, []
    if sizing_engine.casts_bf16_to_half():
        return None, [f"vLLM {sizing_engine.release.text} runs this bfloat16 checkpoint in float16 on {where}"]
    return "half", [
        f"dtype auto would load bfloat16 weights, which GPUs of {where} cannot run and vLLM "
        f"{sizing_engine.release.text} does not convert: rendered --dtype half"
    ]

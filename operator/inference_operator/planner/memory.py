"""Per-GPU memory estimate: weights, KV cache for one max-length sequence, and a stated overhead."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .model_catalog import ModelSize

GIB = 2**30
# CUDA context, activations of one scheduler step and CUDA graphs, per GPU.
OVERHEAD_GIB = 2.0

_WEIGHT_BYTES_BY_DTYPE = {"auto": 2.0, "half": 2.0, "float16": 2.0, "bfloat16": 2.0, "float": 4.0, "float32": 4.0}
_WEIGHT_BYTES_BY_QUANTIZATION: dict[str, float | None] = {
    "awq": 0.5,
    "awq_marlin": 0.5,
    "gptq": 0.5,
    "gptq_marlin": 0.5,
    "marlin": 0.5,
    "bitsandbytes": 0.5,
    "fp8": 1.0,
    "fbgemm_fp8": 1.0,
    "modelopt": 1.0,
    "experts_int8": 1.0,
    # Bit width depends on the checkpoint: not guessed.
    "compressed-tensors": None,
    "gguf": None,
}


def weight_bytes_per_parameter(dtype: str, quantization: str | None) -> float | None:
    if quantization is not None:
        return _WEIGHT_BYTES_BY_QUANTIZATION.get(quantization)
    return _WEIGHT_BYTES_BY_DTYPE[dtype]


def kv_bytes_per_element(kv_cache_dtype: str, dtype: str) -> float:
    if kv_cache_dtype.startswith("fp8"):
        return 1.0
    return 4.0 if dtype in ("float", "float32") else 2.0


@dataclass(frozen=True)
class Fit:
    weights_gib: float
    kv_per_token_bytes: float
    overhead_gib: float
    available_gib: float

    def kv_sequence_gib(self, tokens: int) -> float:
        return self.kv_per_token_bytes * tokens / GIB

    def free_for_kv_gib(self) -> float:
        return self.available_gib - self.weights_gib - self.overhead_gib

    def weights_fit(self) -> bool:
        return self.free_for_kv_gib() > 0

    def fits(self, tokens: int) -> bool:
        return self.kv_sequence_gib(tokens) <= self.free_for_kv_gib()

    def longest_sequence(self, step: int = 256) -> int:
        """The longest sequence (a multiple of `step`) whose KV cache fits; 0 if none."""
        if self.kv_per_token_bytes <= 0 or not self.weights_fit():
            return 0
        tokens = int(self.free_for_kv_gib() * GIB / self.kv_per_token_bytes)
        return tokens - tokens % step

    def max_sequences(self, tokens: int) -> int:
        per_sequence = self.kv_sequence_gib(tokens)
        if per_sequence <= 0:
            return 0
        return max(0, math.floor(self.free_for_kv_gib() / per_sequence))


def estimate(
    size: ModelSize,
    *,
    tensor_parallel: int,
    pipeline_parallel: int,
    weight_bytes: float,
    kv_bytes: float,
    gpu_memory_gib: float,
    utilization: float,
) -> Fit:
    assert size.complete()
    params = (size.parameters_b or 0) * 1e9
    layers_per_stage = math.ceil((size.layers or 0) / pipeline_parallel)
    kv_heads_per_gpu = max(1, math.ceil((size.kv_heads or 0) / tensor_parallel))
    kv_per_token = 2 * layers_per_stage * kv_heads_per_gpu * (size.head_dim or 0) * kv_bytes
    return Fit(
        weights_gib=params * weight_bytes / (tensor_parallel * pipeline_parallel) / GIB,
        kv_per_token_bytes=kv_per_token,
        overhead_gib=OVERHEAD_GIB,
        available_gib=gpu_memory_gib * utilization,
    )

"""Per-GPU memory as vLLM's profiler accounts it: weights, activation peak, non-torch memory, then KV cache.

vLLM sizes its KV cache as (GPU total x gpuMemoryUtilization) - weights - peak activation of one profiling step -
non-torch memory (CUDA context, NCCL and custom all-reduce buffers), and refuses to start when one sequence of
maxModelLen tokens does not fit. Each term below is that term, so an estimate can be checked against the lines
vLLM logs ("Loading model weights took", "Memory profiling results", "# GPU blocks", "Available KV cache
memory", "Maximum concurrency"); docs/planning.md holds the published logs it is calibrated against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .engine import Engine, batched_tokens
from .model_catalog import ModelSize

GIB = 2**30
# The memory the driver reports to CUDA is this much below the board total GPU feature discovery labels
# (RTX 3090: 24.0 GiB labelled, 23.58 GiB in vLLM's log; H100 80GB: 79.65 vs 79.22).
DRIVER_RESERVED_GIB = 0.45
# CUDA context, cuBLAS workspaces and allocator slack outside PyTorch's tensors, on every GPU.
NON_TORCH_GIB = 0.5
# NCCL channels and the custom all-reduce buffers, per GPU of a tensor-parallel group (logs: about 1.8 GiB more
# at TP 2, 5.2-5.7 GiB at TP 8).
COMMUNICATION_GIB_PER_RANK = 0.65
# Quantization groups: AWQ and GPTQ checkpoints store a 16-bit scale and a packed zero point per 128 weights;
# bitsandbytes NF4 a 32-bit absmax per 64.
GROUP_SIZE = 128
NF4_BLOCK = 64

_FLOAT32 = ("float", "float32")


@dataclass(frozen=True)
class WeightFormat:
    """How the checkpoint's linear layers are stored: `bits` per weight including scales and zero points."""

    method: str | None  # None: unquantized
    bits: float
    source: str

    def describe(self) -> str:
        if self.method is None:
            return f"{self.bits / 8:g}-byte weights"
        return f"{self.method} at {self.bits:.3g} bits per weight ({self.source})"


def _quantized_bits(method: str, nominal_bits: int | None) -> float | None:
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin"):
        bits = nominal_bits or 4
        return bits + 16 / GROUP_SIZE + bits / GROUP_SIZE
    if method == "bitsandbytes":
        return 4 + 32 / NF4_BLOCK
    if method in ("fp8", "fbgemm_fp8", "modelopt", "experts_int8"):
        return 8.0
    if method == "compressed-tensors" and nominal_bits is not None:
        return nominal_bits + (16 / GROUP_SIZE if nominal_bits < 8 else 0)
    return None  # gguf, or compressed-tensors of an unknown scheme: the bit width is in the checkpoint only


def weight_format(dtype: str, quantization: str | None, inferred: tuple[str, int] | None) -> WeightFormat | None:
    """The weights' storage from spec.engine.quantization, else from the model id (`-AWQ`, `-GPTQ-Int8`, `-FP8`,
    `-bnb-4bit`), else the dtype; None when only the checkpoint knows."""
    if quantization is not None:
        nominal = inferred[1] if inferred is not None and _same_family(inferred[0], quantization) else None
        bits = _quantized_bits(quantization, nominal)
        return None if bits is None else WeightFormat(quantization, bits, "spec.engine.quantization")
    if inferred is not None:
        bits = _quantized_bits(*inferred)
        return None if bits is None else WeightFormat(inferred[0], bits, "model id")
    return WeightFormat(None, 32.0 if dtype in _FLOAT32 else 16.0, "spec.engine.dtype")


def _same_family(a: str, b: str) -> bool:
    return a.split("_")[0] == b.split("_")[0] or {a, b} <= {"gptq", "gptq_marlin", "marlin"}


def weight_gib(size: ModelSize, fmt: WeightFormat, shards: int) -> float:
    """Weights per GPU: quantized linear layers, with the embedding and lm_head kept at 16 bits."""
    params = (size.parameters_b or 0) * 1e9
    if fmt.method is None:
        return params * fmt.bits / 8 / shards / GIB
    embedding = min(size.embedding_parameters(), params)
    return ((params - embedding) * fmt.bits / 8 + embedding * 2) / shards / GIB


def kv_bytes_per_element(kv_cache_dtype: str, dtype: str) -> float:
    if kv_cache_dtype.startswith("fp8"):
        return 1.0
    return 4.0 if dtype in _FLOAT32 else 2.0


@dataclass(frozen=True)
class Fit:
    """One GPU of a plan. Lengths are tokens of one sequence."""

    weights_gib: float
    kv_full_bytes_per_token: float  # layers that keep the whole sequence
    kv_window_bytes_per_token: float  # sliding-window layers under the hybrid allocator
    window_tokens: int
    non_torch_gib: float
    activation_bytes_per_token: float
    profile_tokens: int | None  # tokens of the profiling step when it does not follow the length
    min_profile_tokens: int
    available_gib: float

    def kv_sequence_gib(self, tokens: int) -> float:
        window = min(tokens, self.window_tokens)
        return (self.kv_full_bytes_per_token * tokens + self.kv_window_bytes_per_token * window) / GIB

    def activation_gib(self, tokens: int) -> float:
        profiled = self.profile_tokens or max(tokens, self.min_profile_tokens)
        return self.activation_bytes_per_token * profiled / GIB

    def overhead_gib(self, tokens: int) -> float:
        return self.non_torch_gib + self.activation_gib(tokens)

    def free_for_kv_gib(self, tokens: int) -> float:
        return self.available_gib - self.weights_gib - self.overhead_gib(tokens)

    def weights_fit(self) -> bool:
        return self.free_for_kv_gib(1) > 0

    def fits(self, tokens: int) -> bool:
        return self.kv_sequence_gib(tokens) <= self.free_for_kv_gib(tokens)

    def longest_sequence(self, limit: int, step: int = 256) -> int:
        """The longest sequence up to `limit` (a multiple of `step`) whose KV cache fits; 0 if none."""
        low, high = 0, limit // step
        while low < high:
            middle = (low + high + 1) // 2
            if self.fits(middle * step):
                low = middle
            else:
                high = middle - 1
        return low * step

    def max_sequences(self, tokens: int) -> int:
        """vLLM's "Maximum concurrency for N tokens per request"."""
        per_sequence = self.kv_sequence_gib(tokens)
        if per_sequence <= 0:
            return 0
        return max(0, math.floor(self.free_for_kv_gib(tokens) / per_sequence))


@dataclass(frozen=True)
class Parallelism:
    tensor: int
    pipeline: int


def non_torch_gib(tensor_parallel: int) -> float:
    return NON_TORCH_GIB + (COMMUNICATION_GIB_PER_RANK * tensor_parallel if tensor_parallel > 1 else 0.0)


def estimate(
    size: ModelSize,
    *,
    parallel: Parallelism,
    weights: WeightFormat,
    kv_bytes: float,
    activation_bytes: float,
    gpu_memory_gib: float,
    utilization: float,
    engine: Engine,
    chunked: bool,
    max_num_batched_tokens: int | None,
) -> Fit:
    assert size.complete()
    tp, pp = parallel.tensor, parallel.pipeline
    layers = size.layers or 0
    layers_per_stage = math.ceil(layers / pp)
    kv_heads_per_gpu = max(1, math.ceil((size.kv_heads or 0) / tp))
    per_layer = 2 * kv_heads_per_gpu * (size.head_dim or 0) * kv_bytes
    # A window on every layer (Mistral v0.1) has been honoured by every allocator; windows interleaved with full
    # layers (Gemma 2 and 3) only by the hybrid one.
    window = size.sliding_window
    if window is not None and window.global_every != 1 and not engine.hybrid_kv():
        window = None
    if window is None:
        full_layers, window_layers, window_tokens = layers_per_stage, 0, 0
    else:
        full_layers = math.ceil(window.global_layers(layers) / pp)
        window_layers = layers_per_stage - full_layers
        window_tokens = window.tokens
    hidden = size.hidden_size or (size.attention_heads or 0) * (size.head_dim or 0)
    intermediate = size.intermediate_size or int(hidden * 3.5)
    fixed = (
        batched_tokens(engine, chunked, 0, max_num_batched_tokens, gpu_memory_gib)
        if chunked or max_num_batched_tokens is not None
        else None
    )
    return Fit(
        weights_gib=weight_gib(size, weights, tp * pp),
        kv_full_bytes_per_token=per_layer * full_layers,
        kv_window_bytes_per_token=per_layer * window_layers,
        window_tokens=window_tokens,
        non_torch_gib=non_torch_gib(tp),
        # The profiling step's peak sits in the MLP: its input, the residual and gate/up projections alive at once.
        activation_bytes_per_token=(3 * hidden + 3 * intermediate / tp) * activation_bytes,
        profile_tokens=fixed,
        min_profile_tokens=batched_tokens(engine, False, 0, None, gpu_memory_gib),
        available_gib=max(0.0, gpu_memory_gib - DRIVER_RESERVED_GIB) * utilization,
    )

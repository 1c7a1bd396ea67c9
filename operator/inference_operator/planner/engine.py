"""How a vLLM release behaves where it matters for a plan: engine generation, dtype fallback, KV layout, context.

Each threshold is the first release that carries the change (from vLLM's source and release history):
- 0.8.0 made the V1 engine the default (VLLM_USE_V1=1); 0.11.0 removed V0. Until 0.10.2 ("Enable V1 FP16
  inference on pre-Ampere GPUs", vllm-project/vllm#24022) V1 fell back to V0 on GPUs below compute capability 8.0.
- 0.9.0 casts a bfloat16 checkpoint to float16 by itself on GPUs below compute capability 8.0 ("Auto fallback to
  float16 for pre-Ampere GPUs", vllm-project/vllm#17265); older releases exit with "Bfloat16 is only supported on
  GPUs with compute capability of at least 8.0".
- 0.10.0 brought the hybrid KV cache allocator: sliding-window layers keep only their window.
- 0.6.4 and older cap Gemma 2's context at its 4096-token sliding window.
- 0.11.1 defaults a LongRoPE model's context to its original (pre-scaling) length (vllm-project/vllm#27431).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .gpu_catalog import BF16_MIN, ComputeCapability
from .model_catalog import ModelSize
from .versions import Release

V1_DEFAULT = Release("0.8.0")
V0_REMOVED = Release("0.11.0")
BF16_FALLBACK = Release("0.9.0")
HYBRID_KV = Release("0.10.0")
GEMMA2_WINDOW_CAP_UNTIL = Release("0.6.4.post1")
LONGROPE_ORIGINAL_DEFAULT = Release("0.11.1")
LARGE_GPU_BATCH_FROM = Release("0.9.0")
V1_PRE_AMPERE = Release("0.10.2")

# V0 turns chunked prefill on by itself above this context ("max_model_len > 32K"), then batches 512 tokens.
V0_AUTO_CHUNKED_ABOVE = 32000
V0_CHUNKED_BATCH_TOKENS = 512
V0_MIN_BATCH_TOKENS = 2048
# V1 batches 2048 tokens a step when serving; 8192 on GPUs of 70 GiB or more (from 0.9.0).
V1_BATCH_TOKENS = 2048
V1_LARGE_GPU_BATCH_TOKENS = 8192
V1_LARGE_GPU_GIB = 70.0


def _env_value(env: Iterable[tuple[str, str | None]], name: str) -> str | None:
    for key, value in env:
        if key == name:
            return value
    return None


@dataclass(frozen=True)
class Engine:
    """The engine a release runs for a spec."""

    release: Release
    v1: bool

    @property
    def label(self) -> str:
        return "V1" if self.v1 else "V0"

    def casts_bf16_to_half(self) -> bool:
        return self.release >= BF16_FALLBACK

    def hybrid_kv(self) -> bool:
        return self.v1 and self.release >= HYBRID_KV


def engine_for(
    release: Release, env: Iterable[tuple[str, str | None]], capability: ComputeCapability | None = None
) -> Engine:
    """V1 from 0.8.0, unless VLLM_USE_V1=0 asks for V0 on a release that still has it, or the GPU is older than
    Ampere on a release whose V1 did not run there."""
    if release < V1_DEFAULT:
        return Engine(release, v1=False)
    if release < V0_REMOVED and _env_value(env, "VLLM_USE_V1") == "0":
        return Engine(release, v1=False)
    if capability is not None and capability < BF16_MIN and release < V1_PRE_AMPERE:
        return Engine(release, v1=False)
    return Engine(release, v1=True)


def chunked_prefill(engine: Engine, extra_args: list[str], max_model_len: int | None) -> bool:
    """Whether the engine prefills in chunks: always on V1; on V0 when asked or for contexts above 32k."""
    if engine.v1:
        return True
    for arg in extra_args:
        flag, _, value = arg.partition("=")
        if flag == "--enable-chunked-prefill":
            return value.lower() not in ("false", "0")
        if flag == "--no-enable-chunked-prefill":
            return False
    return max_model_len is not None and max_model_len > V0_AUTO_CHUNKED_ABOVE


def batched_tokens(
    engine: Engine, chunked: bool, max_model_len: int, requested: int | None, gpu_memory_gib: float | None
) -> int:
    """Tokens of one scheduler step, which the memory profiler runs once: vLLM's default when not set."""
    if requested is not None:
        return requested
    if not engine.v1:
        return V0_CHUNKED_BATCH_TOKENS if chunked else max(max_model_len, V0_MIN_BATCH_TOKENS)
    if engine.release >= LARGE_GPU_BATCH_FROM and gpu_memory_gib is not None and gpu_memory_gib >= V1_LARGE_GPU_GIB:
        return V1_LARGE_GPU_BATCH_TOKENS
    return V1_BATCH_TOKENS


def model_context(size: ModelSize | None, release: Release) -> tuple[int | None, int | None]:
    """(the longest max_model_len vLLM accepts for the model, the one it picks when none is given)."""
    if size is None or size.max_context is None:
        return None, None
    longest = size.max_context
    if size.family == "gemma-2" and release <= GEMMA2_WINDOW_CAP_UNTIL and size.sliding_window is not None:
        longest = min(longest, size.sliding_window.tokens)
    default = longest
    if size.original_context is not None and release >= LONGROPE_ORIGINAL_DEFAULT:
        default = min(longest, size.original_context)
    return longest, default

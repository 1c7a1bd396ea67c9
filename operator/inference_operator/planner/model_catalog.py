"""Sizes of common model architectures, from their published configs (parameters in billions)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SlidingWindow:
    """Layers that attend to the last `tokens` only: every layer but each `global_every`-th one."""

    tokens: int
    global_every: int  # 1: no global layer (all layers slide); 2: Gemma 2 alternates; 6: Gemma 3 (5 local : 1)

    def global_layers(self, layers: int) -> int:
        return 0 if self.global_every == 1 else layers // self.global_every


@dataclass(frozen=True)
class ModelSize:
    name: str
    parameters_b: float | None = None
    layers: int | None = None
    attention_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    max_context: int | None = None
    # From the checkpoint's config.json: the dtype its weights are stored in (torch_dtype), the vocabulary and
    # hidden size (the embedding and lm_head stay 16-bit under weight quantization), the MLP width (activation
    # memory of a prefill) and whether lm_head shares the embedding.
    torch_dtype: str = "bfloat16"
    vocab_size: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    tied_embeddings: bool = False
    sliding_window: SlidingWindow | None = None
    # LongRoPE checkpoints (Phi-3 128k): the context they were trained with before scaling.
    original_context: int | None = None
    family: str = ""

    def complete(self) -> bool:
        return None not in (self.parameters_b, self.layers, self.attention_heads, self.kv_heads, self.head_dim)

    def embedding_parameters(self) -> float:
        """Parameters of the embedding and lm_head (one matrix when tied); 0 when the sizes are unknown."""
        if self.vocab_size is None or self.hidden_size is None:
            return 0.0
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)


def _m(
    name: str,
    params: float,
    layers: int,
    heads: int,
    kv: int,
    head_dim: int,
    ctx: int,
    vocab: int,
    hidden: int,
    inter: int,
    *,
    tied: bool = False,
    window: SlidingWindow | None = None,
    original_context: int | None = None,
) -> ModelSize:
    family = name.split("-")[0] + ("-" + name.split("-")[1] if name.startswith(("gemma", "phi")) else "")
    return ModelSize(
        name,
        params,
        layers,
        heads,
        kv,
        head_dim,
        ctx,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        tied_embeddings=tied,
        sliding_window=window,
        original_context=original_context,
        family=family,
    )


_GEMMA2 = SlidingWindow(4096, 2)
_GEMMA3_1B = SlidingWindow(512, 6)
_GEMMA3 = SlidingWindow(1024, 6)


CATALOG: tuple[ModelSize, ...] = (
    # Llama 3.x
    _m("llama-3.2-1b", 1.24, 16, 32, 8, 64, 131072, 128256, 2048, 8192, tied=True),
    _m("llama-3.2-3b", 3.21, 28, 24, 8, 128, 131072, 128256, 3072, 8192, tied=True),
    _m("llama-3-8b", 8.03, 32, 32, 8, 128, 8192, 128256, 4096, 14336),
    _m("llama-3.1-8b", 8.03, 32, 32, 8, 128, 131072, 128256, 4096, 14336),
    _m("llama-3-70b", 70.6, 80, 64, 8, 128, 8192, 128256, 8192, 28672),
    _m("llama-3.1-70b", 70.6, 80, 64, 8, 128, 131072, 128256, 8192, 28672),
    _m("llama-3.3-70b", 70.6, 80, 64, 8, 128, 131072, 128256, 8192, 28672),
    _m("llama-3.1-405b", 405.9, 126, 128, 8, 128, 131072, 128256, 16384, 53248),
    # Mistral and Mixtral (v0.2 and later have no sliding window)
    _m("mistral-7b", 7.25, 32, 32, 8, 128, 32768, 32768, 4096, 14336),
    _m("mixtral-8x7b", 46.7, 32, 32, 8, 128, 32768, 32000, 4096, 14336),
    _m("mixtral-8x22b", 140.6, 56, 48, 8, 128, 65536, 32768, 6144, 16384),
    # Qwen2.5
    _m("qwen2.5-0.5b", 0.49, 24, 14, 2, 64, 32768, 151936, 896, 4864, tied=True),
    _m("qwen2.5-1.5b", 1.54, 28, 12, 2, 128, 32768, 151936, 1536, 8960, tied=True),
    _m("qwen2.5-3b", 3.09, 36, 16, 2, 128, 32768, 151936, 2048, 11008, tied=True),
    _m("qwen2.5-7b", 7.62, 28, 28, 4, 128, 32768, 152064, 3584, 18944),
    _m("qwen2.5-14b", 14.7, 48, 40, 8, 128, 32768, 152064, 5120, 13824),
    _m("qwen2.5-32b", 32.5, 64, 40, 8, 128, 32768, 152064, 5120, 27648),
    _m("qwen2.5-72b", 72.7, 80, 64, 8, 128, 32768, 152064, 8192, 29568),
    # Gemma 2 and 3: interleaved sliding-window layers
    _m("gemma-2-2b", 2.61, 26, 8, 4, 256, 8192, 256000, 2304, 9216, tied=True, window=_GEMMA2),
    _m("gemma-2-9b", 9.24, 42, 16, 8, 256, 8192, 256000, 3584, 14336, tied=True, window=_GEMMA2),
    _m("gemma-2-27b", 27.2, 46, 32, 16, 128, 8192, 256000, 4608, 36864, tied=True, window=_GEMMA2),
    _m("gemma-3-1b", 1.0, 26, 4, 1, 256, 32768, 262144, 1152, 6912, tied=True, window=_GEMMA3_1B),
    _m("gemma-3-4b", 4.3, 34, 8, 4, 256, 131072, 262208, 2560, 10240, tied=True, window=_GEMMA3),
    _m("gemma-3-12b", 12.2, 48, 16, 8, 256, 131072, 262208, 3840, 15360, tied=True, window=_GEMMA3),
    _m("gemma-3-27b", 27.4, 62, 32, 16, 128, 131072, 262208, 5376, 21504, tied=True, window=_GEMMA3),
    # Phi (the 128k variants scale a 4k context with LongRoPE)
    _m("phi-3-mini-4k", 3.82, 32, 32, 32, 96, 4096, 32064, 3072, 8192),
    _m("phi-3-mini-128k", 3.82, 32, 32, 32, 96, 131072, 32064, 3072, 8192, original_context=4096),
    _m("phi-3-medium-4k", 14.0, 40, 40, 10, 128, 4096, 32064, 5120, 17920),
    _m("phi-3-medium-128k", 14.0, 40, 40, 10, 128, 131072, 32064, 5120, 17920, original_context=4096),
    _m("phi-3.5-mini", 3.82, 32, 32, 32, 96, 131072, 32064, 3072, 8192, original_context=4096),
    _m("phi-4", 14.7, 40, 40, 10, 128, 16384, 100352, 5120, 17920),
    _m("phi-4-mini", 3.84, 32, 24, 8, 128, 131072, 200064, 3072, 8192, tied=True, original_context=4096),
    # DeepSeek-R1 distills
    _m("deepseek-r1-distill-qwen-1.5b", 1.78, 28, 12, 2, 128, 131072, 151936, 1536, 8960),
    _m("deepseek-r1-distill-qwen-7b", 7.62, 28, 28, 4, 128, 131072, 152064, 3584, 18944),
    _m("deepseek-r1-distill-qwen-14b", 14.8, 48, 40, 8, 128, 131072, 152064, 5120, 13824),
    _m("deepseek-r1-distill-qwen-32b", 32.8, 64, 40, 8, 128, 131072, 152064, 5120, 27648),
    _m("deepseek-r1-distill-llama-8b", 8.03, 32, 32, 8, 128, 131072, 128256, 4096, 14336),
    _m("deepseek-r1-distill-llama-70b", 70.6, 80, 64, 8, 128, 131072, 128256, 8192, 28672),
)

_BY_NAME = {m.name: m for m in CATALOG}
# Words that name a variant of the same architecture (tuning, format or quantization), not another size.
_VARIANT_SUFFIX = re.compile(
    r"[-_.](instruct|chat|it|hf|base|awq|gptq|int4|int8|w4a16|w8a8|fp8|bnb|4bit|8bit|gguf|dynamic|"
    r"v0\.[0-9]|v[0-9]|[0-9]{4})$"
)
_ALIASES = {"meta-llama-3": "llama-3", "meta-llama-3.1": "llama-3.1", "mistral-7b-instruct": "mistral-7b"}


def canonical_name(model: str) -> str:
    """`meta-llama/Meta-Llama-3.1-8B-Instruct` -> `llama-3.1-8b`."""
    base = model.rstrip("/").rsplit("/", 1)[-1].lower()
    for prefix, replacement in _ALIASES.items():
        if base.startswith(prefix):
            base = replacement + base[len(prefix) :]
    previous = None
    while previous != base:
        previous = base
        base = _VARIANT_SUFFIX.sub("", base)
    return base


# Mistral-7B v0.1 slides every layer over 4096 tokens and has the 32000-token vocabulary; v0.2 and v0.3 do not.
_MISTRAL_V01 = re.compile(r"mistral-7b.*v0\.1", re.IGNORECASE)


def lookup(model: str) -> ModelSize | None:
    found = _BY_NAME.get(canonical_name(model))
    if found is not None and found.name == "mistral-7b" and _MISTRAL_V01.search(model):
        return replace(found, sliding_window=SlidingWindow(4096, 1), vocab_size=32000)
    return found


# Suffixes of quantized checkpoints in model ids, and the method and nominal bits vLLM reads from their config.
_QUANTIZED_ID = (
    (re.compile(r"[-_.]awq([-_.]|$)"), ("awq", 4)),
    (re.compile(r"[-_.]gptq[-_.]?int8([-_.]|$)|[-_.]gptq[-_.]8bit([-_.]|$)"), ("gptq", 8)),
    (re.compile(r"[-_.]gptq([-_.]|$)"), ("gptq", 4)),
    (re.compile(r"[-_.]fp8([-_.]|$)"), ("fp8", 8)),
    (re.compile(r"[-_.]bnb[-_.]4bit([-_.]|$)"), ("bitsandbytes", 4)),
    (re.compile(r"[-_.]w4a16([-_.]|$)"), ("compressed-tensors", 4)),
    (re.compile(r"[-_.]w8a(8|16)([-_.]|$)"), ("compressed-tensors", 8)),
)


def inferred_quantization(model: str) -> tuple[str, int] | None:
    """(method, nominal bits) a model id announces: `Qwen2.5-32B-Instruct-GPTQ-Int8` -> ("gptq", 8)."""
    base = model.rstrip("/").rsplit("/", 1)[-1].lower()
    for pattern, found in _QUANTIZED_ID:
        if pattern.search(base):
            return found
    return None

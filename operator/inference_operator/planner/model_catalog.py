"""Sizes of common model architectures, from their published configs (parameters in billions)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSize:
    name: str
    parameters_b: float | None = None
    layers: int | None = None
    attention_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    max_context: int | None = None

    def complete(self) -> bool:
        return None not in (self.parameters_b, self.layers, self.attention_heads, self.kv_heads, self.head_dim)


def _m(name: str, params: float, layers: int, heads: int, kv: int, head_dim: int, ctx: int) -> ModelSize:
    return ModelSize(name, params, layers, heads, kv, head_dim, ctx)


CATALOG: tuple[ModelSize, ...] = (
    # Llama 3.x
    _m("llama-3.2-1b", 1.24, 16, 32, 8, 64, 131072),
    _m("llama-3.2-3b", 3.21, 28, 24, 8, 128, 131072),
    _m("llama-3-8b", 8.03, 32, 32, 8, 128, 8192),
    _m("llama-3.1-8b", 8.03, 32, 32, 8, 128, 131072),
    _m("llama-3-70b", 70.6, 80, 64, 8, 128, 8192),
    _m("llama-3.1-70b", 70.6, 80, 64, 8, 128, 131072),
    _m("llama-3.3-70b", 70.6, 80, 64, 8, 128, 131072),
    _m("llama-3.1-405b", 405.9, 126, 128, 8, 128, 131072),
    # Mistral and Mixtral
    _m("mistral-7b", 7.25, 32, 32, 8, 128, 32768),
    _m("mixtral-8x7b", 46.7, 32, 32, 8, 128, 32768),
    _m("mixtral-8x22b", 140.6, 56, 48, 8, 128, 65536),
    # Qwen2.5
    _m("qwen2.5-0.5b", 0.49, 24, 14, 2, 64, 32768),
    _m("qwen2.5-1.5b", 1.54, 28, 12, 2, 128, 32768),
    _m("qwen2.5-3b", 3.09, 36, 16, 2, 128, 32768),
    _m("qwen2.5-7b", 7.62, 28, 28, 4, 128, 32768),
    _m("qwen2.5-14b", 14.7, 48, 40, 8, 128, 32768),
    _m("qwen2.5-32b", 32.5, 64, 40, 8, 128, 32768),
    _m("qwen2.5-72b", 72.7, 80, 64, 8, 128, 32768),
    # Gemma 2 and 3
    _m("gemma-2-2b", 2.61, 26, 8, 4, 256, 8192),
    _m("gemma-2-9b", 9.24, 42, 16, 8, 256, 8192),
    _m("gemma-2-27b", 27.2, 46, 32, 16, 128, 8192),
    _m("gemma-3-1b", 1.0, 26, 4, 1, 256, 32768),
    _m("gemma-3-4b", 4.3, 34, 8, 4, 256, 131072),
    _m("gemma-3-12b", 12.2, 48, 16, 8, 256, 131072),
    _m("gemma-3-27b", 27.4, 62, 32, 16, 128, 131072),
    # Phi
    _m("phi-3-mini-4k", 3.82, 32, 32, 32, 96, 4096),
    _m("phi-3-mini-128k", 3.82, 32, 32, 32, 96, 131072),
    _m("phi-3-medium-4k", 14.0, 40, 40, 10, 128, 4096),
    _m("phi-3-medium-128k", 14.0, 40, 40, 10, 128, 131072),
    _m("phi-3.5-mini", 3.82, 32, 32, 32, 96, 131072),
    _m("phi-4", 14.7, 40, 40, 10, 128, 16384),
    _m("phi-4-mini", 3.84, 32, 24, 8, 128, 131072),
    # DeepSeek-R1 distills
    _m("deepseek-r1-distill-qwen-1.5b", 1.78, 28, 12, 2, 128, 131072),
    _m("deepseek-r1-distill-qwen-7b", 7.62, 28, 28, 4, 128, 131072),
    _m("deepseek-r1-distill-qwen-14b", 14.8, 48, 40, 8, 128, 131072),
    _m("deepseek-r1-distill-qwen-32b", 32.8, 64, 40, 8, 128, 131072),
    _m("deepseek-r1-distill-llama-8b", 8.03, 32, 32, 8, 128, 131072),
    _m("deepseek-r1-distill-llama-70b", 70.6, 80, 64, 8, 128, 131072),
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


def lookup(model: str) -> ModelSize | None:
    return _BY_NAME.get(canonical_name(model))

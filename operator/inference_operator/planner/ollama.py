"""What the Ollama fallback needs from a plan: a model name Ollama accepts, its context and its store size.

Ollama's names (types/model/name.go): `[host/][namespace/]model[:tag][+build]`, at most 128 characters, every part
non-empty and made of letters, digits, `_`, `-` and `.` (no `.` in the namespace, never `..`). Its OpenAI endpoint
looks a request's `model` up by that name, so the id clients send must be one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..api import InferenceServerSpec, OllamaSpec
from .errors import PlanError
from .inputs import Defaults

MAX_NAME = 128
_PART = re.compile(r"^[A-Za-z0-9_.-]+$")
_NAMESPACE = re.compile(r"^[A-Za-z0-9_-]+$")

# Context windows of Ollama library models (by name before the tag); the fallback never asks for more.
_LIBRARY_CONTEXT = {
    "llama3": 8192,
    "llama3.1": 131072,
    "llama3.2": 131072,
    "llama3.3": 131072,
    "qwen2.5": 32768,
    "qwen2.5-coder": 32768,
    "qwen3": 40960,
    "mistral": 32768,
    "mistral-nemo": 131072,
    "mixtral": 32768,
    "gemma2": 8192,
    "gemma3": 131072,
    "phi3": 131072,
    "phi3.5": 131072,
    "phi4": 16384,
    "phi4-mini": 131072,
    "deepseek-r1": 131072,
    "tinyllama": 2048,
}
_GEMMA3_1B_CONTEXT = 32768

# A library model's default tag is a 4-bit GGUF: about 0.6 bytes a parameter.
GGUF_BYTES_PER_PARAMETER = 0.6
STORE_HEADROOM_GIB = 2
DEFAULT_STORE_GIB = 20


def is_valid_name(name: str) -> bool:
    """Whether Ollama parses `name` as a model name."""
    if not name or len(name) > MAX_NAME or ".." in name:
        return False
    rest, _, build = name.partition("+")
    if "+" in name and not _PART.match(build):
        return False
    path, _, tag = rest.partition(":")
    if ":" in rest and not _PART.match(tag):
        return False
    parts = path.split("/")
    if len(parts) > 3 or not all(parts):
        return False
    if len(parts) == 3 and not _PART.match(parts[0]):
        return False
    if len(parts) >= 2 and not _NAMESPACE.match(parts[-2]):
        return False
    return bool(_PART.match(parts[-1]))


def derived_name(model: str) -> str:
    """A name Ollama and vLLM both accept for a model given as a path: its last component, cleaned.

    `/models/llama-3.1-8b-instruct` -> `llama-3.1-8b-instruct`."""
    base = model.rstrip("/").rsplit("/", 1)[-1]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", base)
    cleaned = re.sub(r"\.{2,}", ".", cleaned).strip("-.")
    return (cleaned or "model")[:MAX_NAME]


def _family_and_tag(model: str) -> tuple[str, str]:
    name = model.rsplit("/", 1)[-1].lower()
    family, _, tag = name.partition(":")
    return family, tag


def library_context(model: str) -> int | None:
    """The context window of an Ollama library model, when known."""
    family, tag = _family_and_tag(model)
    if family == "gemma3" and tag.startswith("1b"):
        return _GEMMA3_1B_CONTEXT
    return _LIBRARY_CONTEXT.get(family)


def parameters_b(model: str) -> float | None:
    """Billions of parameters a tag names: `llama3.1:8b` -> 8, `qwen2.5:0.5b` -> 0.5, `gemma3:270m` -> 0.27."""
    _, tag = _family_and_tag(model)
    match = re.match(r"^(\d+(?:\.\d+)?)([bm])", tag)
    if match is None:
        return None
    value = float(match.group(1))
    return value if match.group(2) == "b" else value / 1000


def store_size_gib(model: str) -> int:
    """GiB for the Ollama model store: the model's 4-bit file and headroom, or a default when the tag is silent."""
    params = parameters_b(model)
    if params is None:
        return DEFAULT_STORE_GIB
    return max(STORE_HEADROOM_GIB + 1, math.ceil(params * 1e9 * GGUF_BYTES_PER_PARAMETER / 2**30) + STORE_HEADROOM_GIB)


@dataclass(frozen=True)
class OllamaPlan:
    image: str
    model: str
    served_name: str
    mode: str
    activate_after_seconds: int
    recover_after_seconds: int
    spec: OllamaSpec
    context_length: int | None = None  # OLLAMA_CONTEXT_LENGTH: vLLM's max model length, within the model's own
    store_size: str = "20Gi"  # the retained claim holding the pulled models


def ollama_plan(
    spec: InferenceServerSpec, served_name: str, defaults: Defaults, max_model_len: int | None
) -> OllamaPlan | None:
    ollama = spec.fallback.ollama if spec.fallback else None
    if ollama is None or not ollama.enabled:
        return None
    if not ollama.model:
        raise PlanError("spec.fallback.ollama.model", "is required when the Ollama fallback is enabled")
    if not is_valid_name(ollama.model):
        raise PlanError(
            "spec.fallback.ollama.model",
            f"{ollama.model!r} is not a model name Ollama accepts: {OLLAMA_NAME_RULE}",
        )
    context = library_context(ollama.model)
    length = max_model_len if context is None or max_model_len is None else min(max_model_len, context)
    return OllamaPlan(
        image=ollama.image or defaults.ollama_image,
        model=ollama.model,
        served_name=served_name,
        mode=ollama.mode,
        activate_after_seconds=ollama.activate_after_seconds,
        recover_after_seconds=ollama.recover_after_seconds,
        spec=ollama,
        context_length=length,
        store_size=str(ollama.store.size) if ollama.store.size is not None else f"{store_size_gib(ollama.model)}Gi",
    )


OLLAMA_NAME_RULE = (
    "[host/][namespace/]name[:tag] of letters, digits, '_', '-' and '.', no '.' in the namespace, "
    f"at most {MAX_NAME} characters"
)


def served_id(spec: InferenceServerSpec) -> tuple[str, list[str]]:
    """The OpenAI model id clients send. With the Ollama fallback it must be a name Ollama accepts too: a model
    given as a path is served under its last component; an explicit servedName Ollama rejects is refused."""
    explicit = spec.model.served_name
    name = explicit or spec.model.name
    ollama = spec.fallback.ollama if spec.fallback else None
    if ollama is None or not ollama.enabled or is_valid_name(name):
        return name, []
    if explicit:
        raise PlanError(
            "spec.model.servedName",
            f"{explicit!r} is not a model name Ollama accepts ({OLLAMA_NAME_RULE}), and the Ollama fallback "
            f"serves the same id; choose one such as {derived_name(explicit)!r}",
        )
    derived = derived_name(spec.model.name)
    return derived, [
        f"clients send model {derived!r}: {spec.model.name} is not a name Ollama accepts, so vLLM and the Ollama "
        "fallback both serve it under that id (set spec.model.servedName to choose another)"
    ]

"""The `vllm serve` arguments of a plan, kept to the flags the target release accepts."""

from __future__ import annotations

from collections.abc import Iterator

from ..api import EngineSpec, ModelSpec
from .errors import PlanError
from .flag_catalog import FlagSet

SERVING_PORT = 8000

# The container command is set, not left to the image: vllm/vllm-openai images first started the api_server
# module, which has no positional model, and later `vllm serve`, which refuses `--model` up to 0.10 and
# deprecates it after. `vllm serve MODEL` works on every release of the flag catalog.
VLLM_COMMAND = ("vllm", "serve")

# Flags the operator derives from the spec; extraArgs may not set them behind its back.
MANAGED_FLAGS = {
    "--model": "spec.model.name",
    "--revision": "spec.model.revision",
    "--served-model-name": "spec.model.servedName",
    "--trust-remote-code": "spec.model.trustRemoteCode",
    "--host": "the operator (pods listen on all addresses)",
    "--port": "the operator (the pod port is fixed; set spec.service.port)",
    "--tensor-parallel-size": "spec.engine.tensorParallelSize",
    "--pipeline-parallel-size": "spec.engine.pipelineParallelSize",
    "--gpu-memory-utilization": "spec.engine.gpuMemoryUtilization",
    "--dtype": "spec.engine.dtype",
    "--quantization": "spec.engine.quantization",
    "--kv-cache-dtype": "spec.engine.kvCacheDtype",
    "--max-model-len": "spec.engine.maxModelLen",
    "--max-num-seqs": "spec.engine.maxNumSeqs",
    "--max-num-batched-tokens": "spec.engine.maxNumBatchedTokens",
    "--enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--no-enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--enforce-eager": "spec.engine.enforceEager",
    "--swap-space": "spec.engine.swapSpace",
    "--download-dir": "the operator (HF_HOME is on the model cache)",
}
REQUIRED_FLAGS = ("--served-model-name", "--host", "--port", "--tensor-parallel-size")


def _wanted(
    model: ModelSpec, engine: EngineSpec, served_name: str, tp: int, pp: int, max_model_len: int | None
) -> Iterator[tuple[str, str | None, str]]:
    """(flag, value or None for a switch, spec field) in a stable order; the model itself is positional."""
    if model.revision:
        yield "--revision", model.revision, "spec.model.revision"
    yield "--served-model-name", served_name, "spec.model.servedName"
    yield "--host", "0.0.0.0", "operator"
    yield "--port", str(SERVING_PORT), "operator"
    yield "--tensor-parallel-size", str(tp), "spec.engine.tensorParallelSize"
    if pp > 1:
        yield "--pipeline-parallel-size", str(pp), "spec.engine.pipelineParallelSize"
    yield "--gpu-memory-utilization", f"{engine.gpu_memory_utilization:g}", "spec.engine.gpuMemoryUtilization"
    if engine.dtype != "auto":
        yield "--dtype", engine.dtype, "spec.engine.dtype"
    if engine.quantization:
        yield "--quantization", engine.quantization, "spec.engine.quantization"
    if engine.kv_cache_dtype != "auto":
        yield "--kv-cache-dtype", engine.kv_cache_dtype, "spec.engine.kvCacheDtype"
    if max_model_len is not None:
        yield "--max-model-len", str(max_model_len), "spec.engine.maxModelLen"
    if engine.max_num_seqs is not None:
        yield "--max-num-seqs", str(engine.max_num_seqs), "spec.engine.maxNumSeqs"
    if engine.max_num_batched_tokens is not None:
        yield "--max-num-batched-tokens", str(engine.max_num_batched_tokens), "spec.engine.maxNumBatchedTokens"
    if engine.enable_prefix_caching is True:
        yield "--enable-prefix-caching", None, "spec.engine.enablePrefixCaching"
    elif engine.enable_prefix_caching is False:
        yield "--no-enable-prefix-caching", None, "spec.engine.enablePrefixCaching"
    if engine.enforce_eager:
        yield "--enforce-eager", None, "spec.engine.enforceEager"
    if engine.swap_space is not None:
        yield "--swap-space", str(engine.swap_space), "spec.engine.swapSpace"
    if model.trust_remote_code:
        yield "--trust-remote-code", None, "spec.model.trustRemoteCode"


def extra_flags(extra_args: list[str]) -> list[str]:
    return [arg.split("=", 1)[0] for arg in extra_args if arg.startswith("-")]


def check_extra_args(extra_args: list[str], flags: FlagSet, target: str) -> None:
    for flag in extra_flags(extra_args):
        if flag in MANAGED_FLAGS:
            raise PlanError(
                "spec.engine.extraArgs",
                f"{flag} is set by {MANAGED_FLAGS[flag]}; remove it from extraArgs",
            )
        if not flags.accepts(flag):
            raise PlanError(
                "spec.engine.extraArgs",
                f"{flag} is not a flag of vLLM {target} (checked against the flag catalog of vLLM "
                f"{flags.release.text})",
            )


def build_args(
    model: ModelSpec,
    engine: EngineSpec,
    *,
    served_name: str,
    tp: int,
    pp: int,
    max_model_len: int | None,
    flags: FlagSet,
    target: str,
) -> tuple[list[str], list[str]]:
    """(arguments after `vllm serve`, warnings). A spec field whose flag the release lacks is dropped with a
    warning."""
    args: list[str] = [model.name]
    warnings: list[str] = []
    for flag, value, field in _wanted(model, engine, served_name, tp, pp, max_model_len):
        if not flags.accepts(flag):
            if flag in REQUIRED_FLAGS:
                raise PlanError(field, f"vLLM {target} does not accept {flag}, which the operator needs")
            warnings.append(f"{field} ignored: vLLM {target} has no {flag}")
            continue
        args.append(flag)
        if value is not None:
            args.append(value)
    check_extra_args(engine.extra_args, flags, target)
    args.extend(engine.extra_args)
    return args, warnings

"""The `vllm serve` arguments of a plan, kept to the flags the target release accepts."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..api import EngineSpec, ModelSpec
from .errors import PlanError
from .flag_catalog import Flag, FlagSet

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


_NUMBER = re.compile(r"-\d+(\.\d+)?(e-?\d+)?")


def extra_flags(extra_args: list[str]) -> list[tuple[str, str | None]]:
    """(flag spelling, the value that follows it or None) for each flag in extraArgs."""
    out: list[tuple[str, str | None]] = []
    for i, arg in enumerate(extra_args):
        if not arg.startswith("-") or _NUMBER.fullmatch(arg):
            continue
        spelling, eq, value = arg.partition("=")
        if eq:
            out.append((spelling, value))
        else:
            following = extra_args[i + 1] if i + 1 < len(extra_args) else None
            is_value = following is not None and (not following.startswith("-") or _NUMBER.fullmatch(following))
            out.append((arg, following if is_value else None))
    return out


def _managed_by(flag: Flag) -> str | None:
    for name in (flag.name, flag.negates):
        if name is not None and name in MANAGED_FLAGS:
            return MANAGED_FLAGS[name]
    return None


def _invalid_choice(field: str, what: str, value: str, flag: Flag, target: str) -> PlanError:
    assert flag.choices is not None
    return PlanError(field, f"{value} is not {what} of vLLM {target}; it knows {', '.join(flag.choices)}")


def check_extra_args(extra_args: list[str], flags: FlagSet, target: str) -> list[str]:
    """The long names of the flags extraArgs sets; refuses unknown, ambiguous and managed ones."""
    names: list[str] = []
    for spelling, value in extra_flags(extra_args):
        read = flags.read(spelling)
        if read.ambiguous:
            raise PlanError(
                "spec.engine.extraArgs",
                f"{spelling} is ambiguous for vLLM {target}: it abbreviates {', '.join(read.ambiguous)}",
            )
        flag = read.flag
        if flag is None:
            raise PlanError(
                "spec.engine.extraArgs",
                f"{spelling} is not a flag of vLLM {target} (checked against the flag catalog of vLLM "
                f"{flags.release.text})",
            )
        owner = _managed_by(flag)
        if owner is not None:
            spelled = spelling if spelling == flag.name else f"{spelling} (vLLM reads it as {flag.name})"
            raise PlanError("spec.engine.extraArgs", f"{spelled} is set by {owner}; remove it from extraArgs")
        strict = flag.choices is not None and not flag.other_values and not flag.boolean
        if strict and value is not None and value not in (flag.choices or ()):
            raise _invalid_choice("spec.engine.extraArgs", f"a value of {flag.name}", value, flag, target)
        names.append(flag.name)
    return names


def _check_choices(engine: EngineSpec, extra_names: list[str], flags: FlagSet, target: str) -> list[str]:
    """The spec's dtype, quantization and KV cache dtype against the values the release knows."""
    warnings: list[str] = []
    for flag_name, value, field, what in (
        ("--dtype", engine.dtype, "spec.engine.dtype", "a dtype"),
        ("--quantization", engine.quantization, "spec.engine.quantization", "a quantization method"),
        ("--kv-cache-dtype", engine.kv_cache_dtype, "spec.engine.kvCacheDtype", "a KV cache dtype"),
    ):
        flag = flags.get(flag_name)
        if value is None or value == "auto" or flag is None or flag.choices is None:
            continue
        if value not in flag.choices:
            raise _invalid_choice(field, what, value, flag, target)
    quantization = engine.quantization
    if quantization is not None and quantization in flags.deprecated_quantization:
        allow = flags.allow_deprecated_quantization
        if allow is None:
            warnings.append(f"vLLM {target} deprecates quantization {quantization}")
        elif allow in extra_names:
            warnings.append(f"vLLM {target} deprecates quantization {quantization}; allowed by {allow} in extraArgs")
        else:
            raise PlanError(
                "spec.engine.quantization",
                f"vLLM {target} deprecates {quantization} and refuses to start with it unless {allow} is given: "
                f"add {allow} to spec.engine.extraArgs, or choose another method",
            )
    return warnings


def _check_between(used: list[str], flags: FlagSet, target: str) -> None:
    """A release between two catalogs is checked against the older only for flags both agree on."""
    newer = flags.newer
    if newer is None:
        return
    for name in used:
        before, after = flags.get(name), newer.get(name)
        if (before is None) != (after is None) or (
            before is not None and after is not None and before.comparable() != after.comparable()
        ):
            change = "added" if before is None else "removed" if after is None else "changed (its values or aliases)"
            raise PlanError(
                flags.release_field,
                f"vLLM {target} has no flag catalog, and {name}, which this server uses, was {change} between "
                f"vLLM {flags.release.text} and {newer.release.text}: use a catalogued release",
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
    wanted = list(_wanted(model, engine, served_name, tp, pp, max_model_len))
    extra_names = check_extra_args(engine.extra_args, flags, target)
    _check_between([flag for flag, _, _ in wanted] + extra_names, flags, target)
    warnings = _check_choices(engine, extra_names, flags, target)
    for flag, value, field in wanted:
        if not flags.accepts(flag):
            if flag in REQUIRED_FLAGS:
                raise PlanError(field, f"vLLM {target} does not accept {flag}, which the operator needs")
            warnings.append(f"{field} ignored: vLLM {target} has no {flag}")
            continue
        args.append(flag)
        if value is not None:
            args.append(value)
    args.extend(engine.extra_args)
    return args, warnings

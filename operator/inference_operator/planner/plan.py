"""spec -> launch plan: GPUs, parallelism, memory fit, vLLM version and arguments (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..api import InferenceServer, InferenceServerSpec, MemoryEstimate, PlanStatus
from .engine import Engine, chunked_prefill, engine_for, model_context
from .errors import PlanError
from .flag_catalog import FlagCatalog
from .gpu_rules import GpuFacts, dtype_for_gpu, gpu_facts_for
from .inputs import DEFAULT_MAX_GPUS_PER_NODE, NO_FACTS, ClusterFacts, Defaults
from .memory import (
    DRIVER_RESERVED_GIB,
    Fit,
    Parallelism,
    WeightFormat,
    estimate,
    kv_bytes_per_element,
    non_torch_gib,
    weight_format,
    weight_gib,
)
from .model_catalog import ModelSize, inferred_quantization, lookup
from .ollama import OllamaPlan, ollama_plan, served_id
from .release import resolve_release
from .versions import Release
from .vllm_args import build_args

MIN_STARTUP_SECONDS = 600
MAX_STARTUP_SECONDS = 14400
UNSIZED_STARTUP_SECONDS = 1800
# Tensor parallel sizes listed in an error when the nodes' GPU count is unknown.
MAX_LISTED_TENSOR_PARALLEL = 64
ALLOW_LONG_MAX_MODEL_LEN = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
# The planner lowers an unset maxModelLen to what fits, but not below this.
MIN_LOWERED_LEN = 256


@dataclass(frozen=True)
class LaunchPlan:
    name: str
    namespace: str
    spec: InferenceServerSpec
    served_name: str
    image: str
    vllm_version: str
    flag_catalog: str
    gpus: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int | None  # effective: the flag's value, else the model's context when known
    args: tuple[str, ...]
    gpu_memory_gib: float | None
    gpu_memory_source: str
    memory: MemoryEstimate | None
    sizing: str
    startup_seconds: int
    ollama: OllamaPlan | None
    warnings: tuple[str, ...] = field(default=())
    engine: str = "V1"  # the vLLM engine generation the release runs: V0 or V1
    dtype: str = "auto"  # the --dtype rendered (half where the GPU cannot run the checkpoint's bfloat16)
    compute_capability: str | None = None

    def status(self) -> PlanStatus:
        return PlanStatus(
            vllm_version=self.vllm_version,
            flag_catalog=self.flag_catalog,
            gpus=self.gpus,
            tensor_parallel_size=self.tensor_parallel_size,
            pipeline_parallel_size=self.pipeline_parallel_size,
            max_model_len=self.max_model_len,
            gpu_memory_gib=self.gpu_memory_gib,
            gpu_memory_source=self.gpu_memory_source,
            memory=self.memory,
            sizing=self.sizing,
            warnings=list(self.warnings),
        )


def _parse_parameters(text: str) -> float:
    """'8B' -> 8.0, '494M' -> 0.494, '7241732096' -> 7.24 (billions)."""
    scale = {"K": 1e-6, "M": 1e-3, "B": 1.0, "T": 1e3}
    if text[-1] in scale:
        return float(text[:-1]) * scale[text[-1]]
    return float(text) / 1e9


def resolve_size(spec: InferenceServerSpec) -> tuple[ModelSize | None, str]:
    """The model's sizes and where they came from."""
    known = lookup(spec.model.name)
    override = spec.model.architecture
    if override is None:
        if known is None:
            return None, f"unknown model {spec.model.name}: set spec.model.architecture to enable the memory check"
        return known, f"catalog ({known.name})"
    base = known or ModelSize(name=spec.model.name)
    merged = replace(
        base,
        parameters_b=_parse_parameters(override.parameters) if override.parameters else base.parameters_b,
        layers=override.layers or base.layers,
        attention_heads=override.attention_heads or base.attention_heads,
        kv_heads=override.kv_heads or base.kv_heads,
        head_dim=override.head_dim or base.head_dim,
        max_context=override.max_context or base.max_context,
    )
    source = f"catalog ({known.name}) with spec.model.architecture" if known else "spec.model.architecture"
    if not merged.complete():
        missing = [
            name
            for name, value in (
                ("parameters", merged.parameters_b),
                ("layers", merged.layers),
                ("attentionHeads", merged.attention_heads),
                ("kvHeads", merged.kv_heads),
                ("headDim", merged.head_dim),
            )
            if value is None
        ]
        return merged, f"{source}, incomplete (missing {', '.join(missing)}): memory check skipped"
    return merged, source


@dataclass(frozen=True)
class _Sizing:
    """What a memory estimate depends on besides the parallelism."""

    size: ModelSize | None
    weights: WeightFormat | None
    activation_bytes: float
    engine: Engine
    chunked: bool
    gpu: GpuFacts


def _fit_for(sizing: _Sizing, spec: InferenceServerSpec, tp: int, pp: int) -> Fit | None:
    size, gpu_memory = sizing.size, sizing.gpu.memory_gib
    if size is None or not size.complete() or gpu_memory is None or sizing.weights is None:
        return None
    return estimate(
        size,
        parallel=Parallelism(tp, pp),
        weights=sizing.weights,
        kv_bytes=kv_bytes_per_element(spec.engine.kv_cache_dtype, spec.engine.dtype),
        activation_bytes=sizing.activation_bytes,
        gpu_memory_gib=gpu_memory,
        utilization=spec.engine.gpu_memory_utilization,
        engine=sizing.engine,
        chunked=sizing.chunked,
        max_num_batched_tokens=spec.engine.max_num_batched_tokens,
    )


def _free_after_weights(sizing: _Sizing, spec: InferenceServerSpec, tp: int, pp: int) -> float | None:
    """GiB per GPU left after the weights and non-torch memory, when only the parameter count is known."""
    size, gpu_memory = sizing.size, sizing.gpu.memory_gib
    if size is None or size.parameters_b is None or gpu_memory is None or sizing.weights is None:
        return None
    available = max(0.0, gpu_memory - DRIVER_RESERVED_GIB) * spec.engine.gpu_memory_utilization
    return available - weight_gib(size, sizing.weights, tp * pp) - non_torch_gib(tp)


def _tp_divides(heads: int | None, kv_heads: int | None, tp: int) -> bool:
    """vLLM's rule: TP divides the attention heads, and the KV heads divide by TP or TP by the KV heads."""
    if heads is not None and heads % tp != 0:
        return False
    return kv_heads is None or kv_heads % tp == 0 or tp % kv_heads == 0


def valid_tensor_parallel_sizes(size: ModelSize | None, limit: int) -> list[int]:
    heads = size.attention_heads if size else None
    kv_heads = size.kv_heads if size else None
    return [t for t in range(1, limit + 1) if _tp_divides(heads, kv_heads, t)]


def _check_tensor_parallel(size: ModelSize | None, tp: int, pp: int, field_name: str, gpu: GpuFacts) -> None:
    if gpu.max_per_node is not None and tp * pp > gpu.max_per_node:
        raise PlanError(
            field_name,
            f"a replica needs {tp * pp} GPUs (tensorParallelSize {tp} x pipelineParallelSize {pp}), more than the "
            f"{gpu.max_per_node} GPUs of the largest eligible node; a replica runs on one node",
            reason="Unschedulable",
        )
    heads = size.attention_heads if size else None
    kv_heads = size.kv_heads if size else None
    if _tp_divides(heads, kv_heads, tp):
        return
    reasons = []
    if heads is not None and heads % tp != 0:
        reasons.append(f"does not divide the model's {heads} attention heads")
    if kv_heads is not None and kv_heads % tp != 0 and tp % kv_heads != 0:
        reasons.append(f"neither divides the model's {kv_heads} KV heads nor is a multiple of them")
    limit = max(1, (gpu.max_per_node or MAX_LISTED_TENSOR_PARALLEL) // pp)
    valid = ", ".join(str(t) for t in valid_tensor_parallel_sizes(size, limit))
    where = f" on a node of {gpu.max_per_node} GPUs" if gpu.max_per_node is not None else ""
    raise PlanError(field_name, f"tensor parallel size {tp} {' and '.join(reasons)}; valid sizes{where} are {valid}")


def choose_parallelism(
    spec: InferenceServerSpec, sizing: _Sizing, target_len: int | None
) -> tuple[int, int, list[str]]:
    """(tensor parallel, pipeline parallel, warnings)."""
    size, gpu = sizing.size, sizing.gpu
    pp = spec.engine.pipeline_parallel_size
    tp_spec = spec.engine.tensor_parallel_size
    gpus = spec.resources.gpus
    if size and size.layers is not None and pp > size.layers:
        raise PlanError("spec.engine.pipelineParallelSize", f"{pp} stages exceed the model's {size.layers} layers")
    if isinstance(tp_spec, int):
        if gpus is not None and tp_spec * pp != gpus:
            raise PlanError(
                "spec.resources.gpus",
                f"tensorParallelSize {tp_spec} x pipelineParallelSize {pp} = {tp_spec * pp}, not {gpus} GPUs",
            )
        _check_tensor_parallel(size, tp_spec, pp, "spec.engine.tensorParallelSize", gpu)
        return tp_spec, pp, []
    if gpus is not None:
        if gpus % pp != 0:
            raise PlanError(
                "spec.resources.gpus", f"{gpus} GPUs cannot be split into {pp} pipeline stages of equal size"
            )
        _check_tensor_parallel(size, gpus // pp, pp, "spec.resources.gpus", gpu)
        return gpus // pp, pp, []
    per_node = gpu.max_per_node or DEFAULT_MAX_GPUS_PER_NODE
    if pp > per_node:
        raise PlanError(
            "spec.engine.pipelineParallelSize",
            f"{pp} stages need {pp} GPUs, more than the {per_node} GPUs of the largest eligible node",
            reason="Unschedulable",
        )
    candidates = valid_tensor_parallel_sizes(size, max(1, per_node // pp))
    fits = [(t, _fit_for(sizing, spec, t, pp)) for t in candidates]
    if all(f is None for _, f in fits):
        for t in candidates:
            free = _free_after_weights(sizing, spec, t, pp)
            if free is not None and free > 0:
                return (
                    t,
                    pp,
                    [f"tensorParallelSize auto chose {t} from the weights alone: the model's sizes are incomplete"],
                )
        return 1, pp, ["tensorParallelSize auto chose 1: the model or GPU memory size is unknown"]
    for t, fit in fits:
        if fit is not None and (fit.fits(target_len) if target_len else fit.weights_fit()):
            return t, pp, []
    for t, fit in fits:
        if fit is not None and fit.weights_fit():
            return t, pp, []
    largest, fit = fits[-1]
    assert fit is not None
    raise PlanError(
        "spec.engine.tensorParallelSize",
        f"the model does not fit on up to {largest} GPUs per node (the largest tensor parallel size its heads "
        f"allow): it needs {fit.weights_gib:.1f} GiB of weights per GPU plus {fit.overhead_gib(1):.1f} GiB "
        f"overhead, and {fit.available_gib:.1f} GiB is available; use quantization, pipeline parallelism or GPUs "
        "with more memory",
    )


def _env(spec: InferenceServerSpec) -> list[tuple[str, str | None]]:
    return [(e.name, e.value) for e in spec.engine.env]


def _env_true(spec: InferenceServerSpec, name: str) -> bool:
    """As vLLM reads its switches: 1 or true; a value from a Secret or ConfigMap is taken as set."""
    for e in spec.engine.env:
        if e.name == name:
            return e.value_from is not None or (e.value or "").strip().lower() in ("1", "true")
    return False


def _startup_seconds(size: ModelSize | None, weights: WeightFormat | None) -> int:
    if size is None or size.parameters_b is None:
        return UNSIZED_STARTUP_SECONDS
    total_gib = weight_gib(size, weights or WeightFormat(None, 16.0, "assumed"), 1)
    # Downloading and loading weights dominates start-up: budget about 10 s per GiB.
    return int(min(max(MIN_STARTUP_SECONDS, 300 + 10 * total_gib), MAX_STARTUP_SECONDS))


def _memory_estimate(fit: Fit, tokens: int) -> MemoryEstimate:
    kv = fit.kv_sequence_gib(tokens)
    return MemoryEstimate(
        weights_gib=round(fit.weights_gib, 2),
        kv_cache_per_sequence_gib=round(kv, 2),
        overhead_gib=round(fit.overhead_gib(tokens), 2),
        required_gib=round(fit.weights_gib + fit.overhead_gib(tokens) + kv, 2),
        available_gib=round(fit.available_gib, 2),
        max_sequences=fit.max_sequences(tokens),
    )


def plan(
    server: InferenceServer,
    catalog: FlagCatalog,
    facts: ClusterFacts = NO_FACTS,
    defaults: Defaults | None = None,
) -> LaunchPlan:
    """Decide everything about a server's pods; raise PlanError naming the field when it cannot be served."""
    defaults = defaults or Defaults()
    spec = server.spec
    image = spec.engine.image or defaults.vllm_image
    version, flags, warnings = resolve_release(spec, image, catalog)
    release = Release(version)
    size, sizing_text = resolve_size(spec)
    gpu = gpu_facts_for(spec, facts)
    engine = engine_for(release, _env(spec), gpu.capability)
    weights = weight_format(spec.engine.dtype, spec.engine.quantization, inferred_quantization(spec.model.name))
    if weights is not None and weights.source == "model id":
        sizing_text += f"; weights sized as {weights.describe()}"
    dtype_flag, dtype_warnings = dtype_for_gpu(spec, size, weights, engine, gpu)
    warnings.extend(dtype_warnings)

    context, default_len = model_context(size, release)
    requested_len = spec.engine.max_model_len
    if requested_len is not None and context is not None and requested_len > context:
        if not _env_true(spec, ALLOW_LONG_MAX_MODEL_LEN):
            raise PlanError(
                "spec.engine.maxModelLen",
                f"{requested_len} tokens exceed the model's context of {context} tokens (as vLLM {version} derives "
                f"it), and vLLM refuses to start; lower it, or set {ALLOW_LONG_MAX_MODEL_LEN}=1 in spec.engine.env "
                "if the model really handles longer sequences",
            )
        warnings.append(
            f"spec.engine.maxModelLen {requested_len} exceeds the model's context of {context} tokens "
            f"({ALLOW_LONG_MAX_MODEL_LEN} is set)"
        )
    target_len = requested_len or default_len
    activation_bytes = 4.0 if spec.engine.dtype in ("float", "float32") else 2.0

    def sizing_for(length: int | None) -> _Sizing:
        return _Sizing(
            size=size,
            weights=weights,
            activation_bytes=activation_bytes,
            engine=engine,
            chunked=chunked_prefill(engine, spec.engine.extra_args, length),
            gpu=gpu,
        )

    sizing = sizing_for(target_len)
    tp, pp, parallel_warnings = choose_parallelism(spec, sizing, target_len)
    warnings.extend(parallel_warnings)
    fit = _fit_for(sizing, spec, tp, pp)
    flag_len = requested_len
    memory: MemoryEstimate | None = None
    if fit is not None:
        if not fit.weights_fit():
            raise PlanError(
                "spec.resources.gpus",
                f"the model does not fit: {fit.weights_gib:.1f} GiB of weights per GPU "
                f"({weights.describe() if weights else 'unknown format'}) "
                f"plus {fit.overhead_gib(1):.1f} GiB overhead exceed the {fit.available_gib:.1f} GiB available "
                f"(({gpu.memory_gib:g} - {DRIVER_RESERVED_GIB:g} reserved by the driver) GiB x gpuMemoryUtilization "
                f"{spec.engine.gpu_memory_utilization:g}) with tensorParallelSize {tp} and pipelineParallelSize {pp}",
            )
        if target_len is not None and not fit.fits(target_len):
            longest = fit.longest_sequence(target_len)
            if requested_len is not None or longest < MIN_LOWERED_LEN:
                hint = (
                    "; this V0 release profiles a whole sequence at start-up: --enable-chunked-prefill in "
                    "spec.engine.extraArgs profiles 512 tokens instead"
                    if not engine.v1 and not sizing.chunked
                    else ""
                )
                raise PlanError(
                    "spec.engine.maxModelLen",
                    f"one sequence of {target_len} tokens needs {fit.kv_sequence_gib(target_len):.2f} GiB of KV "
                    f"cache per GPU, but {fit.free_for_kv_gib(target_len):.2f} GiB is left after "
                    f"{fit.weights_gib:.2f} GiB of weights and {fit.overhead_gib(target_len):.2f} GiB of "
                    f"activations and buffers (vLLM {version}, {engine.label} engine); the longest that fits is "
                    f"{longest} tokens{hint}",
                )
            shorter = sizing_for(longest)
            if shorter.chunked != sizing.chunked:
                refit = _fit_for(shorter, spec, tp, pp)
                assert refit is not None
                fit, sizing = refit, shorter
                longest = fit.longest_sequence(longest)
                if longest < MIN_LOWERED_LEN:
                    raise PlanError(
                        "spec.engine.maxModelLen",
                        f"after the weights and a whole-sequence profiling step, fewer than {MIN_LOWERED_LEN} tokens "
                        f"of KV cache fit per GPU (vLLM {version}, {engine.label} engine)",
                    )
            warnings.append(
                f"maxModelLen lowered from the model's {target_len} tokens to {longest} so that its KV cache fits"
            )
            target_len = longest
            flag_len = longest
        if target_len is not None:
            memory = _memory_estimate(fit, target_len)
    elif (free := _free_after_weights(sizing, spec, tp, pp)) is not None and free <= 0:
        assert size is not None
        assert weights is not None
        per_gpu = weight_gib(size, weights, tp * pp)
        raise PlanError(
            "spec.resources.gpus",
            f"the model does not fit: {per_gpu:.1f} GiB of weights per GPU ({weights.describe()}) and buffers exceed "
            f"the {free + per_gpu:.1f} GiB left of {gpu.memory_gib:g} GiB GPUs at gpuMemoryUtilization "
            f"{spec.engine.gpu_memory_utilization:g} with tensorParallelSize {tp} and pipelineParallelSize {pp}",
        )
    elif size is not None and size.complete() and gpu.memory_gib is not None:
        sizing_text += (
            f"; memory check skipped: bit width of {spec.engine.quantization} weights depends on the checkpoint"
        )
    if flag_len is None and target_len is not None and target_len != context:
        warnings.append(f"vLLM {version} defaults maxModelLen to {target_len} tokens for this model")

    _check_batched_tokens(spec, engine, sizing.chunked, target_len, version)

    served_name, name_warnings = served_id(spec)
    warnings.extend(name_warnings)
    engine_spec = spec.engine if dtype_flag is None else spec.engine.model_copy(update={"dtype": dtype_flag})
    args, arg_warnings = build_args(
        spec.model,
        engine_spec,
        served_name=served_name,
        tp=tp,
        pp=pp,
        max_model_len=flag_len,
        flags=flags,
        target=version,
    )
    warnings.extend(arg_warnings)
    startup = _startup_seconds(size, weights)
    if spec.rollout.timeout_seconds < startup:
        warnings.append(
            f"rollout.timeoutSeconds {spec.rollout.timeout_seconds} is shorter than the {startup} s start-up "
            "budget of this model: a new revision may be rolled back before it loads"
        )
    return LaunchPlan(
        name=server.metadata.name,
        namespace=server.metadata.namespace,
        spec=spec,
        served_name=served_name,
        image=image,
        vllm_version=version,
        flag_catalog=flags.release.text,
        gpus=tp * pp,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        max_model_len=target_len,
        args=tuple(args),
        gpu_memory_gib=gpu.memory_gib,
        gpu_memory_source=gpu.memory_source,
        memory=memory,
        sizing=sizing_text,
        startup_seconds=startup,
        ollama=ollama_plan(spec, served_name, defaults, target_len),
        warnings=tuple(warnings),
        engine=engine.label,
        dtype=dtype_flag or spec.engine.dtype,
        compute_capability=str(gpu.capability) if gpu.capability else None,
    )


def _check_batched_tokens(
    spec: InferenceServerSpec, engine: Engine, chunked: bool, max_model_len: int | None, version: str
) -> None:
    batched = spec.engine.max_num_batched_tokens
    if engine.v1 or chunked or batched is None or max_model_len is None or batched >= max_model_len:
        return
    raise PlanError(
        "spec.engine.maxNumBatchedTokens",
        f"{batched} is below maxModelLen {max_model_len}: vLLM {version} (V0 engine) refuses to start unless one "
        "step holds a whole sequence; raise it to at least maxModelLen, lower maxModelLen, or add "
        "--enable-chunked-prefill to spec.engine.extraArgs",
    )

"""spec -> launch plan: GPUs, parallelism, memory fit, vLLM version and arguments (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..api import InferenceServer, InferenceServerSpec, MemoryEstimate, OllamaSpec, PlanStatus
from .errors import PlanError
from .flag_catalog import FlagCatalog
from .inputs import DEFAULT_MAX_GPUS_PER_NODE, NO_FACTS, ClusterFacts, Defaults
from .memory import Fit, estimate, kv_bytes_per_element, weight_bytes_per_parameter
from .model_catalog import ModelSize, lookup
from .release import resolve_release
from .vllm_args import build_args

MIN_STARTUP_SECONDS = 600
MAX_STARTUP_SECONDS = 14400
UNSIZED_STARTUP_SECONDS = 1800


@dataclass(frozen=True)
class OllamaPlan:
    image: str
    model: str
    served_name: str
    mode: str
    activate_after_seconds: int
    recover_after_seconds: int
    spec: OllamaSpec


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
    merged = ModelSize(
        name=base.name,
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


def _fit_for(
    size: ModelSize | None, spec: InferenceServerSpec, tp: int, pp: int, gpu_memory_gib: float | None
) -> Fit | None:
    if size is None or not size.complete() or gpu_memory_gib is None:
        return None
    weight_bytes = weight_bytes_per_parameter(spec.engine.dtype, spec.engine.quantization)
    if weight_bytes is None:
        return None
    return estimate(
        size,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        weight_bytes=weight_bytes,
        kv_bytes=kv_bytes_per_element(spec.engine.kv_cache_dtype, spec.engine.dtype),
        gpu_memory_gib=gpu_memory_gib,
        utilization=spec.engine.gpu_memory_utilization,
    )


def _check_divides(size: ModelSize | None, tp: int, field_name: str) -> None:
    heads = size.attention_heads if size else None
    if heads is not None and heads % tp != 0:
        raise PlanError(
            field_name,
            f"tensor parallel size {tp} does not divide the model's {heads} attention heads; "
            f"valid sizes are {', '.join(str(d) for d in range(1, heads + 1) if heads % d == 0 and d <= 64)}",
        )


def choose_parallelism(
    spec: InferenceServerSpec,
    size: ModelSize | None,
    gpu_memory_gib: float | None,
    target_len: int | None,
    facts: ClusterFacts,
) -> tuple[int, int, list[str]]:
    """(tensor parallel, pipeline parallel, warnings)."""
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
        _check_divides(size, tp_spec, "spec.engine.tensorParallelSize")
        return tp_spec, pp, []
    if gpus is not None:
        if gpus % pp != 0:
            raise PlanError(
                "spec.resources.gpus", f"{gpus} GPUs cannot be split into {pp} pipeline stages of equal size"
            )
        _check_divides(size, gpus // pp, "spec.resources.gpus")
        return gpus // pp, pp, []
    limit = max(1, (facts.max_gpus_per_node or DEFAULT_MAX_GPUS_PER_NODE))
    heads = size.attention_heads if size else None
    candidates = [t for t in range(1, limit + 1) if heads is None or heads % t == 0]
    fits = [(t, _fit_for(size, spec, t, pp, gpu_memory_gib)) for t in candidates]
    if all(f is None for _, f in fits):
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
        f"the model does not fit on up to {largest} GPUs per node: it needs {fit.weights_gib:.1f} GiB of weights "
        f"per GPU plus {fit.overhead_gib:.1f} GiB overhead, and {fit.available_gib:.1f} GiB is available; "
        "use quantization, pipeline parallelism or GPUs with more memory",
    )


def _memory_source(spec: InferenceServerSpec, facts: ClusterFacts) -> tuple[float | None, str]:
    if spec.resources.gpu_memory_gib is not None:
        return spec.resources.gpu_memory_gib, "spec.resources.gpuMemoryGiB"
    if facts.gpu_memory_gib is not None:
        return facts.gpu_memory_gib, facts.gpu_memory_source or "cluster nodes"
    return None, "unknown: set spec.resources.gpuMemoryGiB or label GPU nodes with nvidia.com/gpu.memory"


def _startup_seconds(size: ModelSize | None, spec: InferenceServerSpec) -> int:
    if size is None or size.parameters_b is None:
        return UNSIZED_STARTUP_SECONDS
    weight_bytes = weight_bytes_per_parameter(spec.engine.dtype, spec.engine.quantization) or 2.0
    total_gib = size.parameters_b * 1e9 * weight_bytes / 2**30
    # Downloading and loading weights dominates start-up: budget about 10 s per GiB.
    return int(min(max(MIN_STARTUP_SECONDS, 300 + 10 * total_gib), MAX_STARTUP_SECONDS))


def _ollama(spec: InferenceServerSpec, served_name: str, defaults: Defaults) -> OllamaPlan | None:
    ollama = spec.fallback.ollama if spec.fallback else None
    if ollama is None or not ollama.enabled:
        return None
    if not ollama.model:
        raise PlanError("spec.fallback.ollama.model", "is required when the Ollama fallback is enabled")
    return OllamaPlan(
        image=ollama.image or defaults.ollama_image,
        model=ollama.model,
        served_name=served_name,
        mode=ollama.mode,
        activate_after_seconds=ollama.activate_after_seconds,
        recover_after_seconds=ollama.recover_after_seconds,
        spec=ollama,
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
    size, sizing = resolve_size(spec)
    gpu_memory_gib, memory_source = _memory_source(spec, facts)
    context = size.max_context if size else None
    requested_len = spec.engine.max_model_len
    if requested_len is not None and context is not None and requested_len > context:
        warnings.append(f"spec.engine.maxModelLen {requested_len} exceeds the model's context of {context} tokens")
    target_len = requested_len or context

    tp, pp, parallel_warnings = choose_parallelism(spec, size, gpu_memory_gib, target_len, facts)
    warnings.extend(parallel_warnings)
    fit = _fit_for(size, spec, tp, pp, gpu_memory_gib)
    flag_len = requested_len
    memory: MemoryEstimate | None = None
    if fit is not None:
        if not fit.weights_fit():
            raise PlanError(
                "spec.resources.gpus",
                f"the model does not fit: {fit.weights_gib:.1f} GiB of weights per GPU plus "
                f"{fit.overhead_gib:.1f} GiB overhead exceed the {fit.available_gib:.1f} GiB available "
                f"({gpu_memory_gib:g} GiB x gpuMemoryUtilization {spec.engine.gpu_memory_utilization:g}) "
                f"with tensorParallelSize {tp} and pipelineParallelSize {pp}",
            )
        if target_len is not None and not fit.fits(target_len):
            longest = fit.longest_sequence()
            if requested_len is not None or longest < 256:
                raise PlanError(
                    "spec.engine.maxModelLen",
                    f"one sequence of {target_len} tokens needs {fit.kv_sequence_gib(target_len):.1f} GiB of KV "
                    f"cache per GPU, but {fit.free_for_kv_gib():.1f} GiB is left after the weights; "
                    f"the longest that fits is {longest} tokens",
                )
            warnings.append(
                f"maxModelLen lowered from the model's {target_len} tokens to {longest} so that its KV cache fits"
            )
            target_len = longest
            flag_len = longest
        if target_len is not None:
            memory = MemoryEstimate(
                weights_gib=round(fit.weights_gib, 2),
                kv_cache_per_sequence_gib=round(fit.kv_sequence_gib(target_len), 2),
                overhead_gib=fit.overhead_gib,
                required_gib=round(fit.weights_gib + fit.overhead_gib + fit.kv_sequence_gib(target_len), 2),
                available_gib=round(fit.available_gib, 2),
                max_sequences=fit.max_sequences(target_len),
            )
    elif size is not None and size.complete() and gpu_memory_gib is not None:
        sizing += f"; memory check skipped: bit width of {spec.engine.quantization} weights depends on the checkpoint"

    served_name = spec.model.served_name or spec.model.name
    args, arg_warnings = build_args(
        spec.model,
        spec.engine,
        served_name=served_name,
        tp=tp,
        pp=pp,
        max_model_len=flag_len,
        flags=flags,
        target=version,
    )
    warnings.extend(arg_warnings)
    startup = _startup_seconds(size, spec)
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
        gpu_memory_gib=gpu_memory_gib,
        gpu_memory_source=memory_source,
        memory=memory,
        sizing=sizing,
        startup_seconds=startup,
        ollama=_ollama(spec, served_name, defaults),
        warnings=tuple(warnings),
    )

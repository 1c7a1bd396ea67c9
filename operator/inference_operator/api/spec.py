"""What a user may declare in an InferenceServer's spec."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict, JsonValue

from .types import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    ENV_NAME,
    ApiModel,
    PositiveIntOrAuto,
    PreservedObject,
    Quantity,
)


def _rules(*rules: tuple[str, str, str]) -> JsonDict:
    """CEL validations as (rule, message, fieldPath); fieldPath may be empty."""
    out: list[JsonValue] = []
    for rule, message, path in rules:
        item: JsonDict = {"rule": rule, "message": message}
        if path:
            item["fieldPath"] = path
        out.append(item)
    return {"x-kubernetes-validations": out}


def _validated(*rules: tuple[str, str, str]) -> ConfigDict:
    config = ApiModel.model_config.copy()
    config["json_schema_extra"] = _rules(*rules)
    return config


def _obj_default() -> JsonDict:
    return {"default": {}}


class SecretKeyRef(ApiModel):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="Secret name.")
    key: str = Field(default="token", min_length=1, max_length=253, description="Key in the Secret.")


class Architecture(ApiModel):
    """Sizes of a model the catalog does not know, or corrections to one it does."""

    model_config = _validated(
        (
            "!has(self.kvHeads) || !has(self.attentionHeads) || self.attentionHeads % self.kvHeads == 0",
            "attentionHeads must be a multiple of kvHeads",
            ".kvHeads",
        )
    )

    parameters: str | None = Field(
        default=None,
        pattern=r"^[0-9]+(\.[0-9]+)?[KMBT]?$",
        max_length=16,
        description="Parameter count, for example 8B, 70.6B, 494M or 7241732096.",
    )
    layers: int | None = Field(default=None, ge=1, le=1024, description="Transformer layers.")
    attention_heads: int | None = Field(default=None, ge=1, le=1024, description="Attention heads.")
    kv_heads: int | None = Field(default=None, ge=1, le=1024, description="Key/value heads (GQA).")
    head_dim: int | None = Field(default=None, ge=1, le=4096, description="Dimension of one head.")
    max_context: int | None = Field(default=None, ge=1, description="Longest context the model supports.")


class ModelSpec(ApiModel):
    name: str = Field(
        min_length=1,
        max_length=512,
        pattern=r"^\S+$",
        description="Hugging Face model id (org/name) or a path inside the pod, such as /models/llama.",
    )
    revision: str | None = Field(default=None, max_length=128, description="Model revision: branch, tag or commit.")
    served_name: str | None = Field(
        default=None,
        max_length=256,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
        description="The OpenAI model id clients send; defaults to the model name. Ollama serves the same id.",
    )
    trust_remote_code: bool = Field(default=False, description="Allow the model's own Python code to run.")
    token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret holding a Hugging Face token for gated models."
    )
    architecture: Architecture | None = Field(
        default=None, description="Sizes that override or extend the planner's model catalog."
    )


class SecretKeySelector(ApiModel):
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)
    optional: bool | None = None


class FieldSelector(ApiModel):
    field_path: str = Field(min_length=1, max_length=256)


class EnvVarSource(ApiModel):
    model_config = _validated(
        (
            "[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef)].filter(x, x).size() == 1",
            "set exactly one of secretKeyRef, configMapKeyRef or fieldRef",
            "",
        )
    )

    secret_key_ref: SecretKeySelector | None = None
    config_map_key_ref: SecretKeySelector | None = None
    field_ref: FieldSelector | None = None


class EnvVar(ApiModel):
    model_config = _validated(("!(has(self.value) && has(self.valueFrom))", "set value or valueFrom, not both", ""))

    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME)
    value: str | None = Field(default=None, max_length=32768)
    value_from: EnvVarSource | None = None


QuantizationMethod = Literal[
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "marlin",
    "bitsandbytes",
    "fp8",
    "fbgemm_fp8",
    "modelopt",
    "compressed-tensors",
    "experts_int8",
    "gguf",
]


class EngineSpec(ApiModel):
    model_config = _validated(
        (
            "!has(self.maxNumBatchedTokens) || !has(self.maxNumSeqs) || self.maxNumBatchedTokens >= self.maxNumSeqs",
            "maxNumBatchedTokens must be at least maxNumSeqs",
            ".maxNumBatchedTokens",
        ),
        (
            "!has(self.extraArgs) || size(self.extraArgs) == 0 || self.extraArgs[0].startsWith('--')",
            "extraArgs must start with a flag, such as --max-log-len",
            ".extraArgs",
        ),
    )

    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="vLLM OpenAI server image, started as `vllm serve MODEL ...` (the image's entrypoint is not used); "
        "defaults to the operator's configured image.",
    )
    version: str | None = Field(
        default=None,
        pattern=r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.-]?[A-Za-z0-9]+)*$",
        max_length=64,
        description="vLLM version inside the image; read from the image tag when not set.",
    )
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = Field(
        default="auto", description="Weights and activations data type."
    )
    quantization: QuantizationMethod | None = Field(default=None, description="Weight quantization method.")
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        default="auto", description="KV cache data type."
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Fraction of each GPU's memory vLLM may use."
    )
    tensor_parallel_size: PositiveIntOrAuto = Field(
        default="auto", description="GPUs a layer is split over, or auto: the smallest size that fits."
    )
    pipeline_parallel_size: int = Field(default=1, ge=1, le=64, description="Pipeline stages.")
    max_model_len: int | None = Field(
        default=None, ge=16, description="Longest sequence (prompt and output) in tokens."
    )
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536, description="Sequences batched at once.")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, le=4194304, description="Tokens processed in one scheduler step."
    )
    enable_prefix_caching: bool | None = Field(default=None, description="Reuse KV cache across shared prefixes.")
    enforce_eager: bool = Field(default=False, description="Disable CUDA graphs (less memory, slower).")
    swap_space: int | None = Field(
        default=None, ge=0, le=1024, description="CPU swap space per GPU in GiB (older vLLM releases)."
    )
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="More vLLM flags, checked against the flags the image's vLLM version accepts.",
    )
    env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Extra environment variables.")


class ResourcesSpec(ApiModel):
    gpus: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="GPUs per replica; defaults to tensorParallelSize x pipelineParallelSize.",
    )
    gpu_resource_name: str = Field(
        default="nvidia.com/gpu",
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="Extended resource name of the GPUs.",
    )
    gpu_memory_gib: float | None = Field(
        default=None,
        alias="gpuMemoryGiB",
        gt=0,
        le=4096,
        description="Memory of one GPU in GiB; read from the nodes' GPU feature discovery labels when not set.",
    )
    cpu: Quantity | None = Field(default=None, description="CPU request per replica.")
    memory: Quantity | None = Field(default=None, description="Memory request and limit per replica.")
    shared_memory: Quantity = Field(default="16Gi", description="Size of the /dev/shm memory volume.")


class CacheSpec(ApiModel):
    model_config = _validated(
        (
            "has(self.size) != has(self.existingClaim)",
            "set exactly one of size (a new claim) or existingClaim",
            "",
        )
    )

    size: Quantity | None = Field(default=None, description="Size of the model cache claim the operator creates.")
    existing_claim: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Use this PersistentVolumeClaim instead of creating one; it is never deleted.",
    )
    storage_class_name: str | None = Field(default=None, max_length=253)
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"] = Field(default="ReadWriteOnce")
    retain: bool = Field(default=True, description="Keep the claim when the InferenceServer is deleted (the default).")


class Toleration(ApiModel):
    model_config = _validated(
        ("self.operator != 'Exists' || !has(self.value)", "a toleration with operator Exists takes no value", "")
    )

    key: str | None = Field(default=None, max_length=317)
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = Field(default=None, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class SchedulingSpec(ApiModel):
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    affinity: PreservedObject | None = Field(default=None, description="A Kubernetes Affinity, as in a pod spec.")
    priority_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    runtime_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)


class RolloutSpec(ApiModel):
    strategy: Literal["Auto", "BlueGreen", "Recreate"] = Field(
        default="Auto",
        description=(
            "BlueGreen starts the new revision beside the old one; Recreate stops the old one first; "
            "Auto is BlueGreen, bridged by the Ollama fallback when GPUs are short."
        ),
    )
    timeout_seconds: int = Field(
        default=1800, ge=30, le=86400, description="How long a new revision may take to become ready."
    )
    drain_seconds: int = Field(
        default=15,
        ge=0,
        le=3600,
        description=(
            "After traffic leaves a backend (switch, rollback, bridge, recovery) and its endpoints are gone, how "
            "long it keeps running before it is removed, so that every node's proxy has moved on. Pods also wait "
            "this long in their preStop hook before they are stopped."
        ),
    )
    stream_grace_seconds: int = Field(
        default=120,
        ge=0,
        le=86400,
        description="How long a stopping pod may take to finish the requests and streams it is serving.",
    )


class OllamaResources(ApiModel):
    cpu: Quantity | None = None
    memory: Quantity | None = None
    gpus: int = Field(default=0, ge=0, le=8)


class OllamaStoreSpec(ApiModel):
    enabled: bool = Field(
        default=True,
        description="Keep Ollama's models on a retained claim; false keeps them in the pod (an emptyDir), for "
        "clusters without a storage class, at the price of a new pull on every start.",
    )
    size: Quantity | None = Field(
        default=None,
        description="Size of the claim that keeps Ollama's models across restarts; from the model's tag when not set "
        "(its 4-bit file and 2Gi, or 20Gi when the tag names no size).",
    )
    storage_class_name: str | None = Field(default=None, max_length=253)


class PodSecuritySpec(ApiModel):
    """Who the containers run as. They always run without privilege escalation, with every capability dropped
    and the runtime's default seccomp profile (the Pod Security "baseline" level and more)."""

    run_as_non_root: bool = Field(
        default=False,
        description="Run as a non-root user; only for images that support it (the vllm/vllm-openai and "
        "ollama/ollama images run as root).",
    )
    run_as_user: int | None = Field(
        default=None, ge=1, le=2147483647, description="User id with runAsNonRoot; defaults to 1000."
    )
    fs_group: int | None = Field(
        default=None, ge=1, le=2147483647, description="Group that owns the mounted volumes; defaults to runAsUser."
    )


class OllamaSpec(ApiModel):
    model_config = _validated(
        ("!self.enabled || has(self.model)", "model is required when the Ollama fallback is enabled", ".model")
    )

    enabled: bool = True
    model: str | None = Field(
        default=None,
        max_length=256,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
        description="Ollama model to pull, such as llama3.2:1b.",
    )
    image: str | None = Field(default=None, max_length=512, description="Defaults to the operator's Ollama image.")
    mode: Literal["Standby", "OnDemand"] = Field(
        default="Standby",
        description="Standby keeps Ollama running; OnDemand starts it only when vLLM cannot serve.",
    )
    resources: OllamaResources = Field(default_factory=OllamaResources, json_schema_extra=_obj_default())
    activate_after_seconds: int = Field(
        default=60, ge=0, le=86400, description="Seconds without a ready vLLM replica before traffic moves to Ollama."
    )
    recover_after_seconds: int = Field(
        default=120, ge=0, le=86400, description="Seconds vLLM must stay ready before traffic moves back."
    )
    store: OllamaStoreSpec = Field(
        default_factory=OllamaStoreSpec,
        json_schema_extra=_obj_default(),
        description="The retained claim holding Ollama's models, so that a failover does not pull them again.",
    )
    pod_security: PodSecuritySpec = Field(
        default_factory=PodSecuritySpec, json_schema_extra=_obj_default(), description="Who the Ollama pod runs as."
    )


class FallbackSpec(ApiModel):
    ollama: OllamaSpec | None = None


class ServiceSpec(ApiModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    port: int = Field(default=8000, ge=1, le=65535)
    annotations: dict[str, str] = Field(default_factory=dict)


class PodMetadata(ApiModel):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class InferenceServerSpec(ApiModel):
    model_config = _validated(
        (
            "!has(self.resources.gpus) || type(self.engine.tensorParallelSize) != int || "
            "self.engine.tensorParallelSize * self.engine.pipelineParallelSize == self.resources.gpus",
            "engine.tensorParallelSize x engine.pipelineParallelSize must equal resources.gpus",
            ".resources.gpus",
        ),
        (
            "!has(self.cache) || has(self.cache.existingClaim) || self.replicas <= 1 || "
            "self.cache.accessMode == 'ReadWriteMany'",
            "cache.accessMode must be ReadWriteMany when replicas > 1: replicas on several nodes share the cache",
            ".cache.accessMode",
        ),
    )

    model: ModelSpec = Field(description="The model to serve and how clients name it.")
    engine: EngineSpec = Field(
        default_factory=EngineSpec, json_schema_extra=_obj_default(), description="The vLLM engine and its tuning."
    )
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, json_schema_extra=_obj_default(), description="GPUs, CPU and memory per replica."
    )
    replicas: int = Field(default=1, ge=1, le=512, description="vLLM replicas behind the endpoint.")
    cache: CacheSpec | None = Field(default=None, description="A persistent model cache (HF_HOME lives on it).")
    scheduling: SchedulingSpec | None = Field(default=None, description="Where the vLLM pods may run.")
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec, json_schema_extra=_obj_default(), description="How a model switch happens."
    )
    fallback: FallbackSpec | None = Field(default=None, description="What serves when vLLM cannot.")
    service: ServiceSpec = Field(
        default_factory=ServiceSpec, json_schema_extra=_obj_default(), description="The stable endpoint Service."
    )
    pod_metadata: PodMetadata | None = Field(default=None, description="Labels and annotations for the vLLM pods.")
    pod_security: PodSecuritySpec = Field(
        default_factory=PodSecuritySpec, json_schema_extra=_obj_default(), description="Who the vLLM pods run as."
    )


__all__ = [
    "DNS_LABEL",
    "Architecture",
    "CacheSpec",
    "EngineSpec",
    "EnvVar",
    "FallbackSpec",
    "InferenceServerSpec",
    "ModelSpec",
    "OllamaSpec",
    "OllamaStoreSpec",
    "PodMetadata",
    "PodSecuritySpec",
    "ResourcesSpec",
    "RolloutSpec",
    "SchedulingSpec",
    "ServiceSpec",
    "Toleration",
]

"""plan -> Kubernetes objects, through the jinja2 templates beside this module (pure)."""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import jinja2
import yaml

from ..api import API_VERSION, KIND, PodSecuritySpec, SchedulingSpec
from ..api.types import quantity_bytes
from ..planner import LaunchPlan
from ..planner.vllm_args import SERVING_PORT, VLLM_COMMAND

CACHE_MOUNT = "/models"
OLLAMA_STORE_MOUNT = "/ollama"
# A home that any user may write: a non-root user cannot write the images' /root.
NON_ROOT_HOME = "/tmp"
DEFAULT_NON_ROOT_USER = 1000
ROLE_VLLM: Literal["vllm"] = "vllm"
ROLE_OLLAMA: Literal["ollama"] = "ollama"
LABEL_SERVER = "inference-operator.dev/server"
LABEL_REVISION = "inference-operator.dev/revision"
LABEL_ROLE = "inference-operator.dev/role"
ANNOTATION_BACKEND = "inference-operator.dev/backend"
ANNOTATION_REVISION = "inference-operator.dev/revision"
# The vLLM revision the server stands on, also while Ollama serves: the Service carries it, so that the
# cluster, not status, tells a restarted operator what to fall back from and return to.
ANNOTATION_ACTIVE_REVISION = "inference-operator.dev/active-revision"
# The revision a failed rollout rolled back from: not retried until the spec changes, even if status is lost.
ANNOTATION_ROLLED_BACK = "inference-operator.dev/rolled-back-revision"
# When the rollout to a revision started, on its Deployment: a lost status resumes with the same deadline.
ANNOTATION_ROLLOUT_START = "inference-operator.dev/rollout-start"
ANNOTATION_GENERATION = "inference-operator.dev/generation"
ANNOTATION_PLAN_INPUTS = "inference-operator.dev/plan-inputs"
# On a retained claim, which has no owner reference: the uid of the server that created it. Only that server
# writes it; a claim of the same name made by anyone else is used as it is.
ANNOTATION_CREATED_FOR = "inference-operator.dev/created-for"

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("inference_operator.render", "templates"),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
    auto_reload=False,  # templates ship with the package: compile once, never stat the files again
)


@dataclass(frozen=True)
class Owner:
    """The InferenceServer that owns the children (garbage collection on delete)."""

    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class Target:
    """Where the stable Service sends traffic: one vLLM revision or the Ollama fallback."""

    backend: Literal["vllm", "ollama"]
    revision: str | None = None
    active: str | None = None  # the vLLM revision the server stands on; "" is written for none yet
    rolled_back: str | None = None  # the revision the last rollout gave up on


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: parsing dominates rendering


_RENDERED_MAX = 8192
_rendered: OrderedDict[bytes, str] = OrderedDict()  # digest of (template, context) -> the object, as JSON


def _render(template: str, **context: Any) -> dict[str, Any]:
    """The template rendered and parsed, remembered by its inputs: parsing YAML is ~80% of rendering, and a
    reconcile that changes nothing renders what the previous one did (a bounded LRU, as JSON: compact)."""
    try:
        inputs = json.dumps([template, context], sort_keys=True, separators=(",", ":"))
    except TypeError:  # a value JSON cannot hold: render without remembering
        return _parse(template, context)
    key = hashlib.blake2b(inputs.encode(), digest_size=16).digest()
    known = _rendered.get(key)
    if known is not None:
        _rendered.move_to_end(key)
        cached: dict[str, Any] = json.loads(known)
        return cached
    loaded = _parse(template, context)
    _rendered[key] = json.dumps(loaded, separators=(",", ":"))
    if len(_rendered) > _RENDERED_MAX:
        _rendered.popitem(last=False)
    return loaded


def forget_renders() -> None:
    """Drop the remembered renders (to measure rendering from scratch)."""
    _rendered.clear()


def _parse(template: str, context: dict[str, Any]) -> dict[str, Any]:
    loaded = yaml.load(_ENV.get_template(template).render(**context), Loader=_LOADER)
    assert isinstance(loaded, dict)
    return loaded


def common_labels(plan: LaunchPlan, role: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": role,
        "app.kubernetes.io/instance": plan.name,
        "app.kubernetes.io/component": "inference-server" if role == ROLE_VLLM else "fallback",
        "app.kubernetes.io/part-of": "inference-operator",
        "app.kubernetes.io/managed-by": "inference-operator",
        LABEL_SERVER: plan.name,
        LABEL_ROLE: role,
    }


def vllm_deployment_name(plan: LaunchPlan, revision: str) -> str:
    return f"{plan.name}-vllm-{revision}"


def ollama_name(plan: LaunchPlan) -> str:
    return f"{plan.name}-ollama"


def ollama_store_name(plan: LaunchPlan) -> str:
    """The claim that keeps the Ollama fallback's pulled models; retained when the server is deleted."""
    return f"{plan.name}-ollama-models"


def container_security(security: PodSecuritySpec) -> dict[str, Any]:
    """Pod Security "baseline" and the restricted level's container rules; non-root when asked for."""
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if security.run_as_non_root:
        user = security.run_as_user or DEFAULT_NON_ROOT_USER
        context.update(runAsNonRoot=True, runAsUser=user, runAsGroup=user)
    return context


def pod_security(security: PodSecuritySpec) -> dict[str, Any]:
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if security.run_as_non_root:
        user = security.run_as_user or DEFAULT_NON_ROOT_USER
        context.update(runAsNonRoot=True, fsGroup=security.fs_group or user)
    return context


def cache_claim_name(plan: LaunchPlan) -> str | None:
    cache = plan.spec.cache
    if cache is None:
        return None
    return cache.existing_claim or f"{plan.name}-model-cache"


def _tolerations(plan: LaunchPlan, gpus: int) -> list[dict[str, Any]]:
    scheduling = plan.spec.scheduling
    user = [t.model_dump(by_alias=True, exclude_none=True) for t in scheduling.tolerations] if scheduling else []
    if gpus == 0:
        return user
    # GPU nodes are commonly tainted with their GPU resource name; a GPU pod tolerates that taint.
    gpu_taint = {"key": plan.spec.resources.gpu_resource_name, "operator": "Exists", "effect": "NoSchedule"}
    return user if gpu_taint in user else [*user, gpu_taint]


def _vllm_env(plan: LaunchPlan) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": f"{CACHE_MOUNT}/huggingface"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
    ]
    if plan.spec.pod_security.run_as_non_root:
        env.append({"name": "HOME", "value": NON_ROOT_HOME})
    token = plan.spec.model.token_secret_ref
    if token is not None:
        ref = {"secretKeyRef": {"name": token.name, "key": token.key}}
        env.append({"name": "HF_TOKEN", "valueFrom": ref})
        env.append({"name": "HUGGING_FACE_HUB_TOKEN", "valueFrom": ref})
    env.extend(e.model_dump(by_alias=True, exclude_none=True) for e in plan.spec.engine.env)
    return env


def _vllm_resources(plan: LaunchPlan) -> dict[str, Any]:
    res = plan.spec.resources
    requests: dict[str, Any] = {res.gpu_resource_name: str(plan.gpus)}
    limits: dict[str, Any] = {res.gpu_resource_name: str(plan.gpus)}
    if res.cpu is not None:
        requests["cpu"] = str(res.cpu)
    if res.memory is not None:
        requests["memory"] = str(res.memory)
        # The /dev/shm volume is memory too: the limit leaves room for it.
        limits["memory"] = _add_quantities(str(res.memory), str(res.shared_memory))
    return {"requests": requests, "limits": limits}


def _add_quantities(a: str, b: str) -> str:
    total = quantity_bytes(a) + quantity_bytes(b)
    return f"{math.ceil(total / 2**20)}Mi"


def vllm_pod_template(plan: LaunchPlan, revision: str) -> dict[str, Any]:
    labels = {**common_labels(plan, ROLE_VLLM), LABEL_REVISION: revision}
    pod_meta = plan.spec.pod_metadata
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(SERVING_PORT),
        "prometheus.io/path": "/metrics",
        **(pod_meta.annotations if pod_meta else {}),
    }
    if pod_meta:
        labels = {**pod_meta.labels, **labels}
    scheduling = plan.spec.scheduling
    return _render(
        "vllm-pod.yaml.j2",
        labels=labels,
        annotations=annotations,
        scheduling=(scheduling or SchedulingSpec()).model_dump(),
        tolerations=_tolerations(plan, plan.gpus),
        image=plan.image,
        command=list(VLLM_COMMAND),
        args=list(plan.args),
        port=SERVING_PORT,
        env=_vllm_env(plan),
        resources=_vllm_resources(plan),
        cache_mount=CACHE_MOUNT,
        startup_failure_threshold=max(1, math.ceil(plan.startup_seconds / 10)),
        drain_seconds=plan.spec.rollout.drain_seconds,
        termination_grace=termination_grace_seconds(plan),
        shared_memory=str(plan.spec.resources.shared_memory),
        cache_claim=cache_claim_name(plan),
        pod_security=pod_security(plan.spec.pod_security),
        container_security=container_security(plan.spec.pod_security),
    )


def termination_grace_seconds(plan: LaunchPlan) -> int:
    """The preStop drain, then time for the requests and streams in flight to finish after SIGTERM."""
    return plan.spec.rollout.drain_seconds + plan.spec.rollout.stream_grace_seconds


@dataclass(frozen=True)
class VllmPods:
    """The vLLM pod template, rendered once, and the revision that names it."""

    revision: str
    template: dict[str, Any]


def vllm_pods(plan: LaunchPlan) -> VllmPods:
    """Hash of everything that shapes the vLLM pods (stable under field order, blind to replicas), and the pods."""
    template = vllm_pod_template(plan, revision="")
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    rev = digest[:10]
    template["metadata"]["labels"][LABEL_REVISION] = rev  # the only place the revision appears in the template
    return VllmPods(revision=rev, template=template)


def revision(plan: LaunchPlan) -> str:
    return vllm_pods(plan).revision


def vllm_deployment(
    plan: LaunchPlan,
    revision_id: str,
    owner: Owner | None,
    replicas: int | None = None,
    annotations: dict[str, str] | None = None,
    pods: VllmPods | None = None,
) -> dict[str, Any]:
    """The Deployment of one vLLM revision; `pods` (from `vllm_pods`) spares rendering the pod template again."""
    labels = {**common_labels(plan, ROLE_VLLM), LABEL_REVISION: revision_id}
    deployment = _render(
        "vllm-deployment.yaml.j2",
        name=vllm_deployment_name(plan, revision_id),
        namespace=plan.namespace,
        labels=labels,
        model=plan.spec.model.name,
        vllm_version=plan.vllm_version,
        owner=owner.reference() if owner else None,
        replicas=plan.spec.replicas if replicas is None else replicas,
        progress_deadline=plan.spec.rollout.timeout_seconds,
        selector={LABEL_SERVER: plan.name, LABEL_ROLE: ROLE_VLLM, LABEL_REVISION: revision_id},
    )
    if pods is not None and pods.revision == revision_id:
        deployment["spec"]["template"] = json.loads(json.dumps(pods.template))  # the caller's own copy
    else:
        deployment["spec"]["template"] = vllm_pod_template(plan, revision_id)
    if annotations:
        deployment["metadata"]["annotations"].update(annotations)
    return deployment


def service_selector(plan: LaunchPlan, target: Target) -> dict[str, str]:
    if target.backend == ROLE_OLLAMA:
        return {LABEL_SERVER: plan.name, LABEL_ROLE: ROLE_OLLAMA}
    assert target.revision, "a vLLM target names its revision"
    return {LABEL_SERVER: plan.name, LABEL_ROLE: ROLE_VLLM, LABEL_REVISION: target.revision}


def stable_service(plan: LaunchPlan, target: Target, owner: Owner | None) -> dict[str, Any]:
    service = plan.spec.service
    annotations = {**service.annotations, ANNOTATION_BACKEND: target.backend}
    if target.revision and target.backend == ROLE_VLLM:
        annotations[ANNOTATION_REVISION] = target.revision
    annotations[ANNOTATION_ACTIVE_REVISION] = target.active or ""
    annotations[ANNOTATION_ROLLED_BACK] = target.rolled_back or ""
    labels = {k: v for k, v in common_labels(plan, ROLE_VLLM).items() if k != LABEL_ROLE}
    labels["app.kubernetes.io/component"] = "endpoint"
    return _render(
        "service.yaml.j2",
        name=plan.name,
        namespace=plan.namespace,
        labels=labels,
        annotations=annotations,
        owner=owner.reference() if owner else None,
        type=service.type,
        selector=service_selector(plan, target),
        port=service.port,
    )


def ollama_objects(plan: LaunchPlan, owner: Owner | None, replicas: int) -> list[dict[str, Any]]:
    ollama = plan.ollama
    if ollama is None:
        return []
    labels = common_labels(plan, ROLE_OLLAMA)
    resources = ollama.spec.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if resources.cpu is not None:
        requests["cpu"] = str(resources.cpu)
    if resources.memory is not None:
        requests["memory"] = limits["memory"] = str(resources.memory)
    if resources.gpus:
        requests[plan.spec.resources.gpu_resource_name] = limits[plan.spec.resources.gpu_resource_name] = str(
            resources.gpus
        )
    scheduling = plan.spec.scheduling
    pod_meta = plan.spec.pod_metadata
    deployment = _render(
        "ollama-deployment.yaml.j2",
        name=ollama_name(plan),
        namespace=plan.namespace,
        labels=labels,
        model=ollama.model,
        owner=owner.reference() if owner else None,
        replicas=replicas,
        selector={LABEL_SERVER: plan.name, LABEL_ROLE: ROLE_OLLAMA},
        pod_annotations=pod_meta.annotations if pod_meta else {},
        node_selector=scheduling.node_selector if scheduling and resources.gpus else {},
        tolerations=_tolerations(plan, resources.gpus),
        image=ollama.image,
        port=SERVING_PORT,
        resources={"requests": requests, "limits": limits},
        drain_seconds=plan.spec.rollout.drain_seconds,
        termination_grace=termination_grace_seconds(plan),
        env=_ollama_env(plan),
        store_mount=OLLAMA_STORE_MOUNT,
        store_claim=ollama_store_name(plan) if ollama.spec.store.enabled else None,
        pod_security=pod_security(ollama.spec.pod_security),
        container_security=container_security(ollama.spec.pod_security),
    )
    service = _render(
        "service.yaml.j2",
        name=ollama_name(plan),
        namespace=plan.namespace,
        labels=labels,
        annotations={},
        owner=owner.reference() if owner else None,
        type="ClusterIP",
        selector={LABEL_SERVER: plan.name, LABEL_ROLE: ROLE_OLLAMA},
        port=plan.spec.service.port,
    )
    return [deployment, service]


def _ollama_env(plan: LaunchPlan) -> list[dict[str, str]]:
    ollama = plan.ollama
    assert ollama is not None
    env = [
        {"name": "OLLAMA_HOST", "value": f"0.0.0.0:{SERVING_PORT}"},
        {"name": "OLLAMA_KEEP_ALIVE", "value": "-1"},
        {"name": "OLLAMA_MODELS", "value": f"{OLLAMA_STORE_MOUNT}/models"},
        {"name": "FALLBACK_MODEL", "value": ollama.model},
        {"name": "SERVED_MODEL_NAME", "value": ollama.served_name},
        {"name": "MODEL_READY_FILE", "value": "/tmp/model-ready"},
    ]
    if ollama.context_length is not None:
        env.append({"name": "OLLAMA_CONTEXT_LENGTH", "value": str(ollama.context_length)})
    if ollama.spec.pod_security.run_as_non_root:
        env.append({"name": "HOME", "value": NON_ROOT_HOME})
    return env


def ollama_store_pvc(plan: LaunchPlan, owner: Owner | None = None) -> dict[str, Any] | None:
    """Ollama's model store. It has no owner, like a retained model cache: deleting the server keeps the pulled
    models, and a failover never pulls them again."""
    ollama = plan.ollama
    if ollama is None or not ollama.spec.store.enabled:
        return None
    labels = {k: v for k, v in common_labels(plan, ROLE_OLLAMA).items() if k != LABEL_ROLE}
    labels["app.kubernetes.io/component"] = "fallback-model-store"
    return _render(
        "cache-pvc.yaml.j2",
        name=ollama_store_name(plan),
        namespace=plan.namespace,
        labels=labels,
        owner=None,
        annotations={ANNOTATION_CREATED_FOR: owner.uid} if owner else {},
        access_mode="ReadWriteOnce",
        storage_class=ollama.spec.store.storage_class_name,
        size=ollama.store_size,
    )


def cache_pvc(plan: LaunchPlan, owner: Owner | None) -> dict[str, Any] | None:
    cache = plan.spec.cache
    if cache is None or cache.existing_claim is not None:
        return None
    labels = {k: v for k, v in common_labels(plan, ROLE_VLLM).items() if k != LABEL_ROLE}
    labels["app.kubernetes.io/component"] = "model-cache"
    # A retained cache has no owner, so deleting the InferenceServer never garbage-collects it.
    return _render(
        "cache-pvc.yaml.j2",
        name=cache_claim_name(plan),
        namespace=plan.namespace,
        labels=labels,
        owner=owner.reference() if owner and not cache.retain else None,
        annotations={ANNOTATION_CREATED_FOR: owner.uid} if owner else {},
        access_mode=cache.access_mode,
        storage_class=cache.storage_class_name,
        size=str(cache.size),
    )


def pdb(plan: LaunchPlan, owner: Owner | None) -> dict[str, Any]:
    return _render(
        "pdb.yaml.j2",
        name=f"{plan.name}-vllm",
        namespace=plan.namespace,
        labels=common_labels(plan, ROLE_VLLM),
        owner=owner.reference() if owner else None,
        selector={LABEL_SERVER: plan.name, LABEL_ROLE: ROLE_VLLM},
    )


def ollama_replicas(plan: LaunchPlan, fallback_active: bool) -> int:
    if plan.ollama is None:
        return 0
    return 1 if plan.ollama.mode == "Standby" or fallback_active else 0


def objects(
    plan: LaunchPlan,
    owner: Owner | None = None,
    target: Target | None = None,
    fallback_active: bool = False,
) -> list[dict[str, Any]]:
    """Every child of a server in its steady state, serving the plan's revision unless told otherwise."""
    pods = vllm_pods(plan)
    rev = pods.revision
    target = target or Target(backend=ROLE_VLLM, revision=rev)
    out: list[dict[str, Any]] = []
    pvc = cache_pvc(plan, owner)
    if pvc is not None:
        out.append(pvc)
    out.append(vllm_deployment(plan, rev, owner, pods=pods))
    out.append(stable_service(plan, target, owner))
    store = ollama_store_pvc(plan, owner)
    if store is not None:
        out.append(store)
    out.extend(ollama_objects(plan, owner, ollama_replicas(plan, fallback_active)))
    out.append(pdb(plan, owner))
    return out

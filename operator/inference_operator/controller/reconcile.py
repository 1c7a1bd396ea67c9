"""One idempotent reconcile of one InferenceServer: plan, observe, decide, apply, report.

A reconcile that finds the cluster as it should be writes nothing: children are compared with what
would be applied, and status is written only when it differs.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from ..api import API_VERSION, KIND, InferenceServer
from ..planner import Defaults, FlagCatalog, LaunchPlan, PlanError, plan
from ..render import (
    LABEL_REVISION,
    LABEL_ROLE,
    LABEL_SERVER,
    ROLE_VLLM,
    Owner,
    Target,
    VllmPods,
    cache_pvc,
    ollama_name,
    ollama_objects,
    pdb,
    stable_service,
    vllm_deployment,
    vllm_pods,
)
from . import metrics
from .cache import Reader
from .conditions import build_status, decided_conditions, iso, memory_from_status, refused_conditions
from .diff import contains
from .facts import gpu_facts
from .kube import Kube
from .observe import observe
from .rollout import Decision, Desired, Event, FallbackPolicy, decide

log = logging.getLogger("inference_operator.reconcile")


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class Context:
    kube: Kube
    reads: Reader  # the watch-fed caches: what a reconcile reads costs no API request
    catalog: FlagCatalog
    defaults: Defaults
    clock: Callable[[], datetime] = utcnow
    instance: str = field(default_factory=socket.gethostname)

    async def nodes(self) -> list[dict[str, Any]]:
        return await self.reads.list("v1", "Node", None)


def endpoint(server: InferenceServer) -> str:
    meta = server.metadata
    return f"http://{meta.name}.{meta.namespace}.svc.cluster.local:{server.spec.service.port}/v1"


def _describe(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


async def reconcile(ctx: Context, namespace: str, name: str) -> float | None:
    """Bring one server's children and status in line; return when to look again (seconds), if ever."""
    obj = await ctx.reads.get(API_VERSION, KIND, namespace, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    now = ctx.clock()
    previous: dict[str, Any] = obj.get("status") or {}
    generation = int(obj["metadata"].get("generation") or 0)
    try:
        server = InferenceServer.model_validate(obj)
    except ValidationError as err:
        await _refuse(ctx, obj, previous, generation, "InvalidSpec", _describe(err), now)
        return None
    node_selector = server.spec.scheduling.node_selector if server.spec.scheduling else {}
    facts = gpu_facts(await ctx.nodes(), node_selector, server.spec.resources.gpu_resource_name)
    try:
        launch = plan(server, ctx.catalog, facts, ctx.defaults)
    except PlanError as err:
        await _refuse(ctx, obj, previous, generation, "PlanRefused", str(err), now)
        return None

    vllm = vllm_pods(launch)  # rendered once: the revision's hash and its Deployment's pod template
    rev = vllm.revision
    owner = Owner(name=name, uid=obj["metadata"]["uid"])
    deployments = await ctx.reads.list("apps/v1", "Deployment", namespace, {LABEL_SERVER: name})
    pods = await ctx.reads.list("v1", "Pod", namespace, {LABEL_SERVER: name})
    observed = observe(deployments, pods, server.spec.resources.gpu_resource_name)
    memory = memory_from_status(previous)
    decision = decide(_desired(server, rev), observed, memory, now)
    if _shrinks(decision, deployments):
        # Fresh reads, not the caches: deleting or scaling down a revision is decided on the API server's state.
        deployments = await ctx.kube.list("apps/v1", "Deployment", namespace, {LABEL_SERVER: name})
        pods = await ctx.kube.list("v1", "Pod", namespace, {LABEL_SERVER: name})
        observed = observe(deployments, pods, server.spec.resources.gpu_resource_name)
        decision = decide(_desired(server, rev), observed, memory, now)

    await _apply_children(ctx, launch, vllm, owner, decision, deployments)

    serving = decision.revision
    replicas = decision.deployments.get(serving, 0) if decision.backend == "vllm" else None
    ready_obs = observed.revisions.get(serving)
    ready = ready_obs.ready if ready_obs else 0
    conds = decided_conditions(decision, rev, server.spec.replicas, ready)
    status = build_status(
        previous=previous,
        generation=generation,
        conds=conds,
        now=now,
        endpoint=endpoint(server),
        plan=launch,
        memory=decision.memory,
        replicas=replicas if replicas is not None else server.spec.replicas,
        ready=ready if decision.backend == "vllm" else 0,
    )
    await _write_status(ctx, obj, previous, status)
    for event in decision.events:
        await _post_event(ctx, obj, event, now)
        _count(event, decision, now)
    return decision.requeue_after


def _shrinks(decision: Decision, deployments: list[dict[str, Any]]) -> bool:
    """Would the decision delete or scale down a vLLM revision that has pods?"""
    for dep in deployments:
        labels = dep["metadata"].get("labels") or {}
        old = labels.get(LABEL_REVISION)
        replicas = int((dep.get("spec") or {}).get("replicas") or 0)
        if labels.get(LABEL_ROLE) == ROLE_VLLM and old is not None and decision.deployments.get(old, 0) < replicas:
            return True
    return False


def _desired(server: InferenceServer, rev: str) -> Desired:
    ollama = server.spec.fallback.ollama if server.spec.fallback else None
    policy = None
    if ollama is not None and ollama.enabled:
        policy = FallbackPolicy(
            mode=ollama.mode,
            activate_after=float(ollama.activate_after_seconds),
            recover_after=float(ollama.recover_after_seconds),
        )
    return Desired(
        revision=rev,
        replicas=server.spec.replicas,
        strategy=server.spec.rollout.strategy,
        timeout=float(server.spec.rollout.timeout_seconds),
        fallback=policy,
    )


async def _ensure(ctx: Context, desired: dict[str, Any], live: dict[str, Any] | None) -> None:
    if live is not None and contains(live, desired):
        return
    await ctx.kube.apply(desired)


async def _apply_children(
    ctx: Context,
    launch: LaunchPlan,
    vllm: VllmPods,
    owner: Owner,
    decision: Decision,
    deployments: list[dict[str, Any]],
) -> None:
    kube, ns, rev = ctx.kube, launch.namespace, vllm.revision
    live_by_name = {d["metadata"]["name"]: d for d in deployments}
    services = {
        s["metadata"]["name"]: s for s in await ctx.reads.list("v1", "Service", ns, {LABEL_SERVER: launch.name})
    }

    pvc = cache_pvc(launch, owner)
    if pvc is not None:
        live = await ctx.reads.get("v1", "PersistentVolumeClaim", ns, pvc["metadata"]["name"])
        try:
            await _ensure(ctx, pvc, live)
        except ApiException as err:
            if err.status not in (409, 422):
                raise
            log.warning("model cache claim %s/%s not updated: %s", ns, pvc["metadata"]["name"], err.reason)

    # New revision first, then the Service, then the old revisions: traffic moves before pods go.
    if rev in decision.deployments:
        desired = vllm_deployment(launch, rev, owner, replicas=decision.deployments[rev], pods=vllm)
        await _ensure(ctx, desired, live_by_name.get(desired["metadata"]["name"]))

    if launch.ollama is not None:
        ollama_dep, ollama_svc = ollama_objects(launch, owner, decision.ollama_replicas)
        await _ensure(ctx, ollama_dep, live_by_name.get(ollama_dep["metadata"]["name"]))
        await _ensure(ctx, ollama_svc, services.get(ollama_svc["metadata"]["name"]))
    else:
        if ollama_name(launch) in live_by_name:
            await kube.delete("apps/v1", "Deployment", ns, ollama_name(launch))
        if ollama_name(launch) in services:
            await kube.delete("v1", "Service", ns, ollama_name(launch))

    service = stable_service(launch, Target(decision.backend, decision.revision), owner)
    await _ensure(ctx, service, services.get(launch.name))

    for dep in deployments:
        labels = dep["metadata"].get("labels") or {}
        old = labels.get(LABEL_REVISION)
        if labels.get(LABEL_ROLE) != ROLE_VLLM or old is None or (old == rev and rev in decision.deployments):
            continue
        if old in decision.deployments:
            wanted = decision.deployments[old]
            if int((dep.get("spec") or {}).get("replicas") or 0) != wanted:
                await kube.scale(ns, dep["metadata"]["name"], wanted)
        else:
            await kube.delete("apps/v1", "Deployment", ns, dep["metadata"]["name"])

    budget = pdb(launch, owner)
    await _ensure(ctx, budget, await ctx.reads.get("policy/v1", "PodDisruptionBudget", ns, budget["metadata"]["name"]))


async def _write_status(ctx: Context, obj: dict[str, Any], previous: dict[str, Any], status: dict[str, Any]) -> None:
    if status == previous:
        return
    meta = obj["metadata"]
    await ctx.kube.apply(
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": status,
        },
        subresource="status",
    )


async def _refuse(
    ctx: Context,
    obj: dict[str, Any],
    previous: dict[str, Any],
    generation: int,
    reason: str,
    message: str,
    now: datetime,
) -> None:
    """Stalled: the spec cannot be served. Children stay as they are, so a serving revision keeps serving."""
    serving = previous.get("activeRevision") is not None
    conds = refused_conditions(message, reason, serving)
    status = build_status(
        previous=previous,
        generation=generation,
        conds=conds,
        now=now,
        endpoint=previous.get("endpoint"),
        plan=None,
        memory=None,
        replicas=previous.get("replicas"),
        ready=previous.get("readyReplicas"),
    )
    before: dict[str, Any] = next((c for c in previous.get("conditions") or [] if c.get("type") == "Stalled"), {})
    await _write_status(ctx, obj, previous, status)
    if before.get("status") != "True" or before.get("message") != message:
        await _post_event(ctx, obj, Event("Warning", reason, message), now)


async def _post_event(ctx: Context, obj: dict[str, Any], event: Event, now: datetime) -> None:
    meta = obj["metadata"]
    stamp = iso(now)
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": event.reason,
        "message": event.message[:1024],
        "type": event.type,
        "source": {"component": "inference-operator"},
        "reportingComponent": "inference-operator.dev/operator",
        "reportingInstance": ctx.instance[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        await ctx.kube.create(body)
    except ApiException as err:
        log.warning("event %s for %s/%s not posted: %s", event.reason, meta["namespace"], meta["name"], err.reason)


def _count(event: Event, decision: Decision, now: datetime) -> None:
    rollout = decision.memory.rollout
    if event.reason in ("RolloutSucceeded", "RolloutRolledBack", "RolloutFailed"):
        metrics.ROLLOUTS.labels(rollout.strategy or "", rollout.result or "").inc()
        if rollout.start is not None:
            metrics.ROLLOUT_SECONDS.observe((now - rollout.start).total_seconds())
    elif event.reason == "FallbackActivated":
        metrics.FAILOVERS.labels("ollama").inc()
    elif event.reason == "FallbackRecovered":
        metrics.FAILOVERS.labels("vllm").inc()


__all__ = ["Context", "reconcile"]

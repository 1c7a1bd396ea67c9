"""One idempotent reconcile of one InferenceServer: plan, observe, decide, apply, report.

A reconcile that finds the cluster as it should be writes nothing: children are compared with what
would be applied, and status is written only when it differs. The state it decides on is read from the
cluster (the stable Service and the revisions' Deployments); status only adds timers. It writes only
objects this server owns: a child name taken by anything else is reported, never taken over.
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
from ..api.status import PlanInputs, format_time
from ..planner import Defaults, FlagCatalog, LaunchPlan, PlanError, plan
from ..render import (
    ANNOTATION_ROLLOUT_START,
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
    ollama_store_pvc,
    pdb,
    stable_service,
    vllm_deployment,
    vllm_pods,
)
from . import metrics
from .cache import Reader
from .conditions import (
    TROUBLE_REASONS,
    Cond,
    Trouble,
    build_status,
    decided_conditions,
    iso,
    kept_status,
    refused_conditions,
)
from .diff import contains
from .facts import gpu_facts
from .kube import Kube
from .observe import observe
from .ownership import Conflict, conflict_of, owned
from .pinning import (
    REPLAN_ANNOTATION,
    defaults_of,
    deployment_annotations,
    describe_change,
    facts_from_dict,
    fresh_inputs,
    pinned,
)
from .rollout import Decision, Desired, Event, FallbackPolicy, Observed, decide
from .state import read_memory

log = logging.getLogger("inference_operator.reconcile")
CONFLICT_RECHECK_SECONDS = 30.0
QUEUED_RECHECK_SECONDS = 5.0
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class Context:
    kube: Kube  # fresh reads and every write
    catalog: FlagCatalog
    defaults: Defaults
    clock: Callable[[], datetime] = utcnow
    instance: str = field(default_factory=socket.gethostname)
    max_concurrent_rollouts: int = 0  # 0: no bound
    rollouts: set[tuple[str, str]] = field(default_factory=set)  # servers with a model switch in progress
    reads: Reader | None = None  # the watch-fed caches: what a reconcile reads costs no API request

    @property
    def reader(self) -> Reader:
        return self.reads if self.reads is not None else self.kube

    async def nodes(self) -> list[dict[str, Any]]:
        try:
            return await self.reader.list("v1", "Node", None)
        except ApiException as err:
            if err.status != 403:
                raise
            log.warning("cannot list nodes (forbidden): GPU memory must be set in each spec")
            return []


@dataclass(frozen=True)
class Children:
    """This server's children as listed by its label, keeping only what it owns; and its Service's endpoints."""

    deployments: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    services: dict[str, dict[str, Any]]
    claims: dict[str, dict[str, Any]]
    budgets: dict[str, dict[str, Any]]
    slices: list[dict[str, Any]]


async def read_children(ctx: Context, namespace: str, name: str, uid: str, *, fresh: bool = False) -> Children:
    """From the caches; `fresh` reads the API server instead, as a destructive step must."""
    kube, labels = (ctx.kube if fresh else ctx.reader), {LABEL_SERVER: name}

    def mine(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [o for o in objs if owned(o, uid)]

    def by_name(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in mine(objs)}

    return Children(
        deployments=mine(await kube.list("apps/v1", "Deployment", namespace, labels)),
        pods=await kube.list("v1", "Pod", namespace, labels),
        services=by_name(await kube.list("v1", "Service", namespace, labels)),
        claims=by_name(await kube.list("v1", "PersistentVolumeClaim", namespace, labels)),
        budgets=by_name(await kube.list("policy/v1", "PodDisruptionBudget", namespace, labels)),
        slices=await kube.list("discovery.k8s.io/v1", "EndpointSlice", namespace, {SERVICE_NAME_LABEL: name}),
    )


def endpoint(server: InferenceServer) -> str:
    meta = server.metadata
    return f"http://{meta.name}.{meta.namespace}.svc.cluster.local:{server.spec.service.port}/v1"


def _describe(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


@dataclass(frozen=True)
class Planned:
    launch: LaunchPlan
    pods: VllmPods  # the plan's pod template, rendered once, and its revision
    inputs: PlanInputs
    revision: str  # the revision to serve: the plan's, or the one pinned for this generation
    render_revision: bool  # whether that revision's pods are rendered by this operator from the plan
    outdated: str | None  # what a re-plan would change


def _plan_server(
    ctx: Context, server: InferenceServer, status: dict[str, Any], children: Children, nodes: list[dict[str, Any]]
) -> Planned:
    """The plan of this generation: from the recorded inputs when there are some, else from today's facts."""
    spec, meta = server.spec, server.metadata
    generation = int(meta.generation or 0)
    token = meta.annotations.get(REPLAN_ANNOTATION)
    node_selector = spec.scheduling.node_selector if spec.scheduling else {}
    facts = gpu_facts(nodes, node_selector, spec.resources.gpu_resource_name)
    today = fresh_inputs(generation, facts, ctx.defaults, token)
    recorded, pinned_revision = pinned(status, children.deployments, generation, token)
    inputs = recorded or today
    launch = plan(server, ctx.catalog, facts_from_dict(inputs.facts), defaults_of(inputs))
    pods = vllm_pods(launch)
    rev = pods.revision
    outdated = None
    if recorded is not None and recorded != today:
        try:
            replanned = plan(server, ctx.catalog, facts, ctx.defaults)
        except PlanError as err:
            outdated = f"a re-plan with the cluster of today would be refused: {err}"
        else:
            outdated = describe_change(launch, replanned)
    if recorded is not None and pinned_revision is not None and pinned_revision != rev:
        # This operator renders the pods of this generation differently than the one that started them: keep
        # serving what runs, and say so, rather than roll every server out on an operator upgrade.
        outdated = (
            f"this version of the operator renders the pods as revision {rev}, not {pinned_revision}; "
            f"annotate the server with {REPLAN_ANNOTATION}=<a new value> or change its spec to roll it out"
        )
        return Planned(launch, pods, inputs, pinned_revision, render_revision=False, outdated=outdated)
    return Planned(launch, pods, inputs, rev, render_revision=True, outdated=outdated)


async def reconcile(ctx: Context, namespace: str, name: str) -> float | None:
    """Bring one server's children and status in line; return when to look again (seconds), if ever."""
    obj = await ctx.reader.get(API_VERSION, KIND, namespace, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        ctx.rollouts.discard((namespace, name))
        return None
    now = ctx.clock()
    raw_status = obj.get("status")
    previous: dict[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    generation = int(obj["metadata"].get("generation") or 0)
    try:
        # Only what the user declares is input; status is the operator's cache and is read part by part.
        server = InferenceServer.model_validate({k: obj.get(k) for k in ("apiVersion", "kind", "metadata", "spec")})
    except ValidationError as err:
        was_serving = kept_status(previous).get("activeRevision") is not None
        await _refuse(ctx, obj, previous, generation, "InvalidSpec", _describe(err), now, serving=was_serving)
        return None
    uid = obj["metadata"]["uid"]
    children = await read_children(ctx, namespace, name, uid)
    serving_now = name in children.services
    try:
        planned = _plan_server(ctx, server, previous, children, await ctx.nodes())
    except PlanError as err:
        reason = getattr(err, "reason", None) or "PlanRefused"
        await _refuse(ctx, obj, previous, generation, reason, str(err), now, serving=serving_now)
        return None

    launch, rev = planned.launch, planned.revision
    owner = Owner(name=name, uid=uid)

    def decided(children: Children) -> tuple[Observed, Decision, bool]:
        memory = read_memory(
            previous,
            children.services.get(name),
            children.deployments,
            rev,
            server.spec.rollout.strategy,
            now,
            generation,
        )
        observed = observe(
            children.deployments, children.pods, server.spec.resources.gpu_resource_name, children.slices
        )
        queued = _queued(ctx, (namespace, name), memory.active_revision, memory.rollout.in_progress, rev)
        desired = _desired(server, memory.active_revision if queued and memory.active_revision else rev)
        return observed, decide(desired, observed, memory, now), queued

    observed, decision, queued = decided(children)
    if ctx.reads is not None and _shrinks(decision, children.deployments, observed):
        # Deleting or scaling down what runs is decided on the API server's state, not on the caches'.
        children = await read_children(ctx, namespace, name, uid, fresh=True)
        observed, decision, queued = decided(children)
    _track_rollout(ctx, (namespace, name), decision)

    conflict = await _apply_children(ctx, launch, planned, owner, decision, children)
    if conflict is not None:
        await _refuse(ctx, obj, previous, generation, "ChildConflict", conflict.message, now, serving=serving_now)
        return CONFLICT_RECHECK_SECONDS

    serving = decision.revision
    replicas = decision.deployments.get(serving, 0) if decision.backend == "vllm" else None
    ready_obs = observed.revisions.get(serving)
    ready = ready_obs.ready if ready_obs else 0
    conds = decided_conditions(
        decision, rev, server.spec.replicas, ready, _trouble(observed, decision, rev), planned.outdated
    )
    if queued:
        conds = _queued_conditions(conds, rev, ctx.max_concurrent_rollouts)
    status = build_status(
        previous=previous,
        generation=generation,
        conds=conds,
        now=now,
        endpoint=endpoint(server),
        plan=launch,
        memory=decision.memory,
        plan_inputs=planned.inputs.model_dump(by_alias=True, exclude_none=True),
        replicas=replicas if replicas is not None else server.spec.replicas,
        ready=ready if decision.backend == "vllm" else 0,
    )
    await _write_status(ctx, obj, previous, status)
    for event in (*decision.events, *_condition_events(previous, status)):
        await _post_event(ctx, obj, event, now)
        _count(event, decision, now)
    if queued:
        return min(decision.requeue_after or QUEUED_RECHECK_SECONDS, QUEUED_RECHECK_SECONDS)
    return decision.requeue_after


def _shrinks(decision: Decision, deployments: list[dict[str, Any]], observed: Observed) -> bool:
    """Would the decision delete or scale down a vLLM revision, or scale down the fallback?"""
    for dep in deployments:
        rev = _revision_of(dep)
        replicas = int((dep.get("spec") or {}).get("replicas") or 0)
        if rev is not None and decision.deployments.get(rev, 0) < replicas:
            return True
    return decision.ollama_replicas < observed.ollama_replicas


def _queued(ctx: Context, key: tuple[str, str], active: str | None, in_progress: bool, target: str) -> bool:
    """A model switch waits while --max-concurrent-rollouts others run (each may need twice its GPUs)."""
    if ctx.max_concurrent_rollouts <= 0 or active is None or active == target or in_progress:
        return False
    return len(ctx.rollouts - {key}) >= ctx.max_concurrent_rollouts


def _track_rollout(ctx: Context, key: tuple[str, str], decision: Decision) -> None:
    if decision.memory.rollout.in_progress and decision.memory.active_revision is not None:
        ctx.rollouts.add(key)
    else:
        ctx.rollouts.discard(key)


def _queued_conditions(conds: list[Cond], target: str, limit: int) -> list[Cond]:
    message = f"revision {target} waits: {limit} other model switches are in progress (--max-concurrent-rollouts)"
    return [
        Cond("Reconciling", True, "RolloutQueued", message)
        if c.type == "Reconciling"
        else Cond("Ready", False, "RolloutQueued", message)
        if c.type == "Ready"
        else c
        for c in conds
    ]


def _trouble(observed: Observed, decision: Decision, desired_revision: str) -> Trouble | None:
    """Why the revision that matters now (the rollout's target, else the serving one) cannot serve."""
    rollout = decision.memory.rollout
    rev = rollout.to_revision if rollout.in_progress else (decision.memory.active_revision or desired_revision)
    obs = observed.revisions.get(rev or "")
    if obs is None:
        return None
    if obs.failure:
        return Trouble(obs.failure_reason or "PodFailed", f"revision {rev}: {obs.failure}")
    if obs.unschedulable:
        return Trouble("Unschedulable", f"revision {rev}: {obs.unschedulable}")
    return None


def _condition_events(previous: dict[str, Any], status: dict[str, Any]) -> list[Event]:
    """A Warning Event when the Ready condition first names a trouble, and a Normal one for a possible re-plan."""

    def cond(st: dict[str, Any], kind: str) -> dict[str, Any]:
        return next((c for c in st.get("conditions") or [] if isinstance(c, dict) and c.get("type") == kind), {})

    events = []
    for kind in ("Ready", "Degraded"):
        current, before = cond(status, kind), cond(previous, kind)
        reason = current.get("reason")
        if reason in TROUBLE_REASONS and (before.get("reason"), before.get("message")) != (
            reason,
            current.get("message"),
        ):
            events.append(Event("Warning", str(reason), str(current.get("message", ""))))
            break  # one Event for one trouble, whichever condition carries it
    outdated, was = cond(status, "PlanOutdated"), cond(previous, "PlanOutdated")
    if outdated.get("status") == "True" and was.get("message") != outdated.get("message"):
        events.append(Event("Normal", "ReplanAvailable", str(outdated.get("message", ""))))
    return events


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
        drain_seconds=float(server.spec.rollout.drain_seconds),
    )


def _revision_of(dep: dict[str, Any]) -> str | None:
    labels = dep["metadata"].get("labels") or {}
    return labels.get(LABEL_REVISION) if labels.get(LABEL_ROLE) == ROLE_VLLM else None


async def _write(ctx: Context, desired: dict[str, Any], live: dict[str, Any] | None) -> None:
    if live is None or not contains(live, desired):
        await ctx.kube.apply(desired)


async def _ensure_claim(ctx: Context, uid: str, claim: dict[str, Any], children: Children) -> None:
    """A claim the server made is kept in line; one of that name made by anyone else is mounted as it is and
    never written, owned or deleted."""
    meta = claim["metadata"]
    found = children.claims.get(meta["name"])
    if found is None:
        found = await ctx.kube.get("v1", "PersistentVolumeClaim", meta["namespace"], meta["name"])
    if found is not None and not owned(found, uid):
        return
    try:
        await _write(ctx, claim, found)
    except ApiException as err:
        if err.status not in (409, 422):
            raise
        # Most of a bound claim's spec is immutable: a size or class changed by hand stays as the cluster has it.
        log.warning("claim %s/%s not updated: %s", meta["namespace"], meta["name"], err.reason)


async def _claimable(
    ctx: Context, uid: str, needed: list[dict[str, Any]], own: dict[tuple[str, str], dict[str, Any]]
) -> tuple[dict[tuple[str, str], dict[str, Any] | None], Conflict | None]:
    """The live object behind every name the server needs, or the first one held by something else.

    Checked before anything is written, so that a conflict leaves the cluster as it was. Names among the
    server's own children cost no request; any other is read fresh.
    """
    lives: dict[tuple[str, str], dict[str, Any] | None] = {}
    for obj in needed:
        key = (obj["kind"], obj["metadata"]["name"])
        live = own.get(key)
        if live is None:
            meta = obj["metadata"]
            live = await ctx.kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
            if live is not None and not owned(live, uid):
                return lives, conflict_of(live)
        lives[key] = live
    return lives, None


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


async def _apply_children(
    ctx: Context, launch: LaunchPlan, planned: Planned, owner: Owner, decision: Decision, children: Children
) -> Conflict | None:
    kube, ns = ctx.kube, launch.namespace
    rev = planned.revision
    rollout = decision.memory.rollout

    revision_dep = None
    if rev in decision.deployments and planned.render_revision:
        annotations = deployment_annotations(planned.inputs)
        if rollout.in_progress and rollout.to_revision == rev and rollout.start_time is not None:
            annotations[ANNOTATION_ROLLOUT_START] = format_time(rollout.start_time)
        revision_dep = vllm_deployment(
            launch, rev, owner, replicas=decision.deployments[rev], annotations=annotations, pods=planned.pods
        )
    fallback = ollama_objects(launch, owner, decision.ollama_replicas) if launch.ollama is not None else []
    rolled_back = rollout.to_revision if rollout.result in ("RolledBack", "Failed") else None
    target = Target(decision.backend, decision.revision, decision.memory.active_revision, rolled_back)
    service = stable_service(launch, target, owner)
    budget = pdb(launch, owner)

    own: dict[tuple[str, str], dict[str, Any]] = {
        **{("Deployment", d["metadata"]["name"]): d for d in children.deployments},
        **{("Service", n): s for n, s in children.services.items()},
        **{("PodDisruptionBudget", n): b for n, b in children.budgets.items()},
    }
    needed = [o for o in (revision_dep, *fallback, service, budget) if o is not None]
    lives, conflict = await _claimable(ctx, owner.uid, needed, own)
    if conflict is not None:
        return conflict

    for claim in (cache_pvc(launch, owner), ollama_store_pvc(launch, owner)):
        if claim is not None:
            await _ensure_claim(ctx, owner.uid, claim, children)

    # New revision first, then the Service, then the old revisions: traffic moves before pods go.
    if revision_dep is not None:
        await _write(ctx, revision_dep, lives[_key(revision_dep)])
    elif rev in decision.deployments:
        live = next((d for d in children.deployments if _revision_of(d) == rev), None)
        if live is not None and int((live.get("spec") or {}).get("replicas") or 0) != decision.deployments[rev]:
            await kube.scale(ns, live["metadata"]["name"], decision.deployments[rev])

    for obj in fallback:
        await _write(ctx, obj, lives[_key(obj)])
    if launch.ollama is None:
        if ("Deployment", ollama_name(launch)) in own:
            await kube.delete("apps/v1", "Deployment", ns, ollama_name(launch))
        if ollama_name(launch) in children.services:
            await kube.delete("v1", "Service", ns, ollama_name(launch))

    await _write(ctx, service, lives[_key(service)])

    for dep in children.deployments:
        old = _revision_of(dep)
        if old is None or (old == rev and rev in decision.deployments):
            continue
        if old in decision.deployments:
            wanted = decision.deployments[old]
            if int((dep.get("spec") or {}).get("replicas") or 0) != wanted:
                await kube.scale(ns, dep["metadata"]["name"], wanted)
        else:
            await kube.delete("apps/v1", "Deployment", ns, dep["metadata"]["name"])

    await _write(ctx, budget, lives[_key(budget)])
    return None


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
    *,
    serving: bool,
) -> None:
    """Stalled: the spec cannot be served. Children stay as they are, so a serving revision keeps serving."""
    conds = refused_conditions(message, reason, serving)
    kept = kept_status(previous)
    status = build_status(
        previous=previous,
        generation=generation,
        conds=conds,
        now=now,
        endpoint=kept.get("endpoint"),
        plan=None,
        memory=None,
        replicas=kept.get("replicas"),
        ready=kept.get("readyReplicas"),
    )
    before: dict[str, Any] = next(
        (c for c in previous.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Stalled"), {}
    )
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
        if rollout.start_time is not None:
            metrics.ROLLOUT_SECONDS.observe((now - rollout.start_time).total_seconds())
    elif event.reason == "FallbackActivated":
        metrics.FAILOVERS.labels("ollama").inc()
    elif event.reason == "FallbackRecovered":
        metrics.FAILOVERS.labels("vllm").inc()


__all__ = ["Children", "Context", "read_children", "reconcile"]

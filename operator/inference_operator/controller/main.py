"""`inference-operator run`: kopf watches the servers and their children; reconciles do the work."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import socket
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import kopf
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.api_client import ApiClient

from ..api import GROUP, PLURAL, VERSION
from ..planner import Defaults, load_flag_catalog
from ..render import LABEL_SERVER
from . import metrics
from .cache import ClusterCache, Reads, Relists, WriteThroughKube
from .health import serve_health
from .kube import Kube
from .leader import LeaseElector, LeaseTiming
from .options import Options, add_run_arguments
from .reconcile import Context, reconcile
from .scheduler import Priority, Scheduler

log = logging.getLogger("inference_operator")
CHILDREN = (
    ("apps", "v1", "deployments"),
    ("", "v1", "pods"),
    ("", "v1", "services"),
    ("", "v1", "persistentvolumeclaims"),
    ("policy", "v1", "poddisruptionbudgets"),
    # The EndpointSlice controller copies the Service's labels, the server label among them.
    ("discovery.k8s.io", "v1", "endpointslices"),
)
NODE_RESOURCE = ("", "v1", "nodes")


async def _configuration(options: Options) -> client.Configuration:
    configuration = client.Configuration()
    if options.kubeconfig:
        await config.load_kube_config(config_file=options.kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return configuration


async def api_client(options: Options) -> ApiClient:
    return ApiClient(await _configuration(options))


async def connection_info(options: Options) -> kopf.ConnectionInfo:
    """kopf's watch connection from the same credentials as our client (kubeconfig, exec plugins, or in-cluster)."""
    configuration = await _configuration(options)
    header = await configuration.get_api_key_with_prefix("BearerToken")
    scheme, _, token = (header or "").rpartition(" ")
    assert configuration.host, "the kubeconfig names no server"
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        expiration=None,
    )


def tune(settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False  # our own Events say what happened; kopf's log lines are not Events
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    for resource in CHILDREN:
        # Filtered by the API server, so a cluster-wide operator is not sent every Pod of the cluster.
        settings.watching.label_selectors[resource] = LABEL_SERVER


def registry_for(
    scheduler: Scheduler, options: Options, cache: ClusterCache, relists: Relists | None = None
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await connection_info(options)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        tune(settings)

    def server_changed(type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if namespace is None or name is None:
            return
        if type == "DELETED":
            scheduler.forget(namespace, name)
        else:
            scheduler.known.add((namespace, name))
            scheduler.request(namespace, name)
        metrics.SERVERS.set(len(scheduler.known))

    def child_changed(type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owner, namespace = (meta.get("labels") or {}).get(LABEL_SERVER), meta.get("namespace")
        if owner and namespace and (namespace, owner) in scheduler.known:
            scheduler.request(namespace, owner)

    _watch(registry, (GROUP, VERSION, PLURAL), cache, relists, server_changed)
    for resource in CHILDREN:
        _watch(registry, resource, cache, relists, child_changed)
    gpu_facts: dict[str, str] = {}

    def node_changed(type: str | None, obj: Mapping[str, Any]) -> None:
        # Plans are pinned: a node's GPU facts never re-plan a server, but when they change every server looks
        # again (at the priority of a resync) so that PlanOutdated says what a re-plan would change.
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith("nvidia.com/")}
        facts = "" if type == "DELETED" else json.dumps([labels, (obj.get("status") or {}).get("allocatable")])
        if gpu_facts.get(name) == facts:
            return
        known_before = name in gpu_facts
        gpu_facts[name] = facts
        if type is None and not known_before:
            return  # the first listing: nothing changed
        for key in sorted(scheduler.known):
            scheduler.request(*key, priority=Priority.RESYNC)

    if options.read_nodes:
        _watch(registry, NODE_RESOURCE, cache, relists, node_changed)
    return registry


def _watch(
    registry: kopf.OperatorRegistry,
    resource: tuple[str, str, str],
    cache: ClusterCache,
    relists: Relists | None,
    changed: Callable[[str | None, Mapping[str, Any]], None] | None,
) -> None:
    """Feed the cache of one resource from kopf's watch of it, and tell `changed` what changed."""
    group, version, plural = resource
    selector = LABEL_SERVER if resource in CHILDREN else None

    # kopf runs index handlers on every listed object before any other handler of any resource,
    # so the caches hold every server, child and node before the first reconcile. Both handlers are
    # coroutines: kopf would run plain functions in threads, and the caches belong to the event loop.
    @kopf.index(group, version, plural, id=f"cache_{plural}", registry=registry)
    async def fill(body: kopf.Body, **_: Any) -> None:
        cache.observe(body)

    @kopf.on.event(group, version, plural, id=f"watch_{plural}", registry=registry)
    async def seen(type: str | None, event: Mapping[str, Any], **_: Any) -> None:
        obj = event["object"]
        if type == "DELETED":
            cache.remove(obj)
        else:
            cache.observe(obj)
            if type is None and relists is not None:  # kopf listed the kind (again)
                meta = obj.get("metadata") or {}
                relists.listed(obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace"), selector)
            if cache.echo(obj):
                return  # the watch's copy of our own write: the reconcile that wrote it knew it already
        if changed is not None:
            changed(type, obj)


async def counted(ctx: Context, namespace: str, name: str) -> float | None:
    """One reconcile; those that write nothing are timed apart: they are what a resync costs."""
    started = time.perf_counter()
    with metrics.counting_requests() as requests:
        requeue = await reconcile(ctx, namespace, name)
    if requests.writes == 0:
        metrics.NOOP_RECONCILE_SECONDS.observe(time.perf_counter() - started)
        metrics.NOOP_RECONCILE_READS.inc(requests.reads)
    return requeue


def elector_for(options: Options, kube: Kube, identity: str) -> LeaseElector:
    namespace = options.leader_election_namespace or (options.namespaces[0] if options.namespaces else "default")
    timing = LeaseTiming(options.lease_seconds, options.renew_deadline_seconds, options.retry_period_seconds)
    return LeaseElector(kube, namespace, options.lease_name, identity, timing)


async def serve(options: Options) -> int:
    api = await api_client(options)
    cache = ClusterCache()
    kube = WriteThroughKube(api, cache)
    identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    lost = asyncio.Event()
    elector = elector_for(options, kube, identity) if options.leader_elect else None
    # /healthz answers from now on, also while this replica waits as a standby (kopf's own liveness
    # endpoint would only start after the Lease is won).
    health = await serve_health(options.health_address, elector.liveness_problem if elector else lambda: None)
    tasks: list[asyncio.Task[None]] = []
    if elector is not None:
        await elector.acquire()
        tasks.append(asyncio.create_task(elector.keep(lost)))
    else:
        metrics.LEADER.set(1)

    if not options.read_nodes:
        log.warning("not reading nodes (--no-read-nodes): GPU memory must be set in each spec")
    ctx = Context(
        kube=kube,
        reads=Reads(cache, kube),
        catalog=load_flag_catalog(),
        defaults=Defaults(vllm_image=options.vllm_image, ollama_image=options.ollama_image),
        instance=identity,
        max_concurrent_rollouts=options.max_concurrent_rollouts,
    )
    scheduler = Scheduler(lambda ns, name: counted(ctx, ns, name), workers=options.max_concurrent_reconciles)
    relists = Relists(kube, clusterwide=not options.namespaces)
    scheduler.start()
    tasks.append(asyncio.create_task(scheduler.resync_forever(options.resync_seconds)))
    try:
        await cancel_on(
            lost,
            kopf.operator(
                registry=registry_for(scheduler, options, cache, relists),
                standalone=True,
                clusterwide=not options.namespaces,
                namespaces=list(options.namespaces),
            ),
        )
    finally:
        for task in tasks:
            task.cancel()
        relists.cancel()
        await scheduler.stop()
        if elector is not None and not lost.is_set():
            with contextlib.suppress(Exception):
                await elector.release()
        await health.cleanup()
        await api.close()
    return 1 if lost.is_set() else 0


async def cancel_on(lost: asyncio.Event, operator: Coroutine[Any, Any, None]) -> None:
    """Run kopf until it stops by itself (a signal) or `lost` is set. On a loss kopf is cancelled, not
    stopped gracefully, which would let in-flight reconciles of a deposed leader go on for seconds."""
    lost_waiter = asyncio.create_task(lost.wait())
    running = asyncio.create_task(operator)
    try:
        await asyncio.wait({running, lost_waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        lost_waiter.cancel()
        if not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
    if not lost.is_set():
        running.result()


def run(args: argparse.Namespace) -> int:
    try:
        options = Options.from_args(args)
        LeaseTiming(options.lease_seconds, options.renew_deadline_seconds, options.retry_period_seconds)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    kopf.configure(
        verbose=options.log_level == "debug",
        quiet=options.log_level == "warning",
        log_format=kopf.LogFormat.JSON if options.log_format == "json" else kopf.LogFormat.FULL,
    )
    if options.log_level != "debug":
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per watch event otherwise
    metrics.serve(options.metrics_address)
    return asyncio.run(serve(options))


__all__ = ["add_run_arguments", "run"]

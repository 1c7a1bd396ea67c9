"""`inference-operator run`: kopf watches the servers and their children; reconciles do the work."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import sys
import uuid
from collections.abc import Coroutine, Mapping
from typing import Any

import kopf
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.api_client import ApiClient

from ..api import GROUP, PLURAL, VERSION
from ..planner import Defaults, load_flag_catalog
from ..render import LABEL_SERVER
from . import metrics
from .health import serve_health
from .kube import Kube
from .leader import LeaseElector, LeaseTiming
from .options import Options, add_run_arguments
from .reconcile import Context, reconcile
from .scheduler import Scheduler

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


def registry_for(scheduler: Scheduler, options: Options) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await connection_info(options)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        tune(settings)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def server_changed(type: str, name: str, namespace: str | None, **_: Any) -> None:
        if namespace is None:
            return
        if type == "DELETED":
            scheduler.forget(namespace, name)
        else:
            scheduler.known.add((namespace, name))
            scheduler.request(namespace, name)
        metrics.SERVERS.set(len(scheduler.known))

    for group, version, plural in CHILDREN:

        @kopf.on.event(group, version, plural, labels={LABEL_SERVER: kopf.PRESENT}, registry=registry)
        async def child_changed(labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
            owner = labels.get(LABEL_SERVER)
            if owner and namespace and (namespace, owner) in scheduler.known:
                scheduler.request(namespace, owner)

    return registry


async def resync_forever(scheduler: Scheduler, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        for key in sorted(scheduler.known):
            scheduler.request(*key)
        await scheduler.idle()
        metrics.RESYNCS.inc()


def elector_for(options: Options, kube: Kube, identity: str) -> LeaseElector:
    namespace = options.leader_election_namespace or (options.namespaces[0] if options.namespaces else "default")
    timing = LeaseTiming(options.lease_seconds, options.renew_deadline_seconds, options.retry_period_seconds)
    return LeaseElector(kube, namespace, options.lease_name, identity, timing)


async def serve(options: Options) -> int:
    api = await api_client(options)
    kube = Kube(api)
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

    ctx = Context(
        kube=kube,
        catalog=load_flag_catalog(),
        defaults=Defaults(vllm_image=options.vllm_image, ollama_image=options.ollama_image),
        instance=identity,
        max_concurrent_rollouts=options.max_concurrent_rollouts,
    )
    scheduler = Scheduler(lambda ns, name: reconcile(ctx, ns, name))
    tasks.append(asyncio.create_task(resync_forever(scheduler, options.resync_seconds)))
    try:
        await cancel_on(
            lost,
            kopf.operator(
                registry=registry_for(scheduler, options),
                standalone=True,
                clusterwide=not options.namespaces,
                namespaces=list(options.namespaces),
            ),
        )
    finally:
        for task in tasks:
            task.cancel()
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

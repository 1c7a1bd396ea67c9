"""The operator at scale on the local cluster, against the floor of a plain client doing the same.

    .venv/bin/python bench/scale_bench.py --servers 1000

Starts its own local cluster, sized to the server count (kwok GPU nodes for twice the servers: the
floor's pods and the operator's), then in one run:

1. the floor: the child objects the operator would make for N servers (Deployment, Service,
   PodDisruptionBudget, rendered by the operator's own planner) applied by a plain concurrent client
   with no operator, timed until every Deployment has its pod ready;
2. the operator: N InferenceServers created by a concurrent client, timed until every one is Ready,
   with the API requests the operator sent to get there;
3. a full resync of every server: what a reconcile that changes nothing costs (requests, p50/p99);
4. meanwhile, the failover of one server with an Ollama fallback, measured beyond its
   activateAfterSeconds; and the operator's resident memory.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "hack"), str(ROOT)]

from kubernetes_asyncio import client, config  # noqa: E402
from kubernetes_asyncio.client.api_client import ApiClient  # noqa: E402
from tests.support.operator import OperatorProcess, Servers  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

from inference_operator.api import FIELD_MANAGER, GROUP, PLURAL, VERSION, InferenceServer  # noqa: E402
from inference_operator.controller.conditions import parse_time  # noqa: E402
from inference_operator.controller.facts import gpu_facts  # noqa: E402
from inference_operator.planner import Defaults, load_flag_catalog, plan  # noqa: E402
from inference_operator.planner.inputs import DEFAULT_OLLAMA_IMAGE, DEFAULT_VLLM_IMAGE  # noqa: E402
from inference_operator.render import objects  # noqa: E402
from localcluster import LocalCluster, binaries, default_shape  # noqa: E402

PREFIX = "inference_operator_"
SPEC: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
    "engine": {"image": "vllm/vllm-openai:v0.10.2"},
}
ACTIVATE_AFTER = 5
GPUS_PER_NODE = 16
CONCURRENCY = 32


class ScaledCluster(LocalCluster):
    """The local cluster with the client rate limits of its controllers raised, as large clusters run them:
    at the default 20 requests/s the controller manager alone needs 50 s to create 1,000 pods. The floor
    and the operator run on the same cluster, so both gain alike."""

    def _controller_manager_args(self, *args: Any, **kwargs: Any) -> list[str]:
        return [
            *super()._controller_manager_args(*args, **kwargs),
            "--kube-api-qps=400",
            "--kube-api-burst=800",
            "--concurrent-deployment-syncs=20",
            "--concurrent-replicaset-syncs=20",
            "--concurrent-service-endpoint-syncs=20",
        ]

    def _scheduler_args(self, *args: Any, **kwargs: Any) -> list[str]:
        return [*super()._scheduler_args(*args, **kwargs), "--kube-api-qps=400", "--kube-api-burst=800"]


def names(count: int) -> list[str]:
    return [f"s{i:04d}" for i in range(count)]


def total(metrics: dict[str, float], name: str) -> float:
    return sum(v for k, v in metrics.items() if k == PREFIX + name or k.startswith(PREFIX + name + "{"))


def _labels(key: str) -> dict[str, str]:
    inside = key[key.index("{") + 1 : key.rindex("}")]
    return dict((k, v.strip('"')) for k, _, v in (part.partition("=") for part in inside.split(",")))


def quantile(before: dict[str, float], after: dict[str, float], histogram: str, q: float, **match: str) -> float:
    """Prometheus' histogram_quantile over the observations between two scrapes (linear within a bucket)."""
    buckets: dict[float, float] = {}
    for key, value in after.items():
        if key.startswith(f"{PREFIX}{histogram}_bucket{{"):
            labels = _labels(key)
            if all(labels.get(k) == v for k, v in match.items()):
                bound = math.inf if labels["le"] == "+Inf" else float(labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + value - before.get(key, 0.0)
    ordered = sorted(buckets.items())
    count = ordered[-1][1] if ordered else 0.0
    if count <= 0:
        return math.nan
    rank, lower, below = q * count, 0.0, 0.0
    for bound, cumulative in ordered:
        if cumulative >= rank:
            if math.isinf(bound):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return lower


async def gather_bounded(jobs: Iterable[Callable[[], Awaitable[Any]]], limit: int = CONCURRENCY) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))


async def raw_list(api: ApiClient, path: str) -> list[dict[str, Any]]:
    """A LIST as plain JSON: the client's typed models cost seconds of CPU per 1,000 objects."""
    result = await api.call_api(
        path,
        "GET",
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        response_types_map={200: "object"},
        _return_http_data_only=True,
    )
    items: list[dict[str, Any]] = result.get("items") or []
    return items


async def poll_until(what: str, count: Callable[[], Awaitable[int]], target: int, timeout: float) -> float:
    """Seconds (monotonic clock) at which `count()` first reached `target`, polled every second."""
    await wait_for(count, lambda n: n >= target, timeout=timeout, what=what, interval=1.0)
    return time.perf_counter()


async def apply(api: ApiClient, obj: dict[str, Any]) -> None:
    plural = {"Deployment": "deployments", "Service": "services", "PodDisruptionBudget": "poddisruptionbudgets"}
    group = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    meta = obj["metadata"]
    await api.call_api(
        f"{group}/namespaces/{meta['namespace']}/{plural[obj['kind']]}/{meta['name']}",
        "PATCH",
        query_params=[("fieldManager", FIELD_MANAGER + "-floor"), ("force", "true")],
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
        body=obj,
        auth_settings=["BearerToken"],
        response_types_map={200: "object", 201: "object"},
        _return_http_data_only=True,
    )


async def floor(api: ApiClient, count: int) -> float:
    """The same children, applied by a plain client with no operator; seconds until all pods are ready."""
    raw_nodes = await raw_list(api, "/api/v1/nodes")
    facts = gpu_facts(raw_nodes, {}, "nvidia.com/gpu")
    catalog = load_flag_catalog()
    defaults = Defaults(vllm_image=DEFAULT_VLLM_IMAGE, ollama_image=DEFAULT_OLLAMA_IMAGE)
    children = []
    for name in names(count):
        server = InferenceServer.model_validate({"metadata": {"name": name, "namespace": "floor"}, "spec": SPEC})
        children.append(objects(plan(server, catalog, facts, defaults)))

    async def ready() -> int:
        deps = await raw_list(api, "/apis/apps/v1/namespaces/floor/deployments")
        return sum(1 for d in deps if int((d.get("status") or {}).get("readyReplicas") or 0) >= 1)

    async def one_server(objs: list[dict[str, Any]]) -> None:
        for obj in objs:
            await apply(api, obj)

    start = time.perf_counter()
    await gather_bounded([functools.partial(one_server, objs) for objs in children])
    done = await poll_until("the floor's pods ready", ready, count, timeout=1800)
    return done - start


class Profile:
    """py-spy sampling the operator process (when --profile is given), summarised by function."""

    def __init__(self, pid: int, enabled: bool) -> None:
        self.pid = pid
        self.enabled = enabled
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = Path(tempfile.mkdtemp()) / "profile.txt"

    def start(self) -> None:
        if self.enabled:
            args = ["py-spy", "record", "-p", str(self.pid), "-r", "100", "--format", "raw", "-o", str(self.out)]
            self.proc = subprocess.Popen([*args, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self, what: str, top: int = 14) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        inclusive: dict[str, int] = {}
        own: dict[str, int] = {}
        samples = 0
        for line in self.out.read_text().splitlines():
            stack, _, hits = line.rpartition(" ")
            frames = [_frame(f) for f in stack.split(";")]
            samples += int(hits)
            own[frames[-1]] = own.get(frames[-1], 0) + int(hits)
            for frame in set(frames):
                if not frame.startswith(("<", "run", "main", "cmd_run", "_run", "Runner", "BaseEventLoop", "Handle")):
                    inclusive[frame] = inclusive.get(frame, 0) + int(hits)
        print(f"profile of the operator, {what}: {samples} samples at 100 Hz")
        for title, table in (("inclusive", inclusive), ("self", own)):
            print(f"  by {title} share:")
            for frame, count in sorted(table.items(), key=lambda kv: -kv[1])[:top]:
                print(f"    {count / max(samples, 1):6.1%}  {frame}")


def _frame(text: str) -> str:
    """'function (path/to/module.py:12)' -> 'function (package/module.py)'."""
    name, _, where = text.partition(" (")
    path = where.rsplit(":", 1)[0]
    parts = path.split("/")
    return f"{name} ({'/'.join(parts[-2:])})"


def row(label: str, value: str) -> None:
    print(f"{label:<56} {value}", flush=True)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def failover(servers: Servers, name: str) -> tuple[float, float]:
    """Make the server's vLLM pod unready; (seconds to Ollama beyond activateAfter by the wall clock,
    and by the operator's own timestamps)."""
    obj = await servers.get(name)
    rev = obj["status"]["activeRevision"]
    unready_at = time.perf_counter()
    await servers.set_pod_readiness(name, rev, ready=False)
    await wait_for(lambda: servers.traffic(name), lambda t: t[0].get("inference-operator.dev/role") == "ollama",
                   timeout=ACTIVATE_AFTER + 120, what="traffic on Ollama", interval=0.05)  # fmt: skip
    wall = time.perf_counter() - unready_at - ACTIVATE_AFTER
    status = (await servers.wait_condition(name, "FallbackActive", "True", timeout=30))["status"]
    active = next(c for c in status["conditions"] if c["type"] == "FallbackActive")
    switched, since = parse_time(active["lastTransitionTime"]), parse_time(status.get("fallbackSince"))
    assert switched is not None
    assert since is not None
    return wall, (switched - since).total_seconds() - ACTIVATE_AFTER


async def measure(op: OperatorProcess, kubeconfig: Path, count: int, resync: float, profile: bool) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = CONCURRENCY * 2
    async with client.ApiClient(cfg) as api:
        floor_s = await floor(api, count)
        row("floor: the children by a plain client, all pods ready", f"{floor_s:.1f} s")

        op.start()
        servers = Servers(api, "bench")
        fallback_spec = {**SPEC, "fallback": {"ollama": {"model": "llama3.2:1b", "mode": "Standby",
                                                           "activateAfterSeconds": ACTIVATE_AFTER}}}  # fmt: skip

        async def ready() -> int:
            listed = await raw_list(api, f"/apis/{GROUP}/{VERSION}/namespaces/bench/{PLURAL}")
            return sum(
                1
                for s in listed
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (s.get("status") or {}).get("conditions") or []
                )
            )

        await wait_for(lambda: asyncio.to_thread(op.metrics), lambda m: True, timeout=60, what="operator up",
                       retry_on=(OSError,))  # fmt: skip
        pid = op.proc.pid if op.proc else 0
        sampling = Profile(pid, profile)
        sampling.start()
        start = time.perf_counter()
        await gather_bounded(
            [functools.partial(servers.create, n, SPEC) for n in names(count)]
            + [functools.partial(servers.create, "failover", fallback_spec)]
        )
        created = time.perf_counter() - start
        done = await poll_until("every server Ready", ready, count + 1, timeout=1800)
        ready_s = done - start
        sampling.stop("from the first create to all Ready")
        m = op.metrics()
        writes, reads = total(m, "api_writes_total"), total(m, "api_reads_total")
        row("servers", f"{count} (+1 with a fallback)")
        row("operator: servers created by the concurrent client", f"{created:.1f} s")
        row("operator: all Ready after the first create", f"{ready_s:.1f} s")
        row("ratio operator / floor", f"{ready_s / floor_s:.2f}")
        row("reconciles to Ready, per server", f"{total(m, 'reconcile_duration_seconds_count') / (count + 1):.2f}")
        mean = total(m, "reconcile_duration_seconds_sum") / max(total(m, "reconcile_duration_seconds_count"), 1)
        waited = total(m, "queue_wait_seconds_sum") / max(total(m, "queue_wait_seconds_count"), 1)
        row("reconcile to Ready: mean duration / mean queue wait", f"{mean * 1e3:.0f} / {waited * 1e3:.0f} ms")
        row("API writes to Ready, per server", f"{writes / (count + 1):.2f}")
        row("API reads to Ready, per server", f"{reads / (count + 1):.2f}")
        row("operator CPU to Ready", f"{cpu_seconds(pid):.1f} s")
        row("operator RSS with every server Ready", f"{rss_mib(pid):.1f} MiB")

        async def resyncs() -> float:
            return total(await asyncio.to_thread(op.metrics), "resyncs_total")

        base = await resyncs()
        await wait_for(resyncs, lambda r: r >= base + 1, timeout=resync * 3 + 600, what="a pass", interval=0.2)
        before = op.metrics()
        cpu_before = cpu_seconds(pid)
        sampling = Profile(pid, profile)
        sampling.start()
        fail = asyncio.create_task(failover(servers, "failover"))
        await wait_for(resyncs, lambda r: r >= base + 2, timeout=resync * 3 + 600, what="a full resync", interval=0.2)
        after = op.metrics()
        cpu_after = cpu_seconds(pid)
        sampling.stop("during a full resync")
        wall, own = await fail

        def delta(name: str) -> float:
            return total(after, name) - total(before, name)

        def ms(histogram: str, q: float, **match: str) -> str:
            return f"{quantile(before, after, histogram, q, **match) * 1e3:.1f}"

        noops = delta("noop_reconcile_duration_seconds_count")
        row("full resync of every server, spread over", f"{resync:.1f} s")
        row(
            "reconciles in the resync (of which no-op)",
            f"{delta('reconcile_duration_seconds_count'):.0f} ({noops:.0f})",
        )
        row("reads per no-op reconcile", f"{delta('noop_reconcile_api_reads_total') / max(noops, 1):.2f}")
        row("writes in the resync (the failover's included)", f"{delta('api_writes_total'):.0f}")
        noop = "noop_reconcile_duration_seconds"
        row("no-op reconcile p50 / p99", f"{ms(noop, 0.5)} / {ms(noop, 0.99)} ms")
        wait = "queue_wait_seconds"
        row(
            "queue wait p99: events / resyncs",
            f"{ms(wait, 0.99, priority='event')} / {ms(wait, 0.99, priority='resync')} ms",
        )
        row("operator CPU in the resync", f"{cpu_after - cpu_before:.1f} s")
        row("failover beyond activateAfterSeconds: wall / operator", f"{wall:.2f} / {own:.0f} s")
        row("operator RSS after the resync", f"{rss_mib(pid):.1f} MiB")
        row("machine load (1/5/15 min)", " ".join(f"{x:.1f}" for x in os.getloadavg()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--resync-seconds", type=float, default=None, help="default: 20 ms per server, at least 5 s")
    parser.add_argument("--max-concurrent-reconciles", type=int, default=None)
    parser.add_argument("--profile", action="store_true", help="sample the operator with py-spy (on PATH)")
    args = parser.parse_args()
    resync = args.resync_seconds or max(5.0, args.servers * 0.02)
    gpu_nodes = math.ceil(2 * (args.servers + 1) / GPUS_PER_NODE)
    cluster = ScaledCluster(
        name=f"bench-{os.getpid()}", shape=default_shape(gpu_nodes=gpu_nodes, gpus_per_node=GPUS_PER_NODE)
    )
    print(f"cluster: {gpu_nodes} kwok nodes of {GPUS_PER_NODE} GPUs, 2 CPU nodes")
    info = cluster.up(tie_to_parent=True)
    kubectl = [str(binaries()["kubectl"]), "--kubeconfig", info.kubeconfig]
    try:
        subprocess.run([*kubectl, "apply", "--server-side", "-f", str(ROOT / "crds")], check=True, capture_output=True)
        subprocess.run(
            [
                *kubectl,
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/inferenceservers.inference-operator.dev",
            ],
            check=True,
            capture_output=True,
        )
        for ns in ("bench", "floor"):
            subprocess.run([*kubectl, "create", "namespace", ns], check=True, capture_output=True)
        extra = ["--resync-seconds", str(resync)]
        if args.max_concurrent_reconciles:
            extra += ["--max-concurrent-reconciles", str(args.max_concurrent_reconciles)]
        with tempfile.TemporaryDirectory() as tmp:
            op = OperatorProcess(Path(info.kubeconfig), "bench", Path(tmp) / "operator.log", *extra)
            try:
                asyncio.run(measure(op, Path(info.kubeconfig), args.servers, resync, args.profile))
            except BaseException:
                print(op.log_tail(60), file=sys.stderr)
                raise
            finally:
                op.stop()
    finally:
        cluster.down()


if __name__ == "__main__":
    main()

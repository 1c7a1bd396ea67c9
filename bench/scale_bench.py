"""The operator at scale on the local cluster: time to Ready, API requests per server, resync cost.

    .venv/bin/python bench/scale_bench.py [--servers 30] [--resync-seconds 5] [--gpu-nodes 4]

Starts its own local cluster and operator process, creates N servers (1 GPU each; the default shape
has 32 GPUs), waits until all are Ready, then measures what three full resyncs cost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "hack"), str(ROOT)]

from kubernetes_asyncio import client, config  # noqa: E402
from tests.support.operator import OperatorProcess, Servers  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

from localcluster import LocalCluster, binaries, default_shape  # noqa: E402

WRITES = "inference_operator_api_writes_total"
READS = "inference_operator_api_reads_total"
RESYNCS = "inference_operator_resyncs_total"


def counter(op: OperatorProcess, prefix: str) -> float:
    return sum(v for k, v in op.metrics().items() if k.startswith(prefix))


async def measure(op: OperatorProcess, kubeconfig: Path, servers_count: int) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        servers = Servers(api, "bench")
        start = time.perf_counter()
        for i in range(servers_count):
            spec = {
                "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
                "engine": {"image": "vllm/vllm-openai:v0.10.2"},
            }
            await servers.create(f"s{i:03d}", spec)
        for i in range(servers_count):
            await servers.wait_condition(f"s{i:03d}", "Ready", "True", timeout=600)
        ready_s = time.perf_counter() - start
        writes, reads = counter(op, WRITES), counter(op, READS)
        print(f"servers                      {servers_count}")
        print(f"all Ready after              {ready_s:.1f} s")
        print(f"API writes to reach Ready    {writes:.0f} ({writes / servers_count:.1f} per server)")
        print(f"API reads to reach Ready     {reads:.0f} ({reads / servers_count:.1f} per server)")

        async def resyncs() -> float:
            return counter(op, RESYNCS)

        base = await resyncs()
        await wait_for(resyncs, lambda r: r >= base + 1, timeout=120, what="a resync", interval=0.5)
        w0, r0 = counter(op, WRITES), counter(op, READS)
        before = op.metrics()
        await wait_for(resyncs, lambda r: r >= base + 4, timeout=300, what="three resyncs", interval=0.5)
        w1, r1 = counter(op, WRITES), counter(op, READS)
        after = op.metrics()
        print(f"writes per full resync       {(w1 - w0) / 3:.1f}")
        print(f"reads per full resync        {(r1 - r0) / 3:.1f} ({(r1 - r0) / 3 / servers_count:.1f} per server)")
        count_key = "inference_operator_reconcile_duration_seconds_count"
        sum_key = "inference_operator_reconcile_duration_seconds_sum"
        count = after.get(count_key, 0.0) - before.get(count_key, 0.0)
        total = after.get(sum_key, 0.0) - before.get(sum_key, 0.0)
        print(f"no-op reconcile (in resyncs) mean {total / max(count, 1.0) * 1e3:.1f} ms over {count:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=30)
    parser.add_argument("--resync-seconds", type=float, default=5.0)
    parser.add_argument("--gpu-nodes", type=int, default=4)
    args = parser.parse_args()
    cluster = LocalCluster(name=f"bench-{os.getpid()}", shape=default_shape(gpu_nodes=args.gpu_nodes))
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
        subprocess.run([*kubectl, "create", "namespace", "bench"], check=True, capture_output=True)
        with tempfile.TemporaryDirectory() as tmp:
            op = OperatorProcess(
                Path(info.kubeconfig), "bench", Path(tmp) / "operator.log", "--resync-seconds", str(args.resync_seconds)
            )
            op.start()
            try:
                asyncio.run(measure(op, Path(info.kubeconfig), args.servers))
            finally:
                op.stop()
    finally:
        cluster.down()


if __name__ == "__main__":
    main()

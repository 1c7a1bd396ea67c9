"""Requests through every switch, on a real node of the local cluster: the data-plane tests' scenarios, more traffic.

    .venv/bin/python bench/traffic_bench.py [--requests 10000] [--clients 16] [--scenario bluegreen-switch ...]

Starts its own local cluster with one real node and an operator process per scenario, and prints one line per
scenario: `<scenario>: sent N, failed M, longest gap X s, apply to first answer Y s`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "hack"), str(ROOT)]

from kubernetes_asyncio import client, config  # noqa: E402
from tests.support.operator import OperatorProcess, Servers  # noqa: E402
from tests.support.traffic_scenarios import (  # noqa: E402
    NEVER_READY,
    REJECTED_COMMAND_LINE,
    Load,
    ScenarioResult,
    auto_bridge,
    bluegreen_switch,
    failover,
    operator_killed_mid_switch,
    rollback,
)

from localcluster import LocalCluster, binaries  # noqa: E402
from localcluster.shape import ClusterShape  # noqa: E402

Run = Callable[[Servers, Load, Callable[[], OperatorProcess], OperatorProcess], Awaitable[ScenarioResult]]
SCENARIOS: dict[str, Run] = {
    "bluegreen-switch": lambda s, load, start, op: bluegreen_switch(s, load),
    "auto-bridge": lambda s, load, start, op: auto_bridge(s, load, gpus=8),
    "rollback-refused-flags": lambda s, load, start, op: rollback(
        s, load, REJECTED_COMMAND_LINE, "rollback-refused-flags"
    ),
    "rollback-never-ready": lambda s, load, start, op: rollback(s, load, NEVER_READY, "rollback-never-ready"),
    "failover": lambda s, load, start, op: failover(s, load),
    "operator-killed-mid-switch": operator_killed_mid_switch,
}


def kubectl(kubeconfig: str, *args: str) -> None:
    subprocess.run([str(binaries()["kubectl"]), "--kubeconfig", kubeconfig, *args], check=True, capture_output=True)


async def run_scenario(kubeconfig: str, name: str, load: Load, logs: Path) -> ScenarioResult:
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    kubectl(kubeconfig, "create", "namespace", namespace)
    started: list[OperatorProcess] = []

    def start() -> OperatorProcess:
        op = OperatorProcess(Path(kubeconfig), namespace, logs / f"{name}-operator-{len(started)}.log")
        op.start()
        started.append(op)
        return op

    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    try:
        async with client.ApiClient(cfg) as api:
            first = start()
            return await SCENARIOS[name](Servers(api, namespace), load, start, first)
    finally:
        for op in started:
            op.stop()
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=true", "--timeout=180s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10000, help="at least this many requests per scenario")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="default: all")
    args = parser.parse_args()
    load = Load(clients=args.clients, min_requests=args.requests, max_seconds=900)
    cluster = LocalCluster(name=f"bench-traffic-{os.getpid()}", shape=ClusterShape(pools=()), real_nodes=1)
    info = cluster.up(tie_to_parent=True, timeout=180)
    try:
        kubectl(info.kubeconfig, "apply", "--server-side", "-f", str(ROOT / "crds"))
        kubectl(
            info.kubeconfig,
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/inferenceservers.inference-operator.dev",
        )
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.scenario or list(SCENARIOS):
                result = asyncio.run(run_scenario(info.kubeconfig, name, load, Path(tmp)))
                print(result.line(), flush=True)
    finally:
        cluster.down()


if __name__ == "__main__":
    main()

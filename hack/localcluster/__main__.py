"""hack/cluster up | down | status | kubeconfig | nodes"""

from __future__ import annotations

import argparse
import json
import sys
import time

import yaml

from .cluster import ClusterError, ClusterInfo, LocalCluster
from .realnode import RealNodeError
from .shape import default_shape
from .tools import ToolsMissing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/cluster", description=__doc__)
    parser.add_argument("--name", default="default", help="cluster name (state folder)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start etcd, the control plane and kwok with fake GPU nodes")
    up.add_argument("--gpu-nodes", type=int, default=4)
    up.add_argument("--gpus-per-node", type=int, default=8)
    up.add_argument("--cpu-nodes", type=int, default=2)
    up.add_argument("--gpu-product", default="NVIDIA-H100-80GB-HBM3")
    up.add_argument("--gpu-memory-mib", type=int, default=81559)
    up.add_argument("--real-nodes", type=int, default=0, help="real nodes (containerd, kubelet): 0 or 1")
    up.add_argument("--timeout", type=float, default=120.0)
    sub.add_parser("down", help="stop every process of the cluster and remove its state")
    sub.add_parser("status", help="print which processes run, as JSON")
    sub.add_parser("kubeconfig", help="print the admin kubeconfig path")
    nodes = sub.add_parser("nodes", help="print the fake GPU nodes as YAML, for a cluster that runs kwok (kind)")
    nodes.add_argument("--gpu-nodes", type=int, default=4)
    nodes.add_argument("--gpus-per-node", type=int, default=8)
    nodes.add_argument("--cpu-nodes", type=int, default=2)
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            shape = default_shape(
                gpu_nodes=args.gpu_nodes,
                gpus_per_node=args.gpus_per_node,
                cpu_nodes=args.cpu_nodes,
                gpu_product=args.gpu_product,
                gpu_memory_mib=args.gpu_memory_mib,
            )
            start = time.monotonic()
            info = LocalCluster(args.name, shape=shape, real_nodes=args.real_nodes).up(timeout=args.timeout)
            print(f"cluster {info.name!r} up in {time.monotonic() - start:.1f}s", file=sys.stderr)
            print(f"export KUBECONFIG={info.kubeconfig}")
        elif args.command == "down":
            LocalCluster(args.name).down()
        elif args.command == "status":
            status = LocalCluster(args.name).status()
            print(json.dumps(status, indent=2))
            return 0 if status["up"] else 1
        elif args.command == "nodes":
            shape = default_shape(gpu_nodes=args.gpu_nodes, gpus_per_node=args.gpus_per_node, cpu_nodes=args.cpu_nodes)
            print(yaml.safe_dump_all(shape.manifests(), sort_keys=False), end="")
        else:
            cluster = LocalCluster(args.name)
            print(ClusterInfo.load(cluster.state_dir).kubeconfig)
    except (ClusterError, RealNodeError, ToolsMissing, FileNotFoundError) as err:
        print(f"hack/cluster: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

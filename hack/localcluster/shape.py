"""The fake nodes of the local cluster: how many, and what each advertises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class NodePool:
    """A group of identical fake nodes.

    GPU nodes carry the labels NVIDIA's GPU feature discovery puts on real nodes, so code that reads
    `nvidia.com/gpu.product` and `nvidia.com/gpu.memory` (MiB) sees what it would see in a cluster.
    """

    prefix: str
    count: int
    cpu: str = "32"
    memory: str = "256Gi"
    gpus: int = 0
    gpu_resource: str = "nvidia.com/gpu"
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_memory_mib: int = 81559
    gpu_family: str = "hopper"
    labels: dict[str, str] = field(default_factory=dict)

    def node_names(self) -> list[str]:
        return [f"{self.prefix}-{i}" for i in range(self.count)]

    def node_labels(self, name: str) -> dict[str, str]:
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        if self.gpus:
            labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.count": str(self.gpus),
                    "nvidia.com/gpu.product": self.gpu_product,
                    "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
                    "nvidia.com/gpu.family": self.gpu_family,
                }
            )
        labels.update(self.labels)
        return labels

    def manifests(self) -> list[dict[str, Any]]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": "110"}
        if self.gpus:
            capacity[self.gpu_resource] = str(self.gpus)
        return [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": self.node_labels(name),
                    "annotations": {FAKE_NODE_ANNOTATION: "fake"},
                },
                "spec": {},
                "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
            }
            for name in self.node_names()
        ]


@dataclass(frozen=True)
class ClusterShape:
    pools: tuple[NodePool, ...]

    def manifests(self) -> list[dict[str, Any]]:
        return [m for pool in self.pools for m in pool.manifests()]

    def node_count(self) -> int:
        return sum(p.count for p in self.pools)


def default_shape(
    gpu_nodes: int = 4,
    gpus_per_node: int = 8,
    cpu_nodes: int = 2,
    gpu_product: str = "NVIDIA-H100-80GB-HBM3",
    gpu_memory_mib: int = 81559,
) -> ClusterShape:
    """4 nodes with 8 H100-80GB each and 2 CPU-only nodes, unless told otherwise."""
    pools = []
    if gpu_nodes:
        pools.append(
            NodePool(
                prefix="gpu",
                count=gpu_nodes,
                gpus=gpus_per_node,
                gpu_product=gpu_product,
                gpu_memory_mib=gpu_memory_mib,
            )
        )
    if cpu_nodes:
        pools.append(NodePool(prefix="cpu", count=cpu_nodes))
    return ClusterShape(pools=tuple(pools))

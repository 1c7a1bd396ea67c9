"""Cluster facts from node labels set by NVIDIA GPU feature discovery (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..planner import ClusterFacts
from ..planner.gpu_catalog import ComputeCapability, gpu_model

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
GPU_COMPUTE_MINOR_LABEL = "nvidia.com/gpu.compute.minor"


def _matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class NodeGpu:
    """What one node's labels say about its GPUs; the product catalog fills in what the labels leave out."""

    node: str
    gpus: int
    product: str | None
    memory_mib: int | None
    memory_from: str
    capability: ComputeCapability | None
    capability_from: str


def node_gpu(name: str, labels: dict[str, str], gpus: int) -> NodeGpu:
    product = labels.get(GPU_PRODUCT_LABEL) or None
    known = gpu_model(product) if product else None
    memory_text = labels.get(GPU_MEMORY_LABEL, "")
    memory: int | None = None
    memory_from = ""
    if memory_text.isdigit():
        memory, memory_from = int(memory_text), f"node label {GPU_MEMORY_LABEL}={memory_text}"
    elif known is not None:
        memory, memory_from = known.memory_mib, f"GPU catalog ({known.product})"
    major, minor = labels.get(GPU_COMPUTE_MAJOR_LABEL, ""), labels.get(GPU_COMPUTE_MINOR_LABEL, "")
    capability: ComputeCapability | None = None
    capability_from = ""
    if major.isdigit() and minor.isdigit():
        capability = ComputeCapability(int(major), int(minor))
        capability_from = f"node labels {GPU_COMPUTE_MAJOR_LABEL}/minor"
    elif known is not None:
        capability, capability_from = known.compute_capability, f"GPU catalog ({known.product})"
    return NodeGpu(name, gpus, product, memory, memory_from, capability, capability_from)


def gpu_facts(nodes: list[dict[str, Any]], node_selector: dict[str, str], gpu_resource: str) -> ClusterFacts:
    """The weakest GPU among the nodes a server may use (smallest memory, lowest compute capability), and the
    most GPUs one of them has."""
    candidates = []
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpus = int(str(allocatable.get(gpu_resource, "0")) or 0)
        if gpus > 0 and _matches(labels, node_selector):
            candidates.append(node_gpu(node["metadata"].get("name", ""), labels, gpus))
    if not candidates:
        return ClusterFacts()
    max_gpus = max(c.gpus for c in candidates)
    sized = [c for c in candidates if c.memory_mib is not None]
    capable = [c for c in candidates if c.capability is not None]
    memory_gib: float | None = None
    memory_source = ""
    product: str | None = None
    if sized:
        smallest = min(sized, key=lambda c: c.memory_mib or 0)
        assert smallest.memory_mib is not None
        memory_gib = round(smallest.memory_mib / 1024, 2)
        product = smallest.product
        memory_source = (
            f"{smallest.memory_from} ({smallest.product or 'unknown GPU'}, smallest of {len(sized)} GPU nodes)"
        )
    capability: ComputeCapability | None = None
    capability_source = ""
    if capable:
        weakest = min(capable, key=lambda c: c.capability or ComputeCapability(0, 0))
        capability = weakest.capability
        capability_source = (
            f"{weakest.capability_from} ({weakest.product or 'unknown GPU'}, lowest of {len(capable)} GPU nodes)"
        )
    return ClusterFacts(
        gpu_memory_gib=memory_gib,
        gpu_memory_source=memory_source,
        max_gpus_per_node=max_gpus,
        compute_capability=capability,
        compute_capability_source=capability_source,
        gpu_product=product,
    )

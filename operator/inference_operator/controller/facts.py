"""Cluster facts from node labels set by NVIDIA GPU feature discovery (pure)."""

from __future__ import annotations

from typing import Any

from ..planner import ClusterFacts

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def _matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def gpu_facts(nodes: list[dict[str, Any]], node_selector: dict[str, str], gpu_resource: str) -> ClusterFacts:
    """The smallest GPU memory among the nodes a server may use, and the most GPUs one of them has."""
    candidates = []
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpus = int(str(allocatable.get(gpu_resource, "0")) or 0)
        if gpus > 0 and _matches(labels, node_selector):
            candidates.append((labels, gpus))
    if not candidates:
        return ClusterFacts()
    max_gpus = max(g for _, g in candidates)
    sized = [
        (int(labels[GPU_MEMORY_LABEL]), labels)
        for labels, _ in candidates
        if labels.get(GPU_MEMORY_LABEL, "").isdigit()
    ]
    if not sized:
        return ClusterFacts(max_gpus_per_node=max_gpus)
    mib, labels = min(sized, key=lambda item: item[0])
    product = labels.get(GPU_PRODUCT_LABEL, "unknown GPU")
    return ClusterFacts(
        gpu_memory_gib=round(mib / 1024, 2),
        gpu_memory_source=f"node label {GPU_MEMORY_LABEL}={mib} ({product}, smallest of {len(sized)} GPU nodes)",
        max_gpus_per_node=max_gpus,
    )

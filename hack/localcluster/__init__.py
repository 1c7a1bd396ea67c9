"""A local Kubernetes control plane with kwok GPU nodes, for tests and the quickstart."""

from .cluster import ClusterError, ClusterInfo, LocalCluster, default_state_root
from .shape import ClusterShape, NodePool, default_shape
from .tools import ToolsMissing, binaries, cache_root

__all__ = [
    "ClusterError",
    "ClusterInfo",
    "ClusterShape",
    "LocalCluster",
    "NodePool",
    "ToolsMissing",
    "binaries",
    "cache_root",
    "default_shape",
    "default_state_root",
]

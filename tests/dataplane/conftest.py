"""The data-plane tier: one real node (containerd, kubelet, kube-proxy) instead of kwok, real pods, real traffic."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ClusterHandle


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterHandle]:
    """A local cluster whose only node is a real one, so every pod of this tier really runs."""
    if os.environ.get("KUBECONFIG"):
        pytest.skip("the data-plane tier runs on the local cluster's real node, with images built for it")
    from localcluster import LocalCluster
    from localcluster.realnode import iptables_rules, leftovers
    from localcluster.shape import ClusterShape

    rules_before = iptables_rules()
    local = LocalCluster(name=f"pytest-dataplane-{os.getpid()}", shape=ClusterShape(pools=()), real_nodes=1)
    info = local.up(tie_to_parent=True, timeout=180)
    try:
        yield ClusterHandle(kubeconfig=Path(info.kubeconfig), local=True, audit_log=Path(info.audit_log))
    finally:
        local.down()
        assert not local.status()["up"]
        # `down` leaves no process, mount, interface, cgroup or iptables rule of the real node behind.
        assert leftovers(local.state_dir, rules_before) == []

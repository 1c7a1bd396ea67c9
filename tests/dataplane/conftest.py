"""The data-plane tier: one real node (containerd, kubelet, kube-proxy) instead of kwok, real pods, real traffic."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CRD_FILE, ClusterHandle, kubectl


# Both fixtures are the package's own: the session ones of the other tiers stay on their kwok cluster, and this
# cluster (with its real node's processes) is gone once the tier's last test has run.
@pytest.fixture(scope="package")
def cluster() -> Iterator[ClusterHandle]:
    """A local cluster whose only node is a real one, so every pod of this tier really runs."""
    if os.environ.get("KUBECONFIG"):
        pytest.skip("the data-plane tier runs on the local cluster's real node, with images built for it")
    if os.geteuid() != 0:
        pytest.skip("a real node (containerd, kubelet, kube-proxy, iptables) needs root")
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


@pytest.fixture(scope="package")
def crd_installed(cluster: ClusterHandle) -> ClusterHandle:
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kubectl(
        cluster, "wait", "--for=condition=Established", "--timeout=60s", "crd/inferenceservers.inference-operator.dev"
    )
    return cluster

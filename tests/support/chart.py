"""The Helm chart rendered and installed with the real helm binary."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from render_install import ROOT, render
from tests.conftest import ClusterHandle, kubectl

CHART = ROOT / "charts" / "inference-operator"
NAMESPACED_VALUES = CHART / "ci" / "namespaced-values.yaml"


def helm_binary() -> str:
    from localcluster import binaries

    return str(binaries()["helm"])


def rendered(values: list[Path] | None = None, namespace: str = "inference-operator-system") -> list[dict[str, Any]]:
    text = render(helm_binary(), [str(v) for v in values or []], namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def helm(cluster: ClusterHandle, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_binary(), "--kubeconfig", str(cluster.kubeconfig), *args],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def service_account_kubeconfig(cluster: ClusterHandle, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount with a real token (no admin rights)."""
    token = kubectl(cluster, "create", "token", account, "-n", namespace, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    cluster_entry = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster_entry],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": cluster_entry["name"], "user": account}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path

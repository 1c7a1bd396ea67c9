"""The chart installed with helm; the operator runs with exactly the chart's ServiceAccount permissions."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient

from tests.conftest import ClusterHandle, kubectl
from tests.support.chart import CHART, helm, service_account_kubeconfig
from tests.support.examples import EXAMPLES
from tests.support.operator import OperatorProcess, Servers
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e
RELEASE = "io-e2e"


@pytest.fixture(params=["cluster-wide", "namespaced"])
async def installed(
    request: pytest.FixtureRequest, crd_installed: ClusterHandle, namespace: str, tmp_path: Path
) -> AsyncIterator[tuple[str, list[str], str | None]]:
    """The chart installed in its own namespace: (release namespace, operator arguments, watched namespace)."""
    release_ns = f"io-system-{uuid.uuid4().hex[:6]}"
    args = ["install", RELEASE, str(CHART), "--namespace", release_ns, "--create-namespace"]
    extra: list[str] = [
        "--leader-elect",
        "--leader-election-namespace",
        release_ns,
        "--lease-name",
        f"{RELEASE}-inference-operator-leader",
    ]
    watched = None
    if request.param == "namespaced":
        values = tmp_path / "values.yaml"
        values.write_text(yaml.safe_dump({"watchNamespaces": [namespace]}))
        args += ["--values", str(values)]
        watched = namespace
    helm(crd_installed, *args)
    yield release_ns, extra, watched
    helm(crd_installed, "uninstall", RELEASE, "--namespace", release_ns, "--wait")

    async def left_behind() -> list[str]:
        # helm's --wait covers the objects it deleted; their ReplicaSet and Pods go by garbage collection after.
        kinds = "all,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,leases"
        selector = f"app.kubernetes.io/instance={RELEASE}"
        out = await asyncio.to_thread(kubectl, crd_installed, "get", kinds, "-A", "-l", selector, "-o", "name")
        return out.stdout.split()

    try:
        await wait_for(left_behind, lambda left: left == [], timeout=60, what="nothing of the release left")
    finally:
        kubectl(crd_installed, "delete", "namespace", release_ns, "--wait=false")


def can_i(cluster: ClusterHandle, user: str, verb: str, resource: str, namespace: str) -> bool:
    """The API server's RBAC verdict for `user`, asked by impersonation (kubectl --as)."""
    resource, _, sub = resource.partition("/")
    subresource = [f"--subresource={sub}"] if sub else []
    done = kubectl(cluster, "auth", "can-i", verb, resource, *subresource, "-n", namespace, "--as", user, check=False)
    assert done.stdout.strip() in ("yes", "no"), done.stderr
    return done.stdout.strip() == "yes"


def test_chart_rbac_grants_the_operator_no_more_than_it_needs(
    installed: tuple[str, list[str], str | None], crd_installed: ClusterHandle, namespace: str
) -> None:
    release_ns, _, watched = installed
    user = f"system:serviceaccount:{release_ns}:{RELEASE}-inference-operator"
    needed = [
        ("watch", "inferenceservers.inference-operator.dev"),
        ("patch", "inferenceservers.inference-operator.dev/status"),
        ("patch", "deployments.apps"),
        ("create", "services"),
        ("create", "persistentvolumeclaims"),
        ("patch", "poddisruptionbudgets.policy"),
        ("watch", "pods"),
        ("create", "events"),
    ]
    never = [
        ("update", "inferenceservers.inference-operator.dev"),  # a user's spec is the user's
        ("delete", "persistentvolumeclaims"),  # a model cache is never deleted by the operator
        ("get", "secrets"),  # the HF token reaches the pod by reference only
        ("create", "pods"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
    ]
    for verb, resource in needed:
        assert can_i(crd_installed, user, verb, resource, namespace), (verb, resource)
    for verb, resource in never:
        assert not can_i(crd_installed, user, verb, resource, namespace), (verb, resource)
    if watched is not None:  # a namespaced install grants nothing outside the listed namespaces
        assert not can_i(crd_installed, user, "patch", "deployments.apps", "default")
        assert not can_i(crd_installed, user, "watch", "inferenceservers.inference-operator.dev", "default")


async def test_chart_rbac_is_enough_to_serve_switch_and_clean_up(
    installed: tuple[str, list[str], str | None],
    crd_installed: ClusterHandle,
    api: ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    release_ns, extra, watched = installed
    kubeconfig = service_account_kubeconfig(
        crd_installed, release_ns, f"{RELEASE}-inference-operator", tmp_path / "sa.kubeconfig"
    )
    operator = OperatorProcess(kubeconfig, watched, tmp_path / "operator.log", *extra)
    operator.start()
    try:
        servers = Servers(api, namespace)
        doc = yaml.safe_load((EXAMPLES / "mistral-7b-with-fallback.yaml").read_text())
        await servers.create("sample", doc["spec"])
        ready = await servers.wait_condition("sample", "Ready", "True", timeout=90)
        old = ready["status"]["activeRevision"]

        await servers.patch_spec("sample", {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}})
        await servers.wait_status(
            "sample", lambda s: s.get("activeRevision") not in (None, old) and s["rollout"]["result"] == "Succeeded",
            "model switch completed", timeout=90,
        )  # fmt: skip

        await servers.delete("sample")

        async def children() -> list[Any]:
            return await servers.deployments("sample")

        await wait_for(children, lambda d: not d, timeout=60, what="children garbage-collected")
        lease = await client.CoordinationV1Api(api).read_namespaced_lease(
            f"{RELEASE}-inference-operator-leader", release_ns
        )
        assert lease.spec.holder_identity
        metrics = operator.metrics()
        assert metrics.get("inference_operator_reconcile_errors_total", 0.0) == 0.0, operator.log_tail()
        assert "forbidden" not in operator.log_path.read_text().lower()
    finally:
        operator.stop()

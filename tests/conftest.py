"""Fixtures shared by every tier: a session cluster, a namespace per test, API clients."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.api_client import ApiClient

from tests.support.operator import OperatorProcess
from tests.support.wait import wait_for


@dataclass(frozen=True)
class ClusterHandle:
    kubeconfig: Path
    local: bool
    audit_log: Path | None = None


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterHandle]:
    """The cluster the integration and e2e tiers run against.

    With KUBECONFIG set (for example a kind cluster on a machine with Docker) that cluster is used
    as it is; otherwise the local control plane with kwok GPU nodes starts for this session and is
    torn down after it, its processes tied to this one so that none can outlive it.
    """
    external = os.environ.get("KUBECONFIG")
    if external:
        yield ClusterHandle(kubeconfig=Path(external), local=False)
        return
    from localcluster import LocalCluster

    local = LocalCluster(name=f"pytest-{os.getpid()}")
    info = local.up(tie_to_parent=True)
    try:
        yield ClusterHandle(kubeconfig=Path(info.kubeconfig), local=True, audit_log=Path(info.audit_log))
    finally:
        local.down()
        assert not local.status()["up"]


@pytest.fixture
async def api(cluster: ClusterHandle) -> AsyncIterator[ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    async with ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
async def namespace(api: ApiClient) -> AsyncIterator[str]:
    """A fresh namespace whose default service account exists, deleted after the test."""
    core = client.CoreV1Api(api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    await wait_for(
        lambda: core.list_namespaced_service_account(name),
        lambda sas: any(sa.metadata.name == "default" for sa in sas.items),
        timeout=30,
        what=f"default service account in {name}",
    )
    try:
        yield name
    finally:
        await core.delete_namespace(name)
        # Wait until it is gone, so that its pods no longer hold GPUs the next test may need.
        await wait_for(
            lambda: core.list_namespace(field_selector=f"metadata.name={name}"),
            lambda found: not found.items,
            timeout=120,
            what=f"namespace {name} deleted",
        )


ROOT = Path(__file__).resolve().parent.parent
CRD_FILE = ROOT / "crds" / "inferenceservers.inference-operator.dev.yaml"


def kubectl(cluster: ClusterHandle, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real kubectl of the pinned version, against the test cluster."""
    from localcluster import binaries

    return subprocess.run(
        [str(binaries()["kubectl"]), "--kubeconfig", str(cluster.kubeconfig), *args],
        check=check,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="session")
def crd_installed(cluster: ClusterHandle) -> ClusterHandle:
    """The generated InferenceServer CRD applied to the cluster and established."""
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kubectl(
        cluster, "wait", "--for=condition=Established", "--timeout=60s", "crd/inferenceservers.inference-operator.dev"
    )
    return cluster


@pytest.fixture
def operator_factory(
    crd_installed: ClusterHandle, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., OperatorProcess]]:
    """Starts `inference-operator run` for the test's namespace; stops it (and shows its log on failure)."""
    started: list[OperatorProcess] = []

    def start(*extra: str) -> OperatorProcess:
        proc = OperatorProcess(crd_installed.kubeconfig, namespace, tmp_path / f"operator-{len(started)}.log", *extra)
        proc.start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"--- operator log ({proc.log_path.name}) ---\n{proc.log_tail(80)}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report

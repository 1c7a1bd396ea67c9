"""The API server's own Pod Security admission accepts the pods the operator makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.operator import OperatorProcess, Servers
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration
Start = Callable[..., OperatorProcess]

ENFORCE = "pod-security.kubernetes.io/enforce"
ENGINE = {"image": "vllm/vllm-openai:v0.10.2"}


@pytest.fixture
def servers(api: ApiClient, namespace: str) -> Servers:
    return Servers(api, namespace)


async def enforce(servers: Servers, level: str) -> None:
    await servers.core.patch_namespace(servers.namespace, {"metadata": {"labels": {ENFORCE: level}}})


async def running_roles(servers: Servers, name: str) -> set[str]:
    pods = await servers.core.list_namespaced_pod(
        servers.namespace, label_selector=f"inference-operator.dev/server={name}"
    )
    return {
        p.metadata.labels["inference-operator.dev/role"]
        for p in pods.items
        if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    }


def with_fallback(**security: Any) -> dict[str, Any]:
    return {
        "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
        "engine": ENGINE,
        "podSecurity": security,
        "fallback": {"ollama": {"model": "llama3.2:1b", "store": {"enabled": False}, "podSecurity": security}},
    }


async def test_pods_pass_baseline_and_with_run_as_non_root_restricted(
    operator_factory: Start, servers: Servers
) -> None:
    operator_factory()
    await enforce(servers, "restricted")
    # The admission is live: a pod the restricted level forbids is refused.
    bad = client.V1Pod(
        metadata=client.V1ObjectMeta(name="root"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
    )
    with pytest.raises(ApiException) as refused:
        await servers.core.create_namespaced_pod(servers.namespace, bad)
    assert refused.value.status == 403

    await servers.create("strict", with_fallback(runAsNonRoot=True))
    await servers.wait_condition("strict", "Ready", "True", timeout=90)
    await wait_for(lambda: running_roles(servers, "strict"), lambda r: r == {"vllm", "ollama"}, timeout=60,
                   what="vLLM and Ollama pods admitted under restricted")  # fmt: skip

    await enforce(servers, "baseline")
    await servers.create("base", with_fallback())
    await servers.wait_condition("base", "Ready", "True", timeout=90)
    await wait_for(lambda: running_roles(servers, "base"), lambda r: r == {"vllm", "ollama"}, timeout=60,
                   what="vLLM and Ollama pods admitted under baseline")  # fmt: skip

"""The API server enforces the generated CRD: every example admitted, bad objects refused by field."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from inference_operator.api import GROUP, PLURAL, VERSION
from tests.conftest import ClusterHandle, kubectl
from tests.support.examples import example_documents

pytestmark = pytest.mark.integration

BASE: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "InferenceServer",
    "metadata": {"name": "bad"},
    "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}},
}


@pytest.fixture(scope="module")
def shared_namespace(crd_installed: ClusterHandle) -> Iterator[str]:
    """One namespace for the whole table: admission checks leave nothing running behind."""
    name = f"admission-{uuid.uuid4().hex[:8]}"
    kubectl(crd_installed, "create", "namespace", name)
    yield name
    kubectl(crd_installed, "delete", "namespace", name, "--wait=false")


def with_spec(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    obj["spec"].update(changes)
    return obj


def without_spec() -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    del obj["spec"]
    return obj


def long_name() -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    obj["metadata"]["name"] = "n" * 43
    return obj


# (case, object, the field the message must name, a phrase of the message)
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    ("no spec", without_spec(), "spec", "Required"),
    ("empty model name", with_spec(model={"name": ""}), "spec.model.name", ""),
    ("utilization above 1", with_spec(engine={"gpuMemoryUtilization": 1.5}), "spec.engine.gpuMemoryUtilization", ""),
    ("utilization 0", with_spec(engine={"gpuMemoryUtilization": 0}), "spec.engine.gpuMemoryUtilization", ""),
    (
        "tp a word",
        with_spec(engine={"tensorParallelSize": "many"}),
        "spec.engine.tensorParallelSize",
        "positive integer or 'auto'",
    ),
    ("tp zero", with_spec(engine={"tensorParallelSize": 0}), "spec.engine.tensorParallelSize", "positive integer"),
    (
        "tp x pp != gpus",
        with_spec(engine={"tensorParallelSize": 2}, resources={"gpus": 4}),
        "spec.resources.gpus",
        "must equal resources.gpus",
    ),
    ("memory not a quantity", with_spec(resources={"memory": "lots"}), "spec.resources.memory", "Kubernetes quantity"),
    ("zero replicas", with_spec(replicas=0), "spec.replicas", ""),
    ("unknown strategy", with_spec(rollout={"strategy": "Canary"}), "spec.rollout.strategy", "Unsupported value"),
    ("timeout too short", with_spec(rollout={"timeoutSeconds": 5}), "spec.rollout.timeoutSeconds", ""),
    (
        "fallback without model",
        with_spec(fallback={"ollama": {"enabled": True}}),
        "spec.fallback.ollama.model",
        "model is required",
    ),
    (
        "unknown fallback mode",
        with_spec(fallback={"ollama": {"model": "llama3.2:1b", "mode": "Sometimes"}}),
        "spec.fallback.ollama.mode",
        "Unsupported value",
    ),
    ("port out of range", with_spec(service={"port": 70000}), "spec.service.port", ""),
    ("unknown service type", with_spec(service={"type": "Ingress"}), "spec.service.type", "Unsupported value"),
    (
        "extra args without a flag",
        with_spec(engine={"extraArgs": ["nodash"]}),
        "spec.engine.extraArgs",
        "must start with a flag",
    ),
    ("two cache sources", with_spec(cache={"size": "10Gi", "existingClaim": "c"}), "spec.cache", "exactly one"),
    ("no cache source", with_spec(cache={"storageClassName": "fast"}), "spec.cache", "exactly one"),
    ("shared cache needs RWX", with_spec(replicas=2, cache={"size": "10Gi"}), "spec.cache.accessMode", "ReadWriteMany"),
    ("unknown dtype", with_spec(engine={"dtype": "int3"}), "spec.engine.dtype", "Unsupported value"),
    ("empty image", with_spec(engine={"image": ""}), "spec.engine.image", "at least 1 chars long"),
    ("name too long", long_name(), "metadata.name", "at most 42"),
    (
        "batched tokens below seqs",
        with_spec(engine={"maxNumSeqs": 256, "maxNumBatchedTokens": 128}),
        "spec.engine.maxNumBatchedTokens",
        "at least maxNumSeqs",
    ),
    (
        "env value and valueFrom",
        with_spec(
            engine={"env": [{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
        ),
        "spec.engine.env[0]",
        "not both",
    ),
    (
        "toleration Exists with value",
        with_spec(scheduling={"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
        "spec.scheduling.tolerations[0]",
        "takes no value",
    ),
    (
        "heads not a multiple of kv heads",
        with_spec(model={"name": "acme/m", "architecture": {"attentionHeads": 32, "kvHeads": 5}}),
        "spec.model.architecture.kvHeads",
        "multiple of kvHeads",
    ),
]


async def test_every_example_is_admitted(crd_installed: ClusterHandle, api: ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(api)
    docs = example_documents()
    for _name, doc in docs:
        created = await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)
        assert created["spec"]["model"]["name"] == doc["spec"]["model"]["name"]
        assert created["spec"]["engine"]["gpuMemoryUtilization"] > 0  # defaults applied by the API server
    listed = await custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    assert len(listed["items"]) == len(docs)


def test_invalid_table_is_large_enough() -> None:
    assert len(INVALID) >= 15


@pytest.mark.parametrize(("case", "obj", "field", "phrase"), INVALID, ids=[c[0] for c in INVALID])
async def test_invalid_objects_are_rejected_naming_the_field(
    api: ApiClient, shared_namespace: str, case: str, obj: dict[str, Any], field: str, phrase: str
) -> None:
    namespace = shared_namespace
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as rejected:
        await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj)
    assert rejected.value.status == 422, case
    message = json.loads(rejected.value.body or b"{}")["message"]
    assert field in message, message
    assert phrase in message, message

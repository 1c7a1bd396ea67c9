"""The generic client against kmock: what it sends, what it makes of the answers, what it counts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from inference_operator.api import FIELD_MANAGER
from inference_operator.controller import metrics
from inference_operator.controller.kube import Kube
from tests.support.kmock_api import kube_on, serve_replace, store

DEPLOYMENTS = "apps/v1/deployments"


@pytest.fixture
async def kube(kmock: Any) -> AsyncIterator[Kube]:
    async with kube_on(kmock) as kube:
        yield kube


def counted(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(f"inference_operator_{name}_total", labels) or 0.0


def deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": name}},
        "spec": {"replicas": replicas},
    }


async def test_get_of_an_absent_object_is_none(kube: Kube) -> None:
    assert await kube.get("apps/v1", "Deployment", "ns", "absent") is None


async def test_get_returns_the_object(kube: Kube, kmock: Any) -> None:
    store(kmock, DEPLOYMENTS, "ns", "a", deployment("a", replicas=3))
    got = await kube.get("apps/v1", "Deployment", "ns", "a")
    assert got is not None
    assert got["spec"]["replicas"] == 3


async def test_get_raises_other_errors(kube: Kube, kmock: Any) -> None:
    kmock["get", kmock.resource(DEPLOYMENTS)] << 500
    with pytest.raises(ApiException) as err:
        await kube.get("apps/v1", "Deployment", "ns", "a")
    assert err.value.status == 500


async def test_list_gives_items_their_api_version_and_kind(kube: Kube, kmock: Any) -> None:
    for name in ("a", "b"):
        item = deployment(name)
        del item["apiVersion"], item["kind"]  # list items come without them from the API server
        store(kmock, DEPLOYMENTS, "ns", name, item)
    items = await kube.list("apps/v1", "Deployment", "ns", {"app": "a", "tier": "x"})
    assert sorted(i["metadata"]["name"] for i in items) == ["a", "b"]
    assert {(i["apiVersion"], i["kind"]) for i in items} == {("apps/v1", "Deployment")}
    assert kmock[kmock.resource(DEPLOYMENTS)][-1].params["labelSelector"] == "app=a,tier=x"


async def test_apply_is_server_side_under_the_field_manager_with_force(kube: Kube, kmock: Any) -> None:
    store(kmock, DEPLOYMENTS, "ns", "a", deployment("a", replicas=1))
    result = await kube.apply(deployment("a", replicas=2))
    assert result["spec"]["replicas"] == 2
    sent = kmock["patch", kmock.resource(DEPLOYMENTS)][-1]
    assert sent.params["fieldManager"] == FIELD_MANAGER
    assert sent.params["force"] == "true"
    assert sent.headers["Content-Type"].startswith("application/apply-patch+yaml")
    assert sent.url.path == "/apis/apps/v1/namespaces/ns/deployments/a"


async def test_apply_of_a_subresource_goes_to_its_path(kube: Kube, kmock: Any) -> None:
    store(kmock, "inference-operator.dev/v1alpha1/inferenceservers", "ns", "s", {"spec": {}})
    doc = {"apiVersion": "inference-operator.dev/v1alpha1", "kind": "InferenceServer"}
    await kube.apply({**doc, "metadata": {"name": "s", "namespace": "ns"}, "status": {}}, subresource="status")
    sent = kmock["patch"][-1]
    assert sent.url.path == "/apis/inference-operator.dev/v1alpha1/namespaces/ns/inferenceservers/s/status"
    assert counted("api_writes", verb="apply", resource="inferenceservers/status") >= 1


async def test_scale_is_a_merge_patch_of_replicas(kube: Kube, kmock: Any) -> None:
    store(kmock, DEPLOYMENTS, "ns", "a", deployment("a", replicas=1))
    await kube.scale("ns", "a", 0)
    sent = kmock["patch", kmock.resource(DEPLOYMENTS)][-1]
    assert sent.data == {"spec": {"replicas": 0}}
    assert sent.headers["Content-Type"].startswith("application/merge-patch+json")
    assert kmock.objects[DEPLOYMENTS, "ns", "a"]["spec"]["replicas"] == 0


async def test_delete_removes_the_object_in_the_background(kube: Kube, kmock: Any) -> None:
    store(kmock, DEPLOYMENTS, "ns", "a", deployment("a"))
    await kube.delete("apps/v1", "Deployment", "ns", "a")
    assert kmock.objects[DEPLOYMENTS, "ns", "a"].deleted
    assert kmock["delete"][-1].data == {"propagationPolicy": "Background"}


async def test_delete_of_an_absent_object_is_no_error(kube: Kube) -> None:
    await kube.delete("apps/v1", "Deployment", "ns", "absent")


async def test_delete_raises_other_errors(kube: Kube, kmock: Any) -> None:
    kmock["delete", kmock.resource(DEPLOYMENTS)] << 403
    store(kmock, DEPLOYMENTS, "ns", "a", deployment("a"))
    with pytest.raises(ApiException) as err:
        await kube.delete("apps/v1", "Deployment", "ns", "a")
    assert err.value.status == 403


async def test_create_and_replace(kube: Kube, kmock: Any) -> None:
    serve_replace(kmock, DEPLOYMENTS)
    created = await kube.create(deployment("a"))
    assert kmock.objects[DEPLOYMENTS, "ns", "a"]["spec"]["replicas"] == 1
    created["spec"]["replicas"] = 4
    await kube.replace(created)
    assert kmock.objects[DEPLOYMENTS, "ns", "a"]["spec"]["replicas"] == 4
    assert kmock["put", kmock.resource(DEPLOYMENTS)][-1].url.path == "/apis/apps/v1/namespaces/ns/deployments/a"


async def test_every_request_is_counted_by_verb_and_resource(kube: Kube, kmock: Any) -> None:
    serve_replace(kmock, DEPLOYMENTS)
    reads = counted("api_reads", resource="deployments")
    writes = {verb: counted("api_writes", verb=verb, resource="deployments") for verb in ("create", "update", "apply")}
    writes["patch"] = counted("api_writes", verb="patch", resource="deployments")
    writes["delete"] = counted("api_writes", verb="delete", resource="deployments")

    created = await kube.create(deployment("a"))
    await kube.get("apps/v1", "Deployment", "ns", "a")
    await kube.list("apps/v1", "Deployment", "ns")
    await kube.replace(created)
    await kube.apply(deployment("a", replicas=2))
    await kube.scale("ns", "a", 3)
    await kube.delete("apps/v1", "Deployment", "ns", "a")
    await kube.delete("apps/v1", "Deployment", "ns", "a")  # absent by now: still a request sent

    assert counted("api_reads", resource="deployments") - reads == 2
    after = {verb: counted("api_writes", verb=verb, resource="deployments") for verb in writes}
    assert {verb: after[verb] - writes[verb] for verb in writes} == {
        "create": 1, "update": 1, "apply": 1, "patch": 1, "delete": 2
    }  # fmt: skip

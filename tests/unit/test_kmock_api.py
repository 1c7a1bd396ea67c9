"""The emulator the reconcile tests run against does what the API server does for the operator's requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from inference_operator.api import API_VERSION, KIND
from inference_operator.controller.kube import Kube
from tests.support.kmock_api import ApiServer, kube_on, matches, store

pytestmark = pytest.mark.kmock(cls=ApiServer)

DEPLOYMENTS = "apps/v1/deployments"
SERVERS = f"{API_VERSION}/inferenceservers"


@pytest.fixture
async def kube(kmock: ApiServer) -> AsyncIterator[Kube]:
    kmock.clock = lambda: datetime(2026, 1, 1, 12, tzinfo=UTC)
    async with kube_on(kmock) as kube:
        yield kube


def deployment(name: str, labels: dict[str, str], replicas: int = 1) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "labels": labels}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"replicas": replicas}}


async def test_apply_creates_a_missing_object_with_what_the_api_server_stamps(kube: Kube, kmock: ApiServer) -> None:
    created = await kube.apply(deployment("a", {"app": "a"}))
    assert created["spec"] == {"replicas": 1}
    meta = kmock.objects[DEPLOYMENTS, "ns", "a"]["metadata"]
    assert (meta["generation"], meta["creationTimestamp"], meta["resourceVersion"]) == (1, "2026-01-01T12:00:00Z", "1")
    assert meta["uid"]


async def test_apply_replaces_what_it_sends_keeps_status_and_counts_spec_generations(
    kube: Kube, kmock: ApiServer
) -> None:
    await kube.apply(deployment("a", {"app": "a"}))
    live = kmock.objects[DEPLOYMENTS, "ns", "a"].raw
    store(kmock, DEPLOYMENTS, "ns", "a", {**live, "status": {"readyReplicas": 1}})
    await kube.apply(deployment("a", {"tier": "x"}, replicas=2))
    await kube.apply(deployment("a", {"tier": "x"}, replicas=2))
    obj = kmock.objects[DEPLOYMENTS, "ns", "a"]
    assert obj["spec"] == {"replicas": 2}
    assert obj["status"] == {"readyReplicas": 1}
    assert obj["metadata"]["labels"] == {"app": "a", "tier": "x"}
    assert obj["metadata"]["generation"] == 2


async def test_status_apply_needs_the_object_and_a_status_that_fits_the_schema(kube: Kube, kmock: ApiServer) -> None:
    doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "s", "namespace": "ns"}}
    with pytest.raises(ApiException) as missing:
        await kube.apply({**doc, "status": {"phase": "Ready"}}, subresource="status")
    assert missing.value.status == 404
    store(kmock, SERVERS, "ns", "s", {**doc, "spec": {"x": 1}})
    with pytest.raises(ApiException) as invalid:
        await kube.apply({**doc, "status": {"replicas": "three"}}, subresource="status")
    assert invalid.value.status == 422
    await kube.apply({**doc, "status": {"phase": "Ready"}}, subresource="status")
    assert kmock.objects[SERVERS, "ns", "s"]["status"] == {"phase": "Ready"}
    assert kmock.objects[SERVERS, "ns", "s"]["spec"] == {"x": 1}


async def test_lists_honour_label_selectors_and_every_known_kind_lists(kube: Kube, kmock: ApiServer) -> None:
    for name, labels in (("a", {"app": "a", "tier": "x"}), ("b", {"app": "b", "tier": "x"})):
        store(kmock, DEPLOYMENTS, "ns", name, deployment(name, labels))
    assert [
        d["metadata"]["name"] for d in await kube.list("apps/v1", "Deployment", "ns", {"tier": "x", "app": "b"})
    ] == ["b"]
    assert len(await kube.list("apps/v1", "Deployment", "ns", {"tier": "x"})) == 2
    assert await kube.list("v1", "PersistentVolumeClaim", "ns") == []


async def test_a_created_object_with_a_generate_name_gets_a_name(kube: Kube, kmock: ApiServer) -> None:
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "s.", "namespace": "ns"}}
    first, second = await kube.create(event), await kube.create(event)
    assert first["metadata"]["name"].startswith("s.")
    assert first["metadata"]["name"] != second["metadata"]["name"]


def test_selectors_are_equalities() -> None:
    assert matches("a=1,b==2", {"a": "1", "b": "2", "c": "3"})
    assert not matches("a=1", {"a": "2"})
    assert matches("", {})
    with pytest.raises(ValueError, match="not an equality"):
        matches("a!=1", {"a": "2"})

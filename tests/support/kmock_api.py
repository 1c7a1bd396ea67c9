"""The operator's Kube client against kmock's Kubernetes emulator (unit tests of code that talks to the API).

kmock keeps objects but no resourceVersions and does not serve PUT; `serve_replace` adds a PUT that
replaces an object only when the request carries its current resourceVersion (409 otherwise), as the
API server's optimistic concurrency does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import kmock as km
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient

from inference_operator.controller.kube import Kube

Response: Any = km.Response  # type: ignore[attr-defined]  # public, though missing from kmock.__all__


@asynccontextmanager
async def kube_on(server: Any) -> AsyncIterator[Kube]:
    configuration = client.Configuration(host=str(server.url).rstrip("/"))
    async with ApiClient(configuration) as api:
        yield Kube(api)


def store(server: Any, resource: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Write an object as another client would: a new resourceVersion each time."""
    key = (resource, namespace, name)
    try:
        previous = server.objects[key].raw if not server.objects[key].deleted else {}
    except KeyError:
        previous = {}
    version = int((previous.get("metadata") or {}).get("resourceVersion") or 0) + 1
    doc = dict(body)
    doc["metadata"] = {**(body.get("metadata") or {}), "name": name, "namespace": namespace}
    doc["metadata"]["resourceVersion"] = str(version)
    server.objects[key] = doc
    return doc


def serve_replace(server: Any, resource: str) -> None:
    def replace(request: km.Request) -> Any:
        key = (resource, request.namespace, request.name)
        try:
            current = server.objects[key].raw
        except (KeyError, ValueError):
            return Response(status=404, payload={"kind": "Status", "code": 404, "reason": "NotFound"})
        sent = (request.data.get("metadata") or {}).get("resourceVersion")
        if sent != (current.get("metadata") or {}).get("resourceVersion"):
            return Response(status=409, payload={"kind": "Status", "code": 409, "reason": "Conflict"})
        assert request.namespace is not None
        assert request.name is not None
        return store(server, resource, request.namespace, request.name, request.data)

    server["put", km.resource(resource)] << replace

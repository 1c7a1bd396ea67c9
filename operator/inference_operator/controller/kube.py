"""A small generic client over kubernetes_asyncio: get, list, server-side apply, delete, scale.

Every request is counted in the metrics, writes by verb and resource, so that tests and benchmarks
can check what a reconcile costs.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from ..api import API_VERSION, FIELD_MANAGER, KIND, PLURAL
from . import metrics

# (apiVersion, kind) -> (path prefix, plural, namespaced)
RESOURCES: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("v1", "Pod"): ("/api/v1", "pods", True),
    ("v1", "Service"): ("/api/v1", "services", True),
    ("v1", "PersistentVolumeClaim"): ("/api/v1", "persistentvolumeclaims", True),
    ("v1", "Event"): ("/api/v1", "events", True),
    ("v1", "Node"): ("/api/v1", "nodes", False),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments", True),
    ("policy/v1", "PodDisruptionBudget"): ("/apis/policy/v1", "poddisruptionbudgets", True),
    ("discovery.k8s.io/v1", "EndpointSlice"): ("/apis/discovery.k8s.io/v1", "endpointslices", True),
    ("coordination.k8s.io/v1", "Lease"): ("/apis/coordination.k8s.io/v1", "leases", True),
    (API_VERSION, KIND): (f"/apis/{API_VERSION}", PLURAL, True),
}


def _path(api_version: str, kind: str, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    prefix, plural, namespaced = RESOURCES[(api_version, kind)]
    path = prefix + (f"/namespaces/{namespace}" if namespaced and namespace else "") + f"/{plural}"
    if name:
        path += f"/{name}"
    if sub:
        path += f"/{sub}"
    return path


def selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class Kube:
    def __init__(self, api: ApiClient) -> None:
        self.api = api

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        return await self.api.call_api(
            path,
            method,
            query_params=query or [],
            header_params=headers,
            body=body,
            response_types_map={200: "object", 201: "object", 202: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=True,
        )

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        metrics.API_READS.labels(RESOURCES[(api_version, kind)][1]).inc()
        try:
            result: dict[str, Any] = await self._call("GET", _path(api_version, kind, namespace, name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return result

    async def list(
        self, api_version: str, kind: str, namespace: str | None, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        metrics.API_READS.labels(RESOURCES[(api_version, kind)][1]).inc()
        query = [("labelSelector", selector(labels))] if labels else []
        result = await self._call("GET", _path(api_version, kind, namespace), query=query)
        items: list[dict[str, Any]] = result.get("items") or []
        item_kind = kind
        for item in items:  # list items carry no apiVersion/kind of their own
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", item_kind)
        return items

    async def apply(self, obj: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        """Server-side apply under the operator's field manager, taking fields back from hand edits."""
        meta = obj["metadata"]
        resource = RESOURCES[(obj["apiVersion"], obj["kind"])][1]
        metrics.API_WRITES.labels("apply", resource + (f"/{subresource}" if subresource else "")).inc()
        result: dict[str, Any] = await self._call(
            "PATCH",
            _path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], subresource),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            body=obj,
            content_type="application/apply-patch+yaml",
        )
        return result

    async def scale(self, namespace: str, name: str, replicas: int) -> None:
        metrics.API_WRITES.labels("patch", "deployments").inc()
        await self._call(
            "PATCH",
            _path("apps/v1", "Deployment", namespace, name),
            query=[("fieldManager", FIELD_MANAGER)],
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )

    async def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        metrics.API_WRITES.labels("delete", RESOURCES[(api_version, kind)][1]).inc()
        try:
            await self._call(
                "DELETE",
                _path(api_version, kind, namespace, name),
                body={"propagationPolicy": "Background"},
            )
        except ApiException as err:
            if err.status != 404:
                raise

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        metrics.API_WRITES.labels("create", RESOURCES[(obj["apiVersion"], obj["kind"])][1]).inc()
        result: dict[str, Any] = await self._call(
            "POST", _path(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace")), body=obj
        )
        return result

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        metrics.API_WRITES.labels("update", RESOURCES[(obj["apiVersion"], obj["kind"])][1]).inc()
        result: dict[str, Any] = await self._call(
            "PUT", _path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]), body=obj
        )
        return result

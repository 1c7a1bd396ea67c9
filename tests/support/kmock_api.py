"""The operator's Kube client against kmock's Kubernetes emulator (unit tests of code that talks to the API).

kmock keeps objects but no resourceVersions and does not serve PUT; `serve_replace` adds a PUT that
replaces an object only when the request carries its current resourceVersion (409 otherwise), as the
API server's optimistic concurrency does. `ApiServer` adds what a reconcile relies on: server-side apply
that creates objects, label selectors on lists, and the metadata the API server stamps on new objects.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import attrs
import kmock as km
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient
from pydantic import ValidationError

from inference_operator.api import PLURAL
from inference_operator.api.status import InferenceServerStatus
from inference_operator.controller.kube import RESOURCES, Kube

Response: Any = km.Response  # type: ignore[attr-defined]  # public, though missing from kmock.__all__


@asynccontextmanager
async def kube_on(server: Any) -> AsyncIterator[Kube]:
    configuration = client.Configuration(host=str(server.url).rstrip("/"))
    async with ApiClient(configuration) as api:
        yield Kube(api)


def store(
    server: Any, resource: str | km.resource, namespace: str | None, name: str, body: dict[str, Any]
) -> dict[str, Any]:
    """Write an object as another client would: a new resourceVersion each time (namespace None: cluster-wide)."""
    key = (resource, namespace, name)
    try:
        previous = server.objects[key].raw if not server.objects[key].deleted else {}
    except KeyError:
        previous = {}
    version = int((previous.get("metadata") or {}).get("resourceVersion") or 0) + 1
    doc = dict(body)
    doc["metadata"] = {**(body.get("metadata") or {}), "name": name}
    if namespace is not None:
        doc["metadata"]["namespace"] = namespace
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


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def matches(selector: str, labels: dict[str, str]) -> bool:
    """An equality label selector (`k=v,k2==v2`), the only kind the operator sends."""
    for term in filter(None, selector.split(",")):
        key, sep, value = term.partition("=")
        if not sep or key.endswith("!"):
            raise ValueError(f"label selector term {term!r} is not an equality")
        if labels.get(key) != value.removeprefix("="):
            return False
    return True


@attrs.define(kw_only=True)
class ApiServer(km.KubernetesEmulator):
    """kmock's emulator plus what the API server does for the operator's requests.

    - Server-side apply (PATCH as application/apply-patch+yaml) creates a missing object. On an existing one
      it merges labels and annotations and replaces every other section it sends, as it does for the only
      manager of those fields; applied to the status subresource it replaces status alone, and applied to
      the object it leaves status alone.
    - Created objects get a uid, a creationTimestamp (from `clock`) and generation 1; generation grows when
      an apply changes the spec. Every write gets a new resourceVersion. A POST with only a generateName
      gets a name.
    - A status applied to an InferenceServer is checked against the model the CRD's status schema is made from
      (422 Invalid when it does not fit; stricter than the API server, which prunes unknown fields).
    - Lists honour equality label selectors, and every resource the operator's client knows can be listed
      (an empty list, not a 404, before the first object of its kind exists).

    Use it with `pytestmark = pytest.mark.kmock(cls=ApiServer)`.
    """

    clock: Callable[[], datetime] = utcnow
    _created: int = 0

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for (api_version, kind), (_, plural, namespaced) in RESOURCES.items():
            self.resources[f"{api_version}/{plural}"] = km.ResourceInfo(namespaced=namespaced, kind=kind)

    async def _handle(self, request: km.Request) -> web.StreamResponse:
        if request.resource is not None and request.action == km.action.CREATE and isinstance(request.data, dict):
            self._stamp(request.data.setdefault("metadata", {}))
        if request.resource is not None and request.name and "apply-patch" in request.headers.get("Content-Type", ""):
            async with self._lock:
                self._apply(request)
            # Answer with the stored object, skipping the emulator's own merge of the body into it.
            return await km.RawHandler._handle(self, request)
        return await super()._handle(request)

    async def _serve_list(self, request: km.Request) -> km.Payload:
        answer = await super()._serve_list(request)
        selector = request.params.get("labelSelector", "")
        assert isinstance(answer, dict)
        items = answer["items"]
        answer["items"] = [i for i in items if matches(selector, (i.get("metadata") or {}).get("labels") or {})]
        return answer

    def _stamp(self, meta: dict[str, Any]) -> None:
        self._created += 1
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self._created:05d}"
        meta.setdefault("uid", f"uid-{self._created:05d}")
        meta.setdefault("creationTimestamp", self.clock().strftime("%Y-%m-%dT%H:%M:%SZ"))
        meta.setdefault("generation", 1)

    def _apply(self, request: km.Request) -> None:
        assert request.resource is not None
        assert request.name is not None
        key = (request.resource, request.namespace, request.name)
        sent: dict[str, Any] = request.data
        try:
            current = None if self.objects[key].deleted else copy.deepcopy(self.objects[key].raw)
        except KeyError:
            current = None
        if current is None:
            if request.subresource:
                raise km.KubernetesObjectNotFoundError()
            doc = {k: copy.deepcopy(v) for k, v in sent.items() if k != "status"}
            self._stamp(doc.setdefault("metadata", {}))
        elif request.subresource == "status":
            if request.resource.plural == PLURAL:
                try:
                    InferenceServerStatus.model_validate(sent.get("status") or {})
                except ValidationError as err:
                    raise km.KubernetesError(status=422, reason="Invalid", message=str(err)) from err
            doc = {**current, "status": copy.deepcopy(sent.get("status"))}
        else:
            doc = {**current, **{k: copy.deepcopy(v) for k, v in sent.items() if k not in ("metadata", "status")}}
            meta, given = doc["metadata"], sent.get("metadata") or {}
            for part in ("labels", "annotations"):
                if part in given:
                    meta[part] = {**(meta.get(part) or {}), **given[part]}
            if "ownerReferences" in given:
                meta["ownerReferences"] = given["ownerReferences"]
            if doc.get("spec") != current.get("spec"):
                meta["generation"] = int(meta.get("generation") or 0) + 1
        store(self, request.resource, request.namespace, request.name, doc)

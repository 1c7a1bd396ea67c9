"""Watch-fed caches of the servers, their children and the nodes: reads that send no API request.

kopf's watches feed them (the children's watches are filtered by the API server on the server
label). `Reads` has the signatures of `Kube.get` and `Kube.list`, so reconcile code reads the
caches as it would read the API server. Writes go to the API server through `WriteThroughKube`,
whose responses refresh the caches at once: the next reconcile never sees a state older than its
own writes, even when the watch event of that write is still on its way.

An object is only ever replaced by one with a higher resourceVersion (a late watch event cannot undo
a newer write response), and a deletion leaves a short-lived tombstone so that a write response that
raced with the deletion does not bring the object back. The caches keep what reconciles read: no
field managers, of a Pod no spec but its node, of a Node only its labels and resources.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from ..api import API_VERSION, KIND
from ..render import LABEL_SERVER
from . import metrics
from .kube import RESOURCES, Kube, _path

log = logging.getLogger("inference_operator.cache")
Kind = tuple[str, str]  # (apiVersion, kind)
Name = tuple[str | None, str]  # (namespace, name)

SERVERS: Kind = (API_VERSION, KIND)
NODES: Kind = ("v1", "Node")
CHILD_KINDS: tuple[Kind, ...] = (
    ("apps/v1", "Deployment"),
    ("v1", "Pod"),
    ("v1", "Service"),
    ("v1", "PersistentVolumeClaim"),
    ("policy/v1", "PodDisruptionBudget"),
    ("discovery.k8s.io/v1", "EndpointSlice"),
)
TOMBSTONE_SECONDS = 300.0


class Reader(Protocol):
    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...

    async def list(
        self, api_version: str, kind: str, namespace: str | None, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]: ...


def resource_version(obj: dict[str, Any]) -> int | None:
    """resourceVersions are opaque to clients, but etcd's are integers: compared when both parse."""
    value = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(value))
    except ValueError:
        return None


def _older(candidate: int | None, than: int | None) -> bool:
    return candidate is not None and than is not None and candidate < than


def _copy(value: Any) -> Any:
    """A deep copy of JSON data (several times faster than copy.deepcopy): callers may change what they read."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _compact(value: Any) -> Any:
    """A copy sharing its keys and short strings with every other cached object: parsed JSON does not."""
    if isinstance(value, dict):
        return {sys.intern(k): _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    if isinstance(value, str) and len(value) <= 64:
        return sys.intern(value)
    return value


def _trimmed(obj: Any, kind: str) -> dict[str, Any]:
    """What reconciles read, without what they never do: field managers anywhere; of a Pod, its spec but
    for the node; of a node, all but its labels and resources (every reconcile reads every node)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    if kind == "Node":
        status = obj.get("status") or {}
        return {
            "apiVersion": obj.get("apiVersion"),
            "kind": kind,
            "metadata": _compact({k: meta[k] for k in ("name", "uid", "resourceVersion", "labels") if k in meta}),
            "status": _compact({k: status[k] for k in ("allocatable", "capacity") if k in status}),
        }
    out = {k: v for k, v in obj.items() if k != "metadata"}
    if kind == "Pod":
        node = (out.get("spec") or {}).get("nodeName")
        out["spec"] = {"nodeName": node} if node else {}
    out["metadata"] = meta
    compacted: dict[str, Any] = _compact(out)
    return compacted


def _matches(obj: dict[str, Any], labels: dict[str, str]) -> bool:
    have = obj["metadata"].get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


class ObjectCache:
    """The objects of one kind by namespace and name, and by the server they belong to."""

    def __init__(self, kind: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.kind = kind
        self._clock = clock
        self._objects: dict[str | None, dict[str, dict[str, Any]]] = {}
        self._by_server: dict[Name, set[str]] = {}
        self._tombstones: OrderedDict[Name, tuple[int | None, float]] = OrderedDict()
        self.version = 0  # counts changes

    def __len__(self) -> int:
        return sum(len(names) for names in self._objects.values())

    def observe(self, obj: Any) -> bool:
        """Keep `obj` unless the cache holds a newer version of it (or saw it deleted later); True if kept."""
        meta = obj.get("metadata") or {}
        ns, name, rv = meta.get("namespace"), meta.get("name"), resource_version(obj)
        if not name:
            return False
        current = self._objects.get(ns, {}).get(name)
        if current is not None and (_older(rv, resource_version(current)) or current is obj):
            return False
        tombstone = self._tombstones.get((ns, name))
        if tombstone is not None:
            if tombstone[0] is not None and rv is not None and rv <= tombstone[0]:
                return False
            del self._tombstones[(ns, name)]
        if current is not None:
            self._unindex(ns, name, current)
        stored = _trimmed(obj, self.kind)
        self.version += 1
        self._objects.setdefault(ns, {})[name] = stored
        owner = (stored["metadata"].get("labels") or {}).get(LABEL_SERVER)
        if owner is not None:
            self._by_server.setdefault((ns, owner), set()).add(name)
        return True

    def remove(self, obj: Any) -> None:
        """A DELETED event: forget the object unless a newer object of that name is already known."""
        meta = obj.get("metadata") or {}
        ns, name, rv = meta.get("namespace"), str(meta.get("name")), resource_version(obj)
        current = self._objects.get(ns, {}).get(name)
        if current is not None and _older(rv, resource_version(current)):
            return  # deleted, then created again: the new object stays
        if current is not None:
            self._forget(ns, name, current)
        earlier = self._tombstones.get((ns, name))
        if earlier is not None and _older(rv, earlier[0]):
            rv = earlier[0]  # a late event of an earlier deletion
        self._tombstones[(ns, name)] = (rv, self._clock())
        self._tombstones.move_to_end((ns, name))
        horizon = self._clock() - TOMBSTONE_SECONDS
        while self._tombstones and next(iter(self._tombstones.values()))[1] < horizon:
            self._tombstones.popitem(last=False)

    def replace(self, namespace: str | None, items: list[Any], listed: int | None) -> int:
        """Take a fresh LIST (of one namespace, or all) as the truth: keep its items, drop what it no longer
        holds unless it changed after the list was taken; the number dropped."""
        seen: set[Name] = set()
        for item in items:
            self.observe(item)
            meta = item["metadata"]
            seen.add((meta.get("namespace"), meta["name"]))
        gone = [
            (ns, name, obj)
            for ns, name, obj in self._scan(namespace, {})
            if (ns, name) not in seen and not _older(listed, resource_version(obj))
        ]
        for ns, name, obj in gone:
            self._forget(ns, name, obj)
        return len(gone)

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        obj = self._objects.get(namespace, {}).get(name)
        return None if obj is None else _copy(obj)

    def select(self, namespace: str | None, labels: dict[str, str] | None) -> list[dict[str, Any]]:
        return [_copy(obj) for _, _, obj in self._scan(namespace, labels or {})]

    def _scan(self, namespace: str | None, labels: dict[str, str]) -> Iterable[tuple[str | None, str, dict[str, Any]]]:
        owner = labels.get(LABEL_SERVER)
        if owner is not None and namespace is not None:
            objects = self._objects.get(namespace, {})
            for name in sorted(self._by_server.get((namespace, owner), ())):
                obj = objects[name]
                if _matches(obj, labels):
                    yield namespace, name, obj
            return
        spaces = [namespace] if namespace is not None else list(self._objects)
        for ns in spaces:
            for name, obj in sorted(self._objects.get(ns, {}).items()):
                if _matches(obj, labels):
                    yield ns, name, obj

    def _forget(self, ns: str | None, name: str, obj: dict[str, Any]) -> None:
        self.version += 1
        self._unindex(ns, name, obj)
        objects = self._objects.get(ns, {})
        objects.pop(name, None)
        if not objects:
            self._objects.pop(ns, None)

    def _unindex(self, ns: str | None, name: str, obj: dict[str, Any]) -> None:
        owner = (obj["metadata"].get("labels") or {}).get(LABEL_SERVER)
        if owner is None:
            return
        names = self._by_server.get((ns, owner), set())
        names.discard(name)
        if not names:
            self._by_server.pop((ns, owner), None)


class ClusterCache:
    """One ObjectCache per cached kind."""

    def __init__(self, kinds: Iterable[Kind] = (SERVERS, NODES, *CHILD_KINDS)) -> None:
        self._caches = {k: ObjectCache(k[1]) for k in kinds}
        self._written: dict[tuple[Any, ...], Any] = {}  # object -> resourceVersion of our last write

    def wrote(self, obj: Any) -> None:
        """Note the version a write of ours produced, whose watch event will say nothing new."""
        if self.observe(obj):
            meta = obj["metadata"]
            self._written[(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])] = meta.get(
                "resourceVersion"
            )

    def echo(self, obj: Any) -> bool:
        """Is this watch event the copy of our own latest write of the object?"""
        meta = obj.get("metadata") or {}
        key = (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"))
        if key in self._written and self._written[key] == meta.get("resourceVersion"):
            del self._written[key]
            return True
        return False

    def holds(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in self._caches

    def of(self, api_version: str, kind: str) -> ObjectCache:
        return self._caches[(api_version, kind)]

    def observe(self, obj: Any) -> bool:
        cache = self._caches.get((obj.get("apiVersion"), obj.get("kind")))
        kept = cache is not None and cache.observe(obj)
        if kept:
            metrics.CACHED_OBJECTS.labels(obj["kind"]).set(len(self._caches[(obj["apiVersion"], obj["kind"])]))
        return kept

    def remove(self, obj: Any) -> None:
        meta = obj.get("metadata") or {}
        self._written.pop((obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name")), None)
        cache = self._caches.get((obj.get("apiVersion"), obj.get("kind")))
        if cache is not None:
            cache.remove(obj)
            metrics.CACHED_OBJECTS.labels(obj["kind"]).set(len(cache))

    def sizes(self) -> dict[str, int]:
        return {kind: len(cache) for (_, kind), cache in self._caches.items()}


class Reads:
    """Kube.get / Kube.list answered from the caches; kinds the caches do not hold go to the API server.

    What it returns is the caller's own copy, except the list of all nodes: every reconcile reads it,
    so while the nodes do not change every reader gets the same list, to read and not to change.
    """

    def __init__(self, cache: ClusterCache, kube: Kube) -> None:
        self.cache = cache
        self.kube = kube
        self._nodes: tuple[int, list[dict[str, Any]]] = (-1, [])

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        if not self.cache.holds(api_version, kind):
            return await self.kube.get(api_version, kind, namespace, name)
        return self.cache.of(api_version, kind).get(namespace, name)

    async def list(
        self, api_version: str, kind: str, namespace: str | None, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        if not self.cache.holds(api_version, kind):
            return await self.kube.list(api_version, kind, namespace, labels)
        cache = self.cache.of(api_version, kind)
        if (api_version, kind) == NODES and namespace is None and not labels:
            if self._nodes[0] != cache.version:
                self._nodes = (cache.version, cache.select(None, None))
            return self._nodes[1]
        return cache.select(namespace, labels)


class WriteThroughKube(Kube):
    """Kube whose write responses (apply, patch, create, replace) refresh the caches at once."""

    def __init__(self, api: ApiClient, cache: ClusterCache) -> None:
        super().__init__(api)
        self.cache = cache

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        metrics.count_request(method)
        result = await super()._call(method, path, query=query, body=body, content_type=content_type)
        if method != "GET" and isinstance(result, dict) and "kind" in result:
            self.cache.wrote(result)
        return result

    async def relist(self, api_version: str, kind: str, namespace: str | None, label_selector: str | None) -> int:
        """Replace what the cache holds of a kind with a fresh LIST; the number of objects it dropped.

        After kopf lists a kind again (a watch that could not resume), objects deleted while the
        watch was down have sent no DELETED event: only a LIST tells they are gone.
        """
        metrics.API_READS.labels(RESOURCES[(api_version, kind)][1]).inc()
        query = [("labelSelector", label_selector)] if label_selector else []
        result = await self._call("GET", _path(api_version, kind, namespace), query=query)
        items: list[dict[str, Any]] = result.get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        dropped = self.cache.of(api_version, kind).replace(namespace, items, resource_version(result))
        if dropped:
            log.info("dropped %d cached %s objects deleted while the watch was down", dropped, kind)
        return dropped


class Relists:
    """One fresh LIST per kind and watch scope after kopf (re)lists it, however many objects it held.

    kopf hands listed objects to the handlers without a type; the first of them schedules the LIST,
    a few seconds later so that it comes once the listing's burst is over (a LIST is correct at any
    time: objects changed after it was taken are kept).
    """

    def __init__(self, kube: WriteThroughKube, clusterwide: bool, settle: float = 2.0) -> None:
        self.kube = kube
        self.clusterwide = clusterwide
        self.settle = settle
        self._pending: dict[tuple[str, str, str | None], asyncio.Task[None]] = {}

    def listed(self, api_version: str, kind: str, namespace: str | None, label_selector: str | None) -> None:
        scope = None if self.clusterwide or (api_version, kind) == NODES else namespace
        key = (api_version, kind, scope)
        if key not in self._pending:
            self._pending[key] = asyncio.get_running_loop().create_task(self._relist(key, label_selector))

    async def _relist(self, key: tuple[str, str, str | None], label_selector: str | None) -> None:
        try:
            await asyncio.sleep(self.settle)
            await self.kube.relist(*key, label_selector)
        except ApiException as err:
            log.warning("cannot list %s to refresh the cache: %s", key[1], err.reason)
        finally:
            self._pending.pop(key, None)

    def cancel(self) -> None:
        for task in self._pending.values():
            task.cancel()


__all__ = [
    "CHILD_KINDS",
    "NODES",
    "SERVERS",
    "ClusterCache",
    "ObjectCache",
    "Reader",
    "Reads",
    "Relists",
    "WriteThroughKube",
]

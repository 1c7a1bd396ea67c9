"""The watch-fed caches: newest version wins, deletions stick, reads are copies, a LIST drops the gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.client.api_client import ApiClient

from inference_operator.controller.cache import ClusterCache, ObjectCache, Reads, WriteThroughKube
from inference_operator.render import LABEL_SERVER


def pod(name: str, rv: int, server: str = "s", ns: str = "ns", uid: str = "u1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid,
            "resourceVersion": str(rv),
            "labels": {LABEL_SERVER: server, **labels},
            "managedFields": [{"manager": "kubelet"}],
        },
        "status": {"phase": "Running"},
    }


def rv_of(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else obj["metadata"]["resourceVersion"]


def test_a_newer_version_replaces_and_an_older_one_does_not() -> None:
    cache = ObjectCache("Pod")
    assert cache.observe(pod("p", 5))
    assert not cache.observe(pod("p", 4))  # a late watch event after a newer write response
    assert rv_of(cache.get("ns", "p")) == "5"
    assert cache.observe(pod("p", 6))
    assert rv_of(cache.get("ns", "p")) == "6"


def test_a_deleted_object_is_not_brought_back_by_an_older_version_but_a_new_one_is_kept() -> None:
    cache = ObjectCache("Pod")
    cache.observe(pod("p", 5))
    cache.remove(pod("p", 7))
    assert cache.get("ns", "p") is None
    assert not cache.observe(pod("p", 6))  # a write response that raced with the deletion
    assert cache.get("ns", "p") is None
    assert cache.observe(pod("p", 9, uid="u2"))  # created again under the same name
    assert rv_of(cache.get("ns", "p")) == "9"


def test_the_deletion_of_an_old_object_does_not_remove_its_newer_namesake() -> None:
    cache = ObjectCache("Pod")
    cache.observe(pod("p", 9, uid="u2"))
    cache.remove(pod("p", 7, uid="u1"))
    assert rv_of(cache.get("ns", "p")) == "9"


def test_selection_by_server_and_labels_returns_copies_without_managed_fields() -> None:
    cache = ObjectCache("Pod")
    cache.observe(pod("a1", 1, server="a", role="vllm"))
    cache.observe(pod("a2", 2, server="a", role="ollama"))
    cache.observe(pod("b1", 3, server="b", role="vllm"))
    cache.observe(pod("a9", 4, server="a", ns="other"))
    assert [p["metadata"]["name"] for p in cache.select("ns", {LABEL_SERVER: "a"})] == ["a1", "a2"]
    assert [p["metadata"]["name"] for p in cache.select("ns", {LABEL_SERVER: "a", "role": "vllm"})] == ["a1"]
    assert [p["metadata"]["name"] for p in cache.select(None, {"role": "vllm"})] == ["a1", "b1"]
    assert len(cache.select(None, None)) == len(cache) == 4
    read = cache.select("ns", {LABEL_SERVER: "a"})[0]
    assert "managedFields" not in read["metadata"]
    read["status"]["phase"] = "Failed"
    read["metadata"]["labels"][LABEL_SERVER] = "b"
    assert cache.get("ns", "a1") == cache.select("ns", {LABEL_SERVER: "a"})[0]
    assert cache.get("ns", "a1")["status"]["phase"] == "Running"  # type: ignore[index]


def test_an_object_that_changes_server_moves_in_the_index() -> None:
    cache = ObjectCache("Pod")
    cache.observe(pod("p", 1, server="a"))
    cache.observe(pod("p", 2, server="b"))
    assert cache.select("ns", {LABEL_SERVER: "a"}) == []
    assert [p["metadata"]["name"] for p in cache.select("ns", {LABEL_SERVER: "b"})] == ["p"]


def test_a_fresh_list_drops_what_it_no_longer_holds_unless_it_changed_after_the_list() -> None:
    cache = ObjectCache("Pod")
    cache.observe(pod("gone", 3))
    cache.observe(pod("kept", 4))
    cache.observe(pod("newer", 12))  # written after the list was taken
    cache.observe(pod("elsewhere", 2, ns="other"))
    dropped = cache.replace("ns", [pod("kept", 4), pod("added", 8)], listed=10)
    assert dropped == 1
    assert [p["metadata"]["name"] for p in cache.select("ns", None)] == ["added", "kept", "newer"]
    assert cache.get("other", "elsewhere") is not None  # another namespace's list is not this one


@given(
    st.lists(
        st.tuples(st.sampled_from(["observe", "remove"]), st.integers(1, 30)), max_size=30, unique_by=lambda e: e[1]
    )
)
def test_the_cache_holds_what_the_newest_event_says(events: list[tuple[str, int]]) -> None:
    cache = ObjectCache("Pod")
    for verb, rv in events:
        if verb == "observe":
            cache.observe(pod("p", rv))
        else:
            cache.remove(pod("p", rv))
    newest = dict((rv, verb) for verb, rv in events)  # events arrive in any order; versions tell which is last
    if not newest:
        assert cache.get("ns", "p") is None
        return
    top = max(newest)
    if newest[top] == "observe":
        assert rv_of(cache.get("ns", "p")) == str(top)
    else:
        assert cache.get("ns", "p") is None


async def test_reads_answer_cached_kinds_without_the_api_server() -> None:
    cache = ClusterCache()
    cache.observe(pod("p", 1))
    cache.observe({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "resourceVersion": "1"}})

    class NoApi:
        async def get(self, *_: Any) -> None:
            raise AssertionError("an API request")

        async def list(self, *_: Any) -> list[Any]:
            raise AssertionError("an API request")

    reads = Reads(cache, NoApi())  # type: ignore[arg-type]
    assert rv_of(await reads.get("v1", "Pod", "ns", "p")) == "1"
    assert await reads.get("apps/v1", "Deployment", "ns", "p") is None
    assert [n["metadata"]["name"] for n in await reads.list("v1", "Node", None)] == ["n"]
    assert cache.sizes()["Pod"] == 1


def test_the_watch_copy_of_our_own_write_is_told_apart_from_a_change_by_others() -> None:
    cache = ClusterCache()
    cache.wrote(pod("p", 7))
    assert cache.echo(pod("p", 7))
    assert not cache.echo(pod("p", 7))  # once
    cache.wrote(pod("p", 9))
    assert not cache.echo(pod("p", 8))  # someone else's change came first
    assert not cache.echo(pod("q", 9))
    assert cache.echo(pod("p", 9))


# Against a fake API server --------------------------------------------------------------------
def deployment(rv: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns", "resourceVersion": str(rv), "labels": {LABEL_SERVER: "s"}},
        "spec": {"replicas": rv},
    }


@pytest.fixture
async def api(kmock: kmock.RawHandler) -> AsyncIterator[ApiClient]:
    async with ApiClient(Configuration(host=str(kmock.url).rstrip("/"))) as client:
        yield client


@pytest.mark.kmock(cls=kmock.RawHandler)
async def test_a_write_response_refreshes_the_cache_before_its_watch_event_comes(
    kmock: kmock.RawHandler, api: ApiClient
) -> None:
    kmock["patch /apis/apps/v1/namespaces/ns/deployments/d"] << deployment(7)
    cache = ClusterCache()
    cache.observe(deployment(5))
    kube = WriteThroughKube(api, cache)
    await kube.scale("ns", "d", 7)
    assert len(kmock["patch"]) == 1
    assert cache.of("apps/v1", "Deployment").get("ns", "d") == deployment(7)
    assert not cache.observe(deployment(6))  # the watch event of an earlier change, arriving late


@pytest.mark.kmock(cls=kmock.RawHandler)
async def test_a_list_after_the_watch_was_down_drops_what_was_deleted_meanwhile(
    kmock: kmock.RawHandler, api: ApiClient
) -> None:
    kept = pod("kept", 4)
    kmock["get /api/v1/namespaces/ns/pods"] << {
        "kind": "PodList",
        "metadata": {"resourceVersion": "10"},
        "items": [kept],
    }
    cache = ClusterCache()
    for obj in (pod("gone", 3), kept, pod("newer", 12)):
        cache.observe(obj)
    dropped = await WriteThroughKube(api, cache).relist("v1", "Pod", "ns", LABEL_SERVER)
    assert dropped == 1
    assert [p["metadata"]["name"] for p in cache.of("v1", "Pod").select("ns", None)] == ["kept", "newer"]
    assert [dict(r.params) for r in kmock["get"]] == [{"labelSelector": LABEL_SERVER}]


@pytest.mark.kmock(cls=kmock.RawHandler)
async def test_kinds_the_caches_do_not_hold_are_read_from_the_api_server(
    kmock: kmock.RawHandler, api: ApiClient
) -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "namespace": "ns"}}
    kmock["get /apis/coordination.k8s.io/v1/namespaces/ns/leases/l"] << lease
    kube = WriteThroughKube(api, ClusterCache())
    assert await Reads(kube.cache, kube).get("coordination.k8s.io/v1", "Lease", "ns", "l") == lease
    assert len(kmock["get"]) == 1


def test_of_a_node_the_cache_keeps_what_plans_read() -> None:
    cache = ObjectCache("Node")
    labels = {"nvidia.com/gpu.memory": "81559"}
    cache.observe(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n", "resourceVersion": "3", "labels": labels, "annotations": {"a": "b"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "images": [{"names": ["x"]}], "conditions": []},
        }
    )
    assert cache.get(None, "n") == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "resourceVersion": "3", "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def test_of_a_pod_the_cache_keeps_its_status_and_node_not_its_spec() -> None:
    cache = ObjectCache("Pod")
    full = pod("p", 1)
    full["spec"] = {"nodeName": "gpu-1", "containers": [{"name": "vllm", "image": "x"}]}
    cache.observe(full)
    kept = cache.get("ns", "p")
    assert kept is not None
    assert kept["spec"] == {"nodeName": "gpu-1"}
    assert kept["status"] == full["status"]
    assert kept["metadata"]["labels"] == full["metadata"]["labels"]


async def test_readers_share_the_node_list_until_a_node_changes() -> None:
    cache = ClusterCache()

    def node(rv: int, labels: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n", "resourceVersion": str(rv), "labels": labels},
        }

    cache.observe(node(1, {}))
    reads = Reads(cache, None)  # type: ignore[arg-type]
    first = await reads.list("v1", "Node", None)
    assert await reads.list("v1", "Node", None) is first
    cache.observe(node(2, {"gpu": "yes"}))
    again = await reads.list("v1", "Node", None)
    assert again is not first
    assert again[0]["metadata"]["labels"] == {"gpu": "yes"}

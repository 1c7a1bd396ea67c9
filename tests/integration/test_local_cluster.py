"""The local control plane behaves like a cluster: scheduling on GPU capacity, GC, CEL admission."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.wait import wait_for

pytestmark = pytest.mark.integration


def gpu_container(gpus: int) -> client.V1Container:
    return client.V1Container(
        name="main",
        image="registry.invalid/sleeper:1",
        resources=client.V1ResourceRequirements(
            requests={"nvidia.com/gpu": str(gpus)}, limits={"nvidia.com/gpu": str(gpus)}
        ),
    )


def condition(pod: client.V1Pod, kind: str) -> client.V1PodCondition | None:
    return next((c for c in (pod.status.conditions or []) if c.type == kind), None)


async def test_deployment_asking_for_two_gpus_runs_ready_on_a_gpu_node(api: ApiClient, namespace: str) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    labels = {"app": "two-gpus"}
    await apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="two-gpus"),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[gpu_container(2)]),
                ),
            ),
        ),
    )

    def running_and_ready(pods: client.V1PodList) -> bool:
        return any(
            p.status.phase == "Running" and (c := condition(p, "Ready")) is not None and c.status == "True"
            for p in pods.items
        )

    pods = await wait_for(
        lambda: core.list_namespaced_pod(namespace, label_selector="app=two-gpus"),
        running_and_ready,
        timeout=60,
        what="a Running and Ready pod",
    )
    node = await core.read_node(pods.items[0].spec.node_name)
    assert node.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert int(node.status.allocatable["nvidia.com/gpu"]) >= 2
    deployment = await wait_for(
        lambda: apps.read_namespaced_deployment("two-gpus", namespace),
        lambda d: d.status.ready_replicas == 1,
        timeout=60,
        what="deployment readyReplicas=1",
    )
    assert deployment.status.available_replicas == 1


async def test_pod_asking_for_more_gpus_than_any_node_has_is_unschedulable(api: ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    nodes = await core.list_node()
    most = max(int((n.status.allocatable or {}).get("nvidia.com/gpu", "0")) for n in nodes.items)
    await core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="too-big"),
            spec=client.V1PodSpec(containers=[gpu_container(most + 1)]),
        ),
    )

    def unschedulable(pod: client.V1Pod) -> bool:
        c = condition(pod, "PodScheduled")
        return c is not None and c.status == "False" and c.reason == "Unschedulable"

    pod = await wait_for(
        lambda: core.read_namespaced_pod("too-big", namespace),
        unschedulable,
        timeout=60,
        what="PodScheduled=False/Unschedulable",
    )
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    scheduled = condition(pod, "PodScheduled")
    assert scheduled is not None
    assert "nvidia.com/gpu" in (scheduled.message or "")


async def test_deleting_an_owner_garbage_collects_its_dependents(api: ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    owner = await core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"), data={"k": "v"})
    )
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid, block_owner_deletion=True
    )
    for i in range(3):
        await core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"dependent-{i}", labels={"owned": "yes"}, owner_references=[ref])
            ),
        )
    await core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="bystander", labels={"owned": "no"}))
    )

    await core.delete_namespaced_config_map("owner", namespace, propagation_policy="Foreground")

    def collected(cms: client.V1ConfigMapList) -> bool:
        # The owner's foregroundDeletion finalizer goes a moment after its last dependent: wait for both.
        return not any(
            cm.metadata.name == "owner" or (cm.metadata.labels or {}).get("owned") == "yes" for cm in cms.items
        )

    remaining = await wait_for(
        lambda: core.list_namespaced_config_map(namespace),
        collected,
        timeout=60,
        what="dependents garbage-collected, then the owner",
    )
    assert "bystander" in {cm.metadata.name for cm in remaining.items}


def widget_crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "minReplicas": {"type": "integer"},
                                        "maxReplicas": {"type": "integer"},
                                    },
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "self.minReplicas <= self.maxReplicas",
                                            "message": "minReplicas must not exceed maxReplicas",
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


async def test_api_server_enforces_cel_rules_of_a_crd(api: ApiClient, namespace: str) -> None:
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    group = f"g{uuid.uuid4().hex[:8]}.test.inference-operator.dev"
    crd = widget_crd(group)
    await ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]  # the client sends dicts as they are
    try:
        await wait_for(
            lambda: ext.read_custom_resource_definition(crd["metadata"]["name"]),
            lambda c: any(cond.type == "Established" and cond.status == "True" for cond in (c.status.conditions or [])),
            timeout=30,
            what="CRD established",
        )

        def widget(name: str, low: int, high: int) -> dict[str, Any]:
            return {
                "apiVersion": f"{group}/v1",
                "kind": "Widget",
                "metadata": {"name": name},
                "spec": {"minReplicas": low, "maxReplicas": high},
            }

        async def create(body: dict[str, Any]) -> Any:
            return await custom.create_namespaced_custom_object(group, "v1", namespace, "widgets", body)

        created = await wait_for(
            lambda: create(widget("good", 1, 3)),
            lambda obj: obj is not None,
            timeout=30,
            what="valid widget admitted",
            retry_on=(ApiException,),  # the new resource may take a moment to be served
        )
        assert created["spec"] == {"minReplicas": 1, "maxReplicas": 3}

        with pytest.raises(ApiException) as rejected:
            await create(widget("bad", 5, 2))
        assert rejected.value.status == 422
        assert "minReplicas must not exceed maxReplicas" in str(rejected.value.body)
    finally:
        await ext.delete_custom_resource_definition(crd["metadata"]["name"])

import socket
from pathlib import Path

from localcluster import NodePool, default_shape
from localcluster.cluster import free_port


def test_default_shape_is_four_gpu_nodes_of_eight_and_two_cpu_nodes() -> None:
    nodes = default_shape().manifests()
    gpu = [n for n in nodes if "nvidia.com/gpu" in n["status"]["capacity"]]
    cpu = [n for n in nodes if "nvidia.com/gpu" not in n["status"]["capacity"]]
    assert len(gpu) == 4
    assert len(cpu) == 2
    assert {n["status"]["capacity"]["nvidia.com/gpu"] for n in gpu} == {"8"}
    assert all(n["status"]["allocatable"] == n["status"]["capacity"] for n in nodes)


def test_gpu_nodes_carry_feature_discovery_labels() -> None:
    (node,) = NodePool(
        prefix="a100", count=1, gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960
    ).manifests()
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.memory"] == "40960"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_cpu_nodes_have_no_gpu_labels() -> None:
    (node,) = NodePool(prefix="c", count=1).manifests()
    assert not any(k.startswith("nvidia.com/") for k in node["metadata"]["labels"])


def test_shape_is_configurable() -> None:
    shape = default_shape(gpu_nodes=1, gpus_per_node=2, cpu_nodes=0)
    assert shape.node_count() == 1
    assert shape.manifests()[0]["status"]["capacity"]["nvidia.com/gpu"] == "2"


def test_free_ports_are_bindable_and_outside_the_ephemeral_range() -> None:
    floor = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1
    for port in ports:
        assert port < floor
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from inference_operator.planner import ClusterFacts, load_flag_catalog, plan
from inference_operator.render import (
    LABEL_REVISION,
    LABEL_ROLE,
    Owner,
    Target,
    objects,
    revision,
    stable_service,
)
from tests.support.examples import example_servers, server

FLAGS = load_flag_catalog()
FACTS = ClusterFacts(gpu_memory_gib=80.0, gpu_memory_source="test", max_gpus_per_node=8)
KUBERNETES_VERSIONS = ("1.34.0", "1.35.0")
OWNER = Owner(name="s", uid="0b7c8a6e-0000-4000-8000-000000000001")


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def vllm_pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in by_kind(objs, "Deployment") if d["metadata"]["labels"][LABEL_ROLE] == "vllm")
    return deployment["spec"]["template"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_validates_against_the_kubernetes_schema(version: str) -> None:
    count = 0
    for _name, s in example_servers():
        for obj in objects(plan(s, FLAGS, FACTS), owner=OWNER):
            kubernetes_validate.validate(obj, version, strict=True)
            count += 1
    assert count >= 15


def test_the_schema_check_can_fail() -> None:
    (_, s), *_ = example_servers()
    deployment = by_kind(objects(plan(s, FLAGS, FACTS)), "Deployment")[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 7
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def test_every_rendered_flag_is_in_the_catalog_of_every_target_version() -> None:
    checked = 0
    for _name, s in example_servers():
        for flags in FLAGS.releases:
            pinned = s.model_copy(
                update={
                    "spec": s.spec.model_copy(
                        update={
                            "engine": s.spec.engine.model_copy(
                                update={"image": f"vllm/vllm-openai:v{flags.release.text}", "version": None}
                            )
                        }
                    )
                }
            )
            p = plan(pinned, FLAGS, FACTS)
            args = vllm_pod(objects(p))["spec"]["containers"][0]["args"]
            rendered = [a for a in args if a.startswith("--")]
            assert rendered, p.name
            for flag in rendered:
                assert flags.accepts(flag), (p.name, flags.release.text, flag)
                checked += 1
    assert checked > 100


def test_vllm_pod_follows_the_design() -> None:
    s = server(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "tokenSecretRef": {"name": "hf"}},
            "engine": {"version": "0.10.2"},
            "resources": {"gpus": 2, "sharedMemory": "8Gi"},
            "cache": {"size": "50Gi"},
        }
    )
    pod = vllm_pod(objects(plan(s, FLAGS, FACTS)))["spec"]
    container = pod["containers"][0]
    assert pod["enableServiceLinks"] is False
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "s-model-cache"}} in pod["volumes"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 600
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_HOME"]["value"].startswith("/models")
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert container["command"] == ["vllm", "serve"]
    assert container["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "--model" not in container["args"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_large_models_get_a_longer_startup_budget() -> None:
    small = plan(server({"model": {"name": "org/llama-3.1-8b"}, "engine": {"version": "0.10.2"}}), FLAGS, FACTS)
    large = plan(server({"model": {"name": "org/llama-3.1-70b"}, "engine": {"version": "0.10.2"}}), FLAGS, FACTS)
    probe = [vllm_pod(objects(p))["spec"]["containers"][0]["startupProbe"] for p in (small, large)]
    assert probe[1]["failureThreshold"] > probe[0]["failureThreshold"]


def test_scheduling_fields_reach_the_pod() -> None:
    s = server(
        {
            "model": {"name": "org/m"},
            "engine": {"version": "0.10.2"},
            "scheduling": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {}},
                "priorityClassName": "inference",
                "runtimeClassName": "nvidia",
            },
        }
    )
    pod = vllm_pod(objects(plan(s, FLAGS, FACTS)))["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["priorityClassName"] == "inference"
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["affinity"] == {"nodeAffinity": {}}
    assert {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"} in pod["tolerations"]


def test_service_selects_one_revision_or_the_fallback() -> None:
    p = plan(
        server(
            {
                "model": {"name": "org/m"},
                "engine": {"version": "0.10.2"},
                "fallback": {"ollama": {"model": "llama3.2:1b"}},
            }
        ),
        FLAGS,
        FACTS,
    )
    rev = revision(p)
    to_vllm = stable_service(p, Target("vllm", rev), None)
    assert to_vllm["spec"]["selector"][LABEL_REVISION] == rev
    assert to_vllm["spec"]["selector"][LABEL_ROLE] == "vllm"
    to_ollama = stable_service(p, Target("ollama"), None)
    assert to_ollama["spec"]["selector"][LABEL_ROLE] == "ollama"
    assert LABEL_REVISION not in to_ollama["spec"]["selector"]
    assert to_vllm["spec"]["ports"] == to_ollama["spec"]["ports"]


def with_fallback() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every object of a server with an Ollama fallback, and the Ollama Deployment among them."""
    p = plan(
        server(
            {
                "model": {"name": "org/m", "servedName": "chat"},
                "engine": {"version": "0.10.2"},
                "fallback": {"ollama": {"model": "llama3.2:1b"}},
            }
        ),
        FLAGS,
        FACTS,
    )
    objs = objects(p)
    return objs, next(d for d in by_kind(objs, "Deployment") if d["metadata"]["labels"][LABEL_ROLE] == "ollama")


def test_ollama_serves_the_vllm_model_id_on_the_same_port() -> None:
    objs, ollama = with_fallback()
    container = ollama["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SERVED_MODEL_NAME"] == "chat"
    assert env["FALLBACK_MODEL"] == "llama3.2:1b"
    assert env["OLLAMA_HOST"] == "0.0.0.0:8000"
    assert (
        container["ports"][0]["containerPort"] == vllm_pod(objs)["spec"]["containers"][0]["ports"][0]["containerPort"]
    )
    assert "MODEL_READY_FILE" in " ".join(container["readinessProbe"]["exec"]["command"])
    assert ollama["spec"]["replicas"] == 1


STAND_IN = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
case "$1" in
  pull) [ -f "$CALLS.pulled-once" ] || { touch "$CALLS.pulled-once"; exit 1; } ;;
esac
exit 0
"""


def test_ollama_script_pulls_with_retries_then_copies_then_reports_ready(tmp_path: Path) -> None:
    _, ollama = with_fallback()
    container = ollama["spec"]["template"]["spec"]["containers"][0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ollama", "sleep"):  # a stand-in sleep: the retry must not cost the test 15 s
        (bin_dir / tool).write_text(STAND_IN)
        (bin_dir / tool).chmod(0o755)
    calls, ready = tmp_path / "calls", tmp_path / "ready"
    env = {e["name"]: e["value"] for e in container["env"]}
    env |= {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(calls), "MODEL_READY_FILE": str(ready)}
    done = subprocess.run([*container["command"], container["args"][0]], env=env, timeout=30, check=False)
    assert done.returncode == 0
    seen = calls.read_text().splitlines()
    assert "ollama serve" in seen  # started in the background, so its place in the log varies
    assert [c for c in seen if c != "ollama serve"] == [
        "ollama list",
        "ollama pull llama3.2:1b",
        "sleep 15",
        "ollama pull llama3.2:1b",
        "ollama cp llama3.2:1b chat",
    ]
    assert ready.exists()


def test_on_demand_ollama_is_scaled_to_zero_until_needed() -> None:
    p = plan(
        server(
            {
                "model": {"name": "org/m"},
                "engine": {"version": "0.10.2"},
                "fallback": {"ollama": {"model": "llama3.2:1b", "mode": "OnDemand"}},
            }
        ),
        FLAGS,
        FACTS,
    )

    def replicas(active: bool) -> int:
        deployments = by_kind(objects(p, fallback_active=active), "Deployment")
        return int(next(d for d in deployments if d["metadata"]["labels"][LABEL_ROLE] == "ollama")["spec"]["replicas"])

    assert replicas(False) == 0
    assert replicas(True) == 1


def test_retained_cache_has_no_owner_and_an_unretained_one_does() -> None:
    def pvc(retain: bool) -> dict[str, Any]:
        s = server(
            {"model": {"name": "org/m"}, "engine": {"version": "0.10.2"}, "cache": {"size": "10Gi", "retain": retain}}
        )
        return by_kind(objects(plan(s, FLAGS, FACTS), owner=OWNER), "PersistentVolumeClaim")[0]

    assert "ownerReferences" not in pvc(True)["metadata"]
    assert pvc(False)["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid


def test_existing_claim_is_mounted_and_never_rendered() -> None:
    s = server({"model": {"name": "org/m"}, "engine": {"version": "0.10.2"}, "cache": {"existingClaim": "shared"}})
    objs = objects(plan(s, FLAGS, FACTS), owner=OWNER)
    assert not by_kind(objs, "PersistentVolumeClaim")
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "shared"}} in vllm_pod(objs)["spec"][
        "volumes"
    ]


def test_children_are_owned_by_the_server() -> None:
    s = server({"model": {"name": "org/m"}, "engine": {"version": "0.10.2"}})
    for obj in objects(plan(s, FLAGS, FACTS), owner=OWNER):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == OWNER.uid
        assert ref["controller"] is True


def test_a_remembered_render_equals_a_fresh_one_and_is_the_callers_own() -> None:
    p = plan(server({"model": {"name": "org/m"}, "engine": {"version": "0.10.2"}}), FLAGS, FACTS)
    first = objects(p, owner=OWNER)
    again = objects(p, owner=OWNER)
    assert again == first
    again[0]["metadata"]["labels"]["changed"] = "yes"
    assert "changed" not in objects(p, owner=OWNER)[0]["metadata"]["labels"]
    other = objects(p, owner=Owner(name="s", uid="another"))
    assert other[0]["metadata"]["ownerReferences"][0]["uid"] == "another"

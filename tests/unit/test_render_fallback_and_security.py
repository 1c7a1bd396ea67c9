"""The Ollama fallback serves the id clients send, with the plan's context and a retained store; pods pass the
Pod Security "baseline" level."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_operator.planner import ClusterFacts, PlanError, load_flag_catalog, plan
from inference_operator.planner.ollama import derived_name, is_valid_name, library_context, store_size_gib
from inference_operator.render import objects, ollama_store_name
from tests.support.examples import example_servers, server

CATALOG = load_flag_catalog()
FACTS = ClusterFacts(gpu_memory_gib=80.0, gpu_memory_source="test", max_gpus_per_node=8)


def with_fallback(model_name: str, ollama_model: str = "llama3.1:8b", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": model_name},
        "engine": {"version": "0.10.2"},
        "fallback": {"ollama": {"model": ollama_model}},
    }
    for key, value in extra.items():
        spec[key] = {**spec.get(key, {}), **value}
    return spec


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def ollama_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [dep] = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-ollama")]
    return dep


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


# --- Ollama's names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "llama3.1:8b",
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct-AWQ",
        "example.com/library/mistral:7b+x",
        "mistral:7b+Q4_0",
    ],
)
def test_names_ollama_accepts(name: str) -> None:
    assert is_valid_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/models/llama-3.1-8b-instruct",
        "example.com/mistral:7b+",
        "example.com/mistral:7b+Q4_0+",
        "x/y/z/z:8n+I",
        "a..b",
        "org.name/model",
        "model:",
        "x" * 129,
    ],
)
def test_names_ollama_rejects(name: str) -> None:
    assert not is_valid_name(name)


def test_a_path_model_is_served_under_a_name_both_engines_accept() -> None:
    p = plan(server(with_fallback("/models/llama-3.1-8b-instruct")), CATALOG, FACTS)
    assert p.served_name == "llama-3.1-8b-instruct"
    assert p.args[p.args.index("--served-model-name") + 1] == "llama-3.1-8b-instruct"
    assert any("clients send model 'llama-3.1-8b-instruct'" in w for w in p.warnings)
    [container] = ollama_deployment(objects(p))["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    assert env["SERVED_MODEL_NAME"] == "llama-3.1-8b-instruct"
    assert "/models" not in env["SERVED_MODEL_NAME"]


def test_without_fallback_a_path_model_keeps_its_id() -> None:
    p = plan(server({"model": {"name": "/models/llama-3.1-8b-instruct"}, "engine": {"version": "0.10.2"}}), CATALOG)
    assert p.served_name == "/models/llama-3.1-8b-instruct"


def test_an_explicit_served_name_ollama_rejects_is_refused_with_a_fix() -> None:
    spec = with_fallback("meta-llama/Llama-3.1-8B-Instruct", model={"servedName": "org.name/llama"})
    with pytest.raises(PlanError, match="choose one such as 'llama'") as e:
        plan(server(spec), CATALOG, FACTS)
    assert e.value.field == "spec.model.servedName"


@given(st.from_regex(r"\A/?[A-Za-z0-9._:/@+-]{1,200}\Z"))
def test_every_served_id_is_a_valid_ollama_name(model: str) -> None:
    p = plan(server(with_fallback(model)), CATALOG, FACTS)
    assert p.ollama is not None
    assert is_valid_name(p.ollama.served_name)
    assert p.args[p.args.index("--served-model-name") + 1] == p.ollama.served_name


def test_derived_names_are_valid() -> None:
    for path in ("/models/llama-3.1-8b-instruct/", "/mnt/a b/c..d", "/", "/models/模型"):
        assert is_valid_name(derived_name(path)), path


# --- context and store ---------------------------------------------------------------------------------------


def test_ollama_context_follows_the_plan_capped_to_the_fallback_model() -> None:
    long = plan(server(with_fallback("meta-llama/Llama-3.1-8B-Instruct")), CATALOG, FACTS)
    assert long.ollama is not None
    assert long.ollama.context_length == 131072
    capped = plan(server(with_fallback("meta-llama/Llama-3.1-8B-Instruct", "qwen2.5:7b")), CATALOG, FACTS)
    assert capped.ollama is not None
    assert capped.ollama.context_length == 32768
    short = with_fallback("meta-llama/Llama-3.1-8B-Instruct", engine={"maxModelLen": 8192})
    p = plan(server(short), CATALOG, FACTS)
    [container] = ollama_deployment(objects(p))["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["OLLAMA_CONTEXT_LENGTH"] == "8192"
    assert library_context("gemma3:1b") == 32768


def test_the_ollama_store_is_a_retained_claim_sized_from_the_model() -> None:
    p = plan(server(with_fallback("meta-llama/Llama-3.1-8B-Instruct")), CATALOG, FACTS)
    docs = objects(p)
    [claim] = [c for c in by_kind(docs, "PersistentVolumeClaim") if c["metadata"]["name"] == ollama_store_name(p)]
    assert "ownerReferences" not in claim["metadata"]
    assert claim["spec"]["resources"]["requests"]["storage"] == f"{store_size_gib('llama3.1:8b')}Gi" == "7Gi"
    dep = ollama_deployment(docs)
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    [volume] = dep["spec"]["template"]["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == ollama_store_name(p)
    [container] = dep["spec"]["template"]["spec"]["containers"]
    [mount] = container["volumeMounts"]
    assert env_of(container)["OLLAMA_MODELS"].startswith(mount["mountPath"])
    sized = with_fallback("meta-llama/Llama-3.1-8B-Instruct")
    sized["fallback"]["ollama"]["store"] = {"size": "50Gi", "storageClassName": "fast"}
    [claim] = [c for c in by_kind(objects(plan(server(sized), CATALOG, FACTS)), "PersistentVolumeClaim")]
    assert (claim["spec"]["resources"]["requests"]["storage"], claim["spec"]["storageClassName"]) == ("50Gi", "fast")
    assert store_size_gib("mystery") == 20


# --- Pod Security ---------------------------------------------------------------------------------------------

# Pod Security Standards, baseline level: capabilities a container may add.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


def baseline_violations(pod: dict[str, Any]) -> list[str]:
    """The Pod Security "baseline" checks, plus the restricted level's container rules the operator promises."""
    out = []
    spec = pod["spec"]
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(key)
    for volume in spec.get("volumes", []):
        if "hostPath" in volume:
            out.append(f"hostPath volume {volume['name']}")
    pod_context = spec.get("securityContext") or {}
    if (pod_context.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("pod seccomp Unconfined")
    for sysctl in pod_context.get("sysctls", []):
        out.append(f"sysctl {sysctl['name']}")
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            out.append(f"{name}: privileged")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{name}: hostProcess")
        added = set((context.get("capabilities") or {}).get("add", []))
        if added - BASELINE_CAPABILITIES:
            out.append(f"{name}: capabilities {sorted(added - BASELINE_CAPABILITIES)}")
        if context.get("procMount", "Default") != "Default":
            out.append(f"{name}: procMount")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            out.append(f"{name}: hostPort")
        # What the operator promises beyond baseline.
        if context.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation not false")
        if (context.get("capabilities") or {}).get("drop") != ["ALL"]:
            out.append(f"{name}: capabilities not dropped")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp != "RuntimeDefault":
            out.append(f"{name}: seccomp {seccomp}")
    return out


def pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["spec"]["template"] for d in by_kind(docs, "Deployment")]


@pytest.mark.parametrize(("name", "example"), example_servers())
def test_every_example_pod_passes_the_baseline_level(name: str, example: Any) -> None:
    docs = objects(plan(example, CATALOG, FACTS))
    assert pods(docs)
    for pod in pods(docs):
        assert baseline_violations(pod) == [], name


def test_the_checker_catches_what_baseline_forbids() -> None:
    bad = {
        "spec": {
            "hostNetwork": True,
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
            "containers": [
                {"name": "c", "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}}
            ],
        }
    }
    found = baseline_violations(bad)
    assert {"hostNetwork", "hostPath volume h", "c: privileged", "c: capabilities ['SYS_ADMIN']"} <= set(found)


def test_run_as_non_root_is_optional_per_pod() -> None:
    spec = with_fallback("meta-llama/Llama-3.1-8B-Instruct", podSecurity={"runAsNonRoot": True, "runAsUser": 2000})
    docs = objects(plan(server(spec), CATALOG, FACTS))
    vllm, ollama = sorted(pods(docs), key=lambda p: p["metadata"]["labels"]["inference-operator.dev/role"] != "vllm")
    [container] = vllm["spec"]["containers"]
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["runAsUser"] == 2000
    assert vllm["spec"]["securityContext"]["fsGroup"] == 2000
    assert env_of(container)["HOME"] == "/tmp"
    [ollama_container] = ollama["spec"]["containers"]
    assert "runAsNonRoot" not in ollama_container["securityContext"]
    assert baseline_violations(vllm) == baseline_violations(ollama) == []


def test_without_a_store_ollama_keeps_its_models_in_the_pod() -> None:
    spec = with_fallback("meta-llama/Llama-3.1-8B-Instruct")
    spec["fallback"]["ollama"]["store"] = {"enabled": False}
    docs = objects(plan(server(spec), CATALOG, FACTS))
    assert not by_kind(docs, "PersistentVolumeClaim")
    [volume] = ollama_deployment(docs)["spec"]["template"]["spec"]["volumes"]
    assert volume == {"name": "models", "emptyDir": {}}

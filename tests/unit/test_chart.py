"""The Helm chart: lint, schemas of two Kubernetes minors, least-privilege RBAC, generated files in sync."""

import argparse
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from inference_operator.api.reference import reference
from inference_operator.controller.leader import LeaseTiming
from inference_operator.controller.options import Options, add_run_arguments
from inference_operator.planner.inputs import DEFAULT_OLLAMA_IMAGE, DEFAULT_VLLM_IMAGE
from render_install import KUBE_VERSION, ROOT, install_yaml
from tests.support.chart import CHART, NAMESPACED_VALUES, helm_binary, rendered

KUBERNETES_VERSIONS = ("1.34.0", "1.35.0")
CRD = ROOT / "crds" / "inferenceservers.inference-operator.dev.yaml"


@pytest.mark.parametrize("values", [[], ["--values", str(NAMESPACED_VALUES)]], ids=["default", "namespaced"])
def test_helm_lint_strict_passes(values: list[str]) -> None:
    result = subprocess.run([helm_binary(), "lint", "--strict", str(CHART), *values], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", [None, NAMESPACED_VALUES], ids=["default", "namespaced"])
def test_rendered_chart_validates_against_kubernetes_schemas(values: Path | None, version: str) -> None:
    docs = rendered([values] if values else None)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "CustomResourceDefinition"} <= kinds
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_values_schema_rejects_bad_values() -> None:
    result = subprocess.run(
        [helm_binary(), "template", "x", str(CHART), "--kube-version", KUBE_VERSION, "--set", "logLevel=loud"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "logLevel" in result.stderr


def rules(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(d["kind"], r) for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]


@pytest.mark.parametrize("values", [None, NAMESPACED_VALUES], ids=["default", "namespaced"])
def test_rbac_has_no_wildcards(values: Path | None) -> None:
    found = rules(rendered([values] if values else None))
    assert found
    for _kind, rule in found:
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        assert "*" not in rule.get("apiGroups", [])


def test_namespaced_mode_grants_only_the_listed_namespaces() -> None:
    docs = rendered([NAMESPACED_VALUES])
    roles = [d for d in docs if d["kind"] == "Role" and not d["metadata"]["name"].endswith("-leader")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    cluster_resources = {res for kind, r in rules(docs) if kind == "ClusterRole" for res in r["resources"]}
    assert cluster_resources == {"nodes", "namespaces", "customresourcedefinitions"}
    cluster_verbs = {v for kind, r in rules(docs) if kind == "ClusterRole" for v in r["verbs"]}
    assert cluster_verbs <= {"get", "list", "watch"}
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WATCH_NAMESPACES"] == "team-a,team-b"
    assert env["LEADER_ELECT"] == "true"


def test_operator_pod_is_non_root_and_read_only() -> None:
    deployment = next(d for d in rendered() if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_chart_defaults_the_images_the_operator_defaults_to() -> None:
    deployment = next(d for d in rendered() if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["VLLM_IMAGE"], env["OLLAMA_IMAGE"]) == (DEFAULT_VLLM_IMAGE, DEFAULT_OLLAMA_IMAGE)


def test_monitoring_resources_render_when_enabled() -> None:
    result = subprocess.run(
        [helm_binary(), "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
         "--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "kind: ServiceMonitor" in result.stdout
    assert "kind: PodMonitor" in result.stdout
    assert "inference-operator.dev/role: vllm" in result.stdout


def test_chart_crd_is_the_generated_crd() -> None:
    assert (CHART / "crds" / CRD.name).read_bytes() == CRD.read_bytes()


def test_install_manifest_is_generated_from_the_chart() -> None:
    committed = (ROOT / "manifests" / "install.yaml").read_text()
    assert committed == install_yaml(helm_binary()), "manifests/install.yaml is stale: run hack/gen-manifests"


def test_crd_reference_is_generated_from_the_models() -> None:
    committed = (ROOT / "docs" / "crd-reference.md").read_text()
    assert committed == reference(), "docs/crd-reference.md is stale: run hack/gen-manifests"


def test_dockerfile_is_pinned_and_non_root() -> None:
    text = (ROOT / "operator" / "Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11." in text
    assert "latest" not in text
    assert "USER 65532:65532" in text


def test_chart_lease_settings_reach_the_operator_and_hold_together(monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = next(d for d in rendered() if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    for var in container["env"]:
        monkeypatch.setenv(var["name"], var.get("value") or "ns")
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    options = Options.from_args(parser.parse_args([]))
    timing = LeaseTiming(options.lease_seconds, options.renew_deadline_seconds, options.retry_period_seconds)
    assert (timing.duration, timing.renew_deadline, timing.retry_period) == (15, 10, 2)
    probe = container["livenessProbe"]
    assert probe["httpGet"]["port"] == "health"
    assert options.health_address.endswith(":8081")


def test_chart_refuses_lease_settings_that_let_two_replicas_act() -> None:
    result = subprocess.run(
        [helm_binary(), "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
         "--set", "leaderElection.renewDeadlineSeconds=20"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "retryPeriodSeconds < renewDeadlineSeconds < leaseSeconds" in result.stderr

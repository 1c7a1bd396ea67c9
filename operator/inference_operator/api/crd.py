"""The CustomResourceDefinition, generated from the pydantic models (pure; no I/O)."""

from __future__ import annotations

from typing import Any

import yaml

from .resource import (
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    NAME_SUFFIX_MESSAGE,
    PLURAL,
    RESERVED_NAME_SUFFIX,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)
from .spec import InferenceServerSpec
from .status import InferenceServerStatus

HEADER = "# Generated from the API models by `inference-operator crd`. Do not edit by hand.\n"
_DROP = {"title", "additionalProperties"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {"name": "Backend", "type": "string", "jsonPath": ".status.activeBackend"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Revision", "type": "string", "jsonPath": ".status.activeRevision", "priority": 1},
    {"name": "GPUs", "type": "integer", "jsonPath": ".status.plan.gpus", "priority": 1},
]


class UnsupportedSchema(ValueError):
    pass


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return node


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn pydantic's JSON schema into a Kubernetes structural schema: no $ref, no nulls, OpenAPI v3.0."""
    node = _resolve(node, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise UnsupportedSchema(f"cannot express anyOf {node['anyOf']} structurally")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if rest.get("default", ...) is None:
            del rest["default"]
        inner = structural(options[0], defs)
        return {**inner, **structural(rest, defs)} if rest else inner

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP and not (key == "additionalProperties" and isinstance(value, dict)):
            continue
        if key == "$defs":
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = structural(value, defs)
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum":
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum":
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key == "default" and value is None:
            continue
        else:
            out[key] = value
    if "properties" in out and "type" not in out:
        out["type"] = "object"
    return out


def _model_schema(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


def openapi_schema() -> dict[str, Any]:
    spec = _model_schema(InferenceServerSpec)
    spec["description"] = "Desired state: the model, the vLLM engine, GPUs, rollout and fallback."
    status = _model_schema(InferenceServerStatus)
    status["description"] = "Observed state, written by the operator."
    return {
        "type": "object",
        "description": "A vLLM inference server with zero-downtime model switches and an Ollama fallback.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
                "message": f"metadata.name must be at most {MAX_NAME_LENGTH} characters: "
                "child objects add a -vllm-<revision> suffix",
            },
            {
                "rule": f"!self.metadata.name.endsWith('{RESERVED_NAME_SUFFIX}')",
                "message": NAME_SUFFIX_MESSAGE,
            },
        ],
    }


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {
                "app.kubernetes.io/name": "inference-operator",
                "app.kubernetes.io/part-of": "inference-operator",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["inference"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def crd_yaml() -> str:
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=120)

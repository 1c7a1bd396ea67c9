"""Markdown reference of the InferenceServer API, generated from the CRD schema (pure)."""

from __future__ import annotations

import json
from typing import Any

from .crd import crd
from .resource import API_VERSION, KIND

HEADER = f"""# {KIND} API reference

Generated from the API models by `inference-operator crd --reference`. Do not edit by hand.

`apiVersion: {API_VERSION}`, `kind: {KIND}`, short names `isrv`, `infsrv`.
"""


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = node.get("type", "object")
    if kind == "array":
        return f"list of {_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    return str(kind)


def _constraints(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, word in (("minimum", ">="), ("maximum", "<=")):
        if key in node:
            exclusive = node.get("exclusiveM" + key[1:])
            parts.append(f"{'>' if exclusive and word == '>=' else '<' if exclusive else word} {node[key]}")
    if "maxLength" in node:
        parts.append(f"at most {node['maxLength']} characters")
    if "maxItems" in node:
        parts.append(f"at most {node['maxItems']} items")
    for rule in node.get("x-kubernetes-validations", []):
        parts.append(rule["message"])
    return "; ".join(parts)


def _rows(node: dict[str, Any], path: str, out: list[tuple[str, dict[str, Any]]]) -> None:
    out.append((path, node))
    for name, sub in node.get("properties", {}).items():
        _rows(sub, f"{path}.{name}", out)
    items = node.get("items")
    if isinstance(items, dict) and items.get("properties"):
        _rows(items, f"{path}[]", out)


def reference() -> str:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    lines = [HEADER]
    for section in ("spec", "status"):
        root = schema["properties"][section]
        rows: list[tuple[str, dict[str, Any]]] = []
        _rows(root, section, rows)
        lines.append(f"\n## {section}\n\n{root.get('description', '')}\n")
        objects = [(p, n) for p, n in rows if n.get("properties")]
        for obj_path, obj in objects:
            lines.append(f"\n### `{obj_path}`\n")
            if obj_path != section and obj.get("description"):
                lines.append(f"{obj['description']}\n")
            rules = obj.get("x-kubernetes-validations", [])
            if rules:
                lines.append("Rules: " + "; ".join(r["message"] for r in rules) + ".\n")
            lines.append("| Field | Type | Required | Default | Description |")
            lines.append("|---|---|---|---|---|")
            required = set(obj.get("required", []))
            for name, sub in obj["properties"].items():
                default = f"`{json.dumps(sub['default'])}`" if "default" in sub else ""
                desc = sub.get("description", "")
                extra = _constraints(sub) if not sub.get("properties") else ""
                text = " ".join(x for x in (desc, f"({extra})" if extra else "") if x)
                lines.append(
                    f"| `{name}` | {_type(sub)} | {'yes' if name in required else ''} | {default} | "
                    + text.replace("|", "\\|")
                    + " |"
                )
    return "\n".join(lines) + "\n"

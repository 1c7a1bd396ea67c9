"""Field types shared by the spec and status models, with the OpenAPI form the CRD needs."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY = re.compile(QUANTITY_PATTERN)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


class ApiModel(BaseModel):
    """Base of every API model: camelCase on the wire, unknown fields refused, values immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )


def _quantity(value: int | str) -> str:
    text = str(value)
    if not _QUANTITY.match(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity (for example 500m, 4, 16Gi)")
    return text


def quantity_bytes(text: str) -> float:
    """The numeric value of a quantity such as 16Gi or 500M (no I/O, for estimates)."""
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    if text[-1:] in _DECIMAL and not text[-1:].isdigit():
        return float(text[:-1]) * _DECIMAL[text[-1]]
    return float(text)


def _int_or_string(rule: str, message: str) -> WithJsonSchema:
    """The CRD form of an int-or-string field, with the CEL rule that checks its value."""
    return WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-validations": [{"rule": rule, "message": message}],
        }
    )


Quantity = Annotated[
    int | str,
    AfterValidator(_quantity),
    _int_or_string("isQuantity(string(self))", "must be a Kubernetes quantity, such as 500m, 4 or 16Gi"),
]


def _positive_int_or_auto(value: int | str) -> int | str:
    if isinstance(value, bool):
        raise ValueError("must be a positive integer or 'auto'")
    if isinstance(value, int):
        if value < 1:
            raise ValueError("must be a positive integer or 'auto'")
        return value
    if value == "auto":
        return value
    raise ValueError(f"must be a positive integer or 'auto', not {value!r}")


PositiveIntOrAuto = Annotated[
    int | str,
    AfterValidator(_positive_int_or_auto),
    _int_or_string("type(self) == int ? self >= 1 : self == 'auto'", "must be a positive integer or 'auto'"),
]

PreservedObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"

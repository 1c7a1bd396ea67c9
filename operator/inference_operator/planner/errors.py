"""Refusals of the planner: what the API server admitted but cannot be served."""

from __future__ import annotations


class PlanError(ValueError):
    """The spec cannot be planned; `field` names the spec field to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

"""Refusals of the planner: what the API server admitted but cannot be served."""

from __future__ import annotations


class PlanError(ValueError):
    """The spec cannot be planned; `field` names the spec field to change.

    `reason` is the condition reason the operator reports: `PlanRefused`, or Kubernetes' own word where one
    fits (a replica larger than any node is `Unschedulable`, as its pod would be).
    """

    def __init__(self, field: str, message: str, reason: str = "PlanRefused") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.reason = reason

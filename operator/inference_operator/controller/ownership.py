"""Which objects a server owns, and how to name the owner of one it does not (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..render import ANNOTATION_CREATED_FOR


def owned(obj: dict[str, Any], uid: str) -> bool:
    """Owned by the server of `uid`: through an owner reference, or (a retained claim) the mark it was made with."""
    meta = obj.get("metadata") or {}
    if any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or []):
        return True
    return (meta.get("annotations") or {}).get(ANNOTATION_CREATED_FOR) == uid


@dataclass(frozen=True)
class Conflict:
    kind: str
    namespace: str
    name: str
    holder: str

    @property
    def message(self) -> str:
        return (
            f"the {self.kind} {self.namespace}/{self.name} this server needs already exists and {self.holder}; "
            f"it is not taken over: rename the server, or delete that {self.kind} if nothing needs it"
        )


def conflict_of(obj: dict[str, Any]) -> Conflict:
    meta = obj.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    controller = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if controller is not None:
        holder = f"belongs to {controller.get('kind', 'an object')} {controller.get('name', '')}".rstrip()
    else:
        holder = "was not created by this server"
    return Conflict(obj.get("kind", "object"), meta.get("namespace", ""), meta.get("name", ""), holder)

"""The InferenceServer resource: names of the API and the validated object."""

from __future__ import annotations

from pydantic import Field, field_validator

from .spec import InferenceServerSpec
from .types import DNS_LABEL, ApiModel

GROUP = "inference-operator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceServer"
PLURAL = "inferenceservers"
SINGULAR = "inferenceserver"
SHORT_NAMES = ("isrv", "infsrv")
FIELD_MANAGER = GROUP
FINALIZER = f"{GROUP}/finalizer"
MAX_NAME_LENGTH = 42  # room for the "-vllm-<revision>" suffix of child Deployments within 63 characters
# The one suffix a child takes in the namespace's Service names: a server of such a name would take the fallback
# Service of another server, so it is refused. Every other child name ends in a suffix no server name can produce.
RESERVED_NAME_SUFFIX = "-ollama"
NAME_SUFFIX_MESSAGE = (
    f"metadata.name must not end with {RESERVED_NAME_SUFFIX}: the server named without it would use that name "
    "for its Ollama fallback Service"
)


class ObjectMeta(ApiModel):
    """The parts of metadata the planner and renderer read; everything else is ignored."""

    model_config = ApiModel.model_config | {"extra": "ignore"}

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=DNS_LABEL)
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _no_reserved_suffix(cls, name: str) -> str:
        if name.endswith(RESERVED_NAME_SUFFIX):
            raise ValueError(NAME_SUFFIX_MESSAGE)
        return name


class InferenceServer(ApiModel):
    model_config = ApiModel.model_config | {"extra": "ignore"}

    api_version: str = Field(default=API_VERSION, pattern=f"^{GROUP.replace('.', '[.]')}/{VERSION}$")
    kind: str = Field(default=KIND, pattern=f"^{KIND}$")
    metadata: ObjectMeta
    spec: InferenceServerSpec
    # Status is not read here: it is the operator's cache (read part by part, tolerantly), never input.

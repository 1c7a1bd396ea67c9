"""The InferenceServer resource: names of the API and the validated object."""

from __future__ import annotations

from pydantic import Field

from .spec import InferenceServerSpec
from .status import InferenceServerStatus
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


class ObjectMeta(ApiModel):
    """The parts of metadata the planner and renderer read; everything else is ignored."""

    model_config = ApiModel.model_config | {"extra": "ignore"}

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=DNS_LABEL)
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class InferenceServer(ApiModel):
    model_config = ApiModel.model_config | {"extra": "ignore"}

    api_version: str = Field(default=API_VERSION, pattern=f"^{GROUP.replace('.', '[.]')}/{VERSION}$")
    kind: str = Field(default=KIND, pattern=f"^{KIND}$")
    metadata: ObjectMeta
    spec: InferenceServerSpec
    status: InferenceServerStatus | None = None

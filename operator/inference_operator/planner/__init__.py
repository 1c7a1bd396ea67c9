"""Pure planning: spec -> launch plan. No I/O except reading the packaged flag catalog once."""

from .errors import PlanError
from .flag_catalog import FlagCatalog, FlagSet, load_flag_catalog
from .inputs import NO_FACTS, ClusterFacts, Defaults
from .model_catalog import CATALOG, ModelSize, canonical_name, lookup
from .ollama import OllamaPlan
from .plan import LaunchPlan, plan
from .versions import Release, release_from_image

__all__ = [
    "CATALOG",
    "NO_FACTS",
    "ClusterFacts",
    "Defaults",
    "FlagCatalog",
    "FlagSet",
    "LaunchPlan",
    "ModelSize",
    "OllamaPlan",
    "PlanError",
    "Release",
    "canonical_name",
    "load_flag_catalog",
    "lookup",
    "plan",
    "release_from_image",
]

"""Which vLLM release a server runs, and the flag catalog its arguments are checked against (pure)."""

from __future__ import annotations

from ..api import InferenceServerSpec
from .errors import PlanError
from .flag_catalog import FlagCatalog, FlagSet
from .versions import Release, image_tag, release_from_image


def resolve_release(spec: InferenceServerSpec, image: str, catalog: FlagCatalog) -> tuple[str, FlagSet, list[str]]:
    warnings: list[str] = []
    if spec.engine.version:
        release = Release(spec.engine.version)
    else:
        found = release_from_image(image)
        if found is None:
            tag = image_tag(image)
            if tag not in (None, "latest"):
                raise PlanError(
                    "spec.engine.version",
                    f"cannot tell the vLLM version of image {image} from its tag; set spec.engine.version",
                )
            newest = catalog.newest()
            warnings.append(
                f"image {image} has no version tag: assuming vLLM {newest.release.text}; "
                "pin a tag or set spec.engine.version"
            )
            return newest.release.text, newest, warnings
        release = found
    flags = catalog.for_release(release)
    if flags is None:
        raise PlanError(
            "spec.engine.version",
            f"vLLM {release.text} is older than {catalog.oldest().release.text}, the oldest release supported",
        )
    if not flags.release.same_minor(release):
        warnings.append(f"no flag catalog for vLLM {release.text}: flags checked against vLLM {flags.release.text}")
    return release.text, flags, warnings

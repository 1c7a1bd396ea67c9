"""Which vLLM release a server runs, and the flag catalog its arguments are checked against (pure)."""

from __future__ import annotations

from dataclasses import replace

from ..api import InferenceServerSpec
from .errors import PlanError
from .flag_catalog import FlagCatalog, FlagSet
from .versions import Release, image_tag, is_vllm_image, release_from_image

HOW_TO_PROCEED = (
    "use a vllm/vllm-openai image (from any registry or mirror), or set spec.engine.version to the vLLM release "
    "a custom image runs (the operator starts it as `vllm serve`)"
)


def _release(spec: InferenceServerSpec, image: str, warnings: list[str]) -> tuple[Release | None, str]:
    """(the release, the spec field it comes from); None for an untagged or `latest` vLLM image."""
    vllm_image = is_vllm_image(image)
    tagged = release_from_image(image) if vllm_image else None
    if spec.engine.version:
        release = Release(spec.engine.version)
        if tagged is not None and tagged != release:
            if spec.engine.image:
                raise PlanError(
                    "spec.engine.version",
                    f"{spec.engine.version} contradicts spec.engine.image {image}, which is vLLM {tagged.text}; "
                    "remove spec.engine.version or make the two agree",
                )
            warnings.append(
                f"spec.engine.version {spec.engine.version} is not the release of the operator's default image "
                f"{image} (vLLM {tagged.text}); set spec.engine.image to an image of vLLM {release.text}"
            )
        return release, "spec.engine.version"
    if not vllm_image:
        which = image if spec.engine.image else f"the operator's default image {image}"
        raise PlanError("spec.engine.image", f"{which} is not a vLLM image the operator knows: {HOW_TO_PROCEED}")
    if tagged is None and image_tag(image) not in (None, "latest"):
        raise PlanError(
            "spec.engine.image",
            f"cannot tell the vLLM release of image {image} from its tag {image_tag(image)}: use a release tag "
            "such as vllm/vllm-openai:v0.9.2, or set spec.engine.version",
        )
    return tagged, "spec.engine.image"


def resolve_release(spec: InferenceServerSpec, image: str, catalog: FlagCatalog) -> tuple[str, FlagSet, list[str]]:
    """(release text, the flags to check against, warnings).

    A release without its own catalog that lies between two catalogued ones is checked against the older, and
    the returned set carries the newer one: a plan that uses a flag the two disagree on is refused then
    (vllm_args), since the release may have either form. A release newer than every catalog can only be
    checked against the newest one, with a warning.
    """
    warnings: list[str] = []
    release, source_field = _release(spec, image, warnings)
    if release is None:
        newest = catalog.newest()
        warnings.append(
            f"image {image} has no version tag: assuming vLLM {newest.release.text}; pin a tag or set "
            "spec.engine.version"
        )
        return newest.release.text, newest, warnings
    exact = catalog.exact(release)
    if exact is not None:
        return release.text, replace(exact, release_field=source_field), warnings
    older = catalog.for_release(release)
    if older is None:
        raise PlanError(
            source_field,
            f"vLLM {release.text} is older than {catalog.oldest().release.text}, the oldest release supported",
        )
    newer = catalog.next_after(release)
    if newer is None:
        warnings.append(
            f"vLLM {release.text} is newer than every flag catalog: flags checked against vLLM "
            f"{older.release.text}, the newest known"
        )
        return release.text, replace(older, release_field=source_field), warnings
    warnings.append(f"no flag catalog for vLLM {release.text}: flags checked against vLLM {older.release.text}")
    return release.text, replace(older, newer=newer, release_field=source_field), warnings

"""vLLM release numbers: read from an image tag and compared."""

from __future__ import annotations

import re
from functools import total_ordering

# 0.6.3.post1, and the fourth number of hotfix releases such as 0.10.1.1
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.post(\d+))?")


@total_ordering
class Release:
    def __init__(self, text: str) -> None:
        match = _RELEASE.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a vLLM release number")
        major, minor, patch, hotfix, post = match.groups()
        self.text = text.removeprefix("v")
        self.key = (int(major), int(minor), int(patch or 0), int(hotfix or 0), int(post or 0))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Release) and self.key == other.key

    def __lt__(self, other: Release) -> bool:
        return self.key < other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Release({self.text!r})"

    def same_minor(self, other: Release) -> bool:
        return self.key[:2] == other.key[:2]


def image_tag(image: str) -> str | None:
    """The tag of an image reference, ignoring a registry port and any digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def release_from_image(image: str) -> Release | None:
    tag = image_tag(image)
    if tag is None:
        return None
    try:
        return Release(tag)
    except ValueError:
        return None


# vllm/vllm-openai and its variants (-rocm, -cpu), on Docker Hub or behind any registry or mirror prefix
_VLLM_REPOSITORY = re.compile(r"(?:^|/)vllm/vllm-openai[a-z0-9._-]*$")


def image_repository(image: str) -> str:
    """The repository of an image reference: without tag and digest, with any registry prefix."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    last = last.split(":", 1)[0]
    return f"{head}/{last}" if head else last


def is_vllm_image(image: str) -> bool:
    return _VLLM_REPOSITORY.search(image_repository(image)) is not None

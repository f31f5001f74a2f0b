"""The built-in trainer's image: what it is built from, and the tag and name it is pushed under.

`trainstack build` builds it; `export vertex` names it for the pools that run it."""

from __future__ import annotations

from pathlib import Path

from trainstack.base.project import PROJECT_ROOT
from trainstack.jobcode.package import digest_of
from trainstack_contract import BUILTIN_PACKAGE, CONTRACT_PACKAGE

DOCKERFILE = "Dockerfile"


IMAGE_NAME = "trainer"


def context_files(root: Path = PROJECT_ROOT) -> list[Path]:
    """What the image is made of: the Dockerfile and the sources of the trainer and of the
    contract it imports, in a fixed order."""
    sources = sorted(
        (path for package in (BUILTIN_PACKAGE, CONTRACT_PACKAGE) for path in (root / package).rglob("*.py")),
        key=lambda path: path.relative_to(root).as_posix(),
    )
    return [root / DOCKERFILE, *sources]


def content_tag(root: Path = PROJECT_ROOT) -> str:
    """A tag that changes exactly when the image's inputs change, so a tag is never reused
    for different code and rebuilding unchanged code pushes nothing new."""
    # Names and sizes go in with the bytes (as for package archives): renaming a file, or
    # moving bytes from one file to the next, gives another tag.
    return digest_of([(path.relative_to(root).as_posix(), path.read_bytes()) for path in context_files(root)])


def image_uri(registry_url: str, tag: str) -> str:
    return f"{registry_url}/{IMAGE_NAME}:{tag}"

"""The project's stacks (``stacks/Pulumi.<stack>.yaml``) and the buckets they deploy.

A job directory may not lie in another stack's bucket: that bucket holds what the other
stack's machines run (its notebook's post-startup script among them), and its own jobs.
Each sibling file is read with the bounded reader every stack file goes through, and only
for the keys that name its bucket (``gcp:project``, ``trainstack:name``,
``trainstack:storage.bucket``); a file that cannot be read deploys nothing and is skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainstack.base.files import FileProblem, load_yaml, read_text
from trainstack.base.project import PROJECT_ROOT
from trainstack.stackmodel.naming import NAMESPACE, default_bucket_name, default_resource_name

STACKS_DIR = PROJECT_ROOT / "stacks"
# A generous stack file is a few kilobytes.
MAX_STACK_FILE_BYTES = 1024 * 1024


def stack_name_from_path(path: Path) -> str:
    """``Pulumi.dev.yaml`` -> ``dev``, as the Pulumi CLI names stacks from their files."""
    name = path.name
    for suffix in (".yaml", ".yml"):
        if name.startswith("Pulumi.") and name.endswith(suffix):
            return name[len("Pulumi.") : -len(suffix)]
    return path.stem


def _bucket_of(stack: str, config: dict[str, Any]) -> str | None:
    """The bucket a stack's config names or derives, as :func:`resolve_stack` does; None
    when the values it takes are missing or not text."""
    storage = config.get(f"{NAMESPACE}:storage")
    named = storage.get("bucket") if isinstance(storage, dict) else None
    if isinstance(named, str) and named:
        return named
    project, name = config.get("gcp:project"), config.get(f"{NAMESPACE}:name")
    if not isinstance(project, str) or not project:
        return None
    return default_bucket_name(project, name if isinstance(name, str) and name else default_resource_name(stack))


def stack_buckets(stacks_dir: Path | None = None) -> dict[str, str]:
    """Each bucket of the project's stacks, with the stack that deploys it."""
    buckets: dict[str, str] = {}
    for path in sorted((stacks_dir or STACKS_DIR).glob("Pulumi.*.yaml")):
        stack = stack_name_from_path(path)
        try:
            document = load_yaml(read_text(path, MAX_STACK_FILE_BYTES))
        except (OSError, FileProblem):
            continue
        config = document.get("config") if isinstance(document, dict) else None
        bucket = _bucket_of(stack, config) if isinstance(config, dict) else None
        if bucket is not None:
            buckets.setdefault(bucket, stack)
    return buckets

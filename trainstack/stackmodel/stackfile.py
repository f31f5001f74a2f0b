"""Reading ``stacks/Pulumi.<stack>.yaml`` files for the offline commands.

A stack file is untrusted input: it is read by the one bounded reader every file of the command
line goes through (:mod:`trainstack.base.files`): a regular file of at most
:data:`MAX_STACK_FILE_BYTES`, parsed by a YAML loader that refuses anchors and aliases, nesting
deeper than :data:`trainstack.base.files.MAX_DEPTH`, and duplicate keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainstack.base.errors import Problem, StackConfigError, shorten
from trainstack.base.files import FileProblem, load_yaml, read_text
from trainstack.stackmodel.configmap import STACK_FILE_TOP_LEVEL_KEYS
from trainstack.stackmodel.derived import CheckedFacts
from trainstack.stackmodel.feasibility import parse_check_and_derive
from trainstack.stackmodel.naming import stack_name_problem
from trainstack.stackmodel.schema import StackConfig

# Where the project's stack files are, and how a file names its stack: kept here too for callers.
from trainstack.stackmodel.siblings import MAX_STACK_FILE_BYTES as MAX_STACK_FILE_BYTES
from trainstack.stackmodel.siblings import STACKS_DIR as STACKS_DIR
from trainstack.stackmodel.siblings import stack_name_from_path as stack_name_from_path


def stack_file_path(stack: str) -> Path:
    """``stacks/Pulumi.<stack>.yaml``, for a name that is a Pulumi stack name (never ``..``)."""
    if (problem := stack_name_problem(stack)) is not None:
        raise StackConfigError([Problem("--stack", problem)])
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


def read_stack_config_map(path: Path) -> dict[str, Any]:
    """The ``config:`` map of a stack file; problems with the file itself raise StackConfigError."""
    where = str(path)
    try:
        document = load_yaml(read_text(path, MAX_STACK_FILE_BYTES))
    except FileNotFoundError:
        available = ", ".join(sorted(stack_name_from_path(p) for p in STACKS_DIR.glob("Pulumi.*.yaml")))
        raise StackConfigError(
            [Problem(where, f"no such stack file; stacks in {STACKS_DIR.name}/: {available}")]
        ) from None
    except FileProblem as problem:
        text = str(problem)
        if text == "not a regular file":
            text = "not a regular file; a stack file is a YAML file"
        elif text.startswith("not accepted"):
            text = text.replace("not accepted", "not accepted in a stack file", 1)
        raise StackConfigError([Problem(where, text)]) from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise StackConfigError([Problem(where, "a stack file is a mapping with a 'config:' key")])
    unknown = sorted(shorten(k) for k in document if k not in STACK_FILE_TOP_LEVEL_KEYS)
    if unknown:
        raise StackConfigError(
            [
                Problem(
                    k,
                    f"unknown top-level key in a stack file; valid keys: {', '.join(sorted(STACK_FILE_TOP_LEVEL_KEYS))}",
                )
                for k in unknown[:10]
            ]
        )
    config = document.get("config") or {}
    if not isinstance(config, dict):
        raise StackConfigError([Problem("config", "must be a mapping of 'namespace:key' to values")])
    return config


def stack_name_for(path: Path, stack: str | None = None) -> str:
    """The stack's name (given, or from the file name), checked before the file is read:
    it becomes part of paths and resource names."""
    name = stack or stack_name_from_path(path)
    if (problem := stack_name_problem(name)) is not None:
        raise StackConfigError([Problem(str(path), problem)])
    return name


def load_stack(path: Path, stack: str | None = None) -> tuple[StackConfig, dict[str, Any]]:
    """Parse and validate a stack file; returns the typed config and the raw config map."""
    raw = read_stack_config_map(path)
    return parse_check_and_derive(stack_name_for(path, stack), raw)[0], raw


def load_checked_stack(path: Path, stack: str | None = None) -> tuple[StackConfig, CheckedFacts]:
    """Parse and validate a stack file; returns the typed config and what its checks derived,
    for :func:`trainstack.stackmodel.resolved.resolve_stack`."""
    return parse_check_and_derive(stack_name_for(path, stack), read_stack_config_map(path))

"""Reading ``stacks/Pulumi.<stack>.yaml`` files for the offline commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainstack.config import STACK_FILE_TOP_LEVEL_KEYS, StackConfig, parse_stack_config
from trainstack.errors import Problem, StackConfigError
from trainstack.rules import validate_stack

STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"


def stack_file_path(stack: str) -> Path:
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


def stack_name_from_path(path: Path) -> str:
    """``Pulumi.dev.yaml`` -> ``dev``, as the Pulumi CLI names stacks from their files."""
    name = path.name
    for suffix in (".yaml", ".yml"):
        if name.startswith("Pulumi.") and name.endswith(suffix):
            return name[len("Pulumi.") : -len(suffix)]
    return path.stem


def read_stack_config_map(path: Path) -> dict[str, Any]:
    """The ``config:`` map of a stack file; problems with the file itself raise StackConfigError."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        available = ", ".join(sorted(stack_name_from_path(p) for p in STACKS_DIR.glob("Pulumi.*.yaml")))
        raise StackConfigError([Problem(where, f"no such stack file; stacks in {STACKS_DIR.name}/: {available}")]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise StackConfigError([Problem(where, f"cannot read the file: {error}")]) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise StackConfigError([Problem(where, f"not valid YAML: {str(error).splitlines()[0]}")]) from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise StackConfigError([Problem(where, "a stack file is a mapping with a 'config:' key")])
    unknown = sorted(str(k) for k in document if k not in STACK_FILE_TOP_LEVEL_KEYS)
    if unknown:
        raise StackConfigError([Problem(str(k), f"unknown top-level key in a stack file; valid keys: {', '.join(sorted(STACK_FILE_TOP_LEVEL_KEYS))}") for k in unknown])
    config = document.get("config") or {}
    if not isinstance(config, dict):
        raise StackConfigError([Problem("config", "must be a mapping of 'namespace:key' to values")])
    return config


def load_stack(path: Path, stack: str | None = None) -> tuple[StackConfig, dict[str, Any]]:
    """Parse and validate a stack file; returns the typed config and the raw config map."""
    raw = read_stack_config_map(path)
    cfg = validate_stack(parse_stack_config(stack or stack_name_from_path(path), raw))
    return cfg, raw

"""Reading ``stacks/Pulumi.<stack>.yaml`` files for the offline commands.

A stack file is untrusted input: it is read only when it is a regular file of at most
:data:`MAX_STACK_FILE_BYTES`, and parsed by a YAML loader that refuses anchors and aliases
(a few lines of aliases expand to gigabytes), nesting deeper than :data:`MAX_DEPTH`, and
duplicate keys (where YAML would silently keep the last one).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent
from yaml.nodes import MappingNode, Node

from trainstack.config import STACK_FILE_TOP_LEVEL_KEYS, StackConfig, stack_name_problem
from trainstack.errors import Problem, StackConfigError, shorten
from trainstack.rules import parse_and_check

STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"
# A generous stack file is a few kilobytes.
MAX_STACK_FILE_BYTES = 1024 * 1024
# config > trainstack:cluster > workers > accelerator > type is five levels deep.
MAX_DEPTH = 16


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that a stack file may not use."""


class _StackFileLoader(yaml.SafeLoader):
    """SafeLoader without anchors, aliases, deep nesting or duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent) or (isinstance(event, NodeEvent) and event.anchor is not None):
            raise _Refused(
                None, None, "anchors and aliases (&name, *name) are not allowed in a stack file", event.start_mark
            )
        nested = isinstance(event, CollectionStartEvent)
        if nested:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _Refused(None, None, f"nesting deeper than {MAX_DEPTH} levels", event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            if nested:
                self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # By position (line and column): two keys on one line ({a: 1, a: 2}) are two keys.
        seen: dict[Any, tuple[int, int]] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            position = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            try:
                first = seen.setdefault(key, position)
            except TypeError:  # an unhashable key; the base class reports it
                continue
            if first != position:
                raise _Refused(
                    None,
                    None,
                    f"duplicate key {shorten(key)} (line {first[0]} column {first[1]}, and line {position[0]} "
                    f"column {position[1]}); YAML would silently keep the last",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def stack_file_path(stack: str) -> Path:
    """``stacks/Pulumi.<stack>.yaml``, for a name that is a Pulumi stack name (never ``..``)."""
    if (problem := stack_name_problem(stack)) is not None:
        raise StackConfigError([Problem("--stack", problem)])
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


def stack_name_from_path(path: Path) -> str:
    """``Pulumi.dev.yaml`` -> ``dev``, as the Pulumi CLI names stacks from their files."""
    name = path.name
    for suffix in (".yaml", ".yml"):
        if name.startswith("Pulumi.") and name.endswith(suffix):
            return name[len("Pulumi.") : -len(suffix)]
    return path.stem


def _read_bounded(path: Path) -> bytes:
    """The file's bytes, refusing anything but a regular file of bounded size.

    Opened non-blocking and checked with fstat on the open descriptor: a FIFO would block
    the open or the read forever, and /dev/zero never ends."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        available = ", ".join(sorted(stack_name_from_path(p) for p in STACKS_DIR.glob("Pulumi.*.yaml")))
        raise StackConfigError(
            [Problem(where, f"no such stack file; stacks in {STACKS_DIR.name}/: {available}")]
        ) from None
    except OSError as error:
        raise StackConfigError([Problem(where, f"cannot open the file: {error.strerror}")]) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise StackConfigError([Problem(where, "not a regular file; a stack file is a YAML file")])
        if info.st_size > MAX_STACK_FILE_BYTES:
            raise StackConfigError(
                [Problem(where, f"{info.st_size} bytes; a stack file may hold at most {MAX_STACK_FILE_BYTES}")]
            )
        try:
            data = handle.read(MAX_STACK_FILE_BYTES + 1)
        except OSError as error:
            raise StackConfigError([Problem(where, f"cannot read the file: {error.strerror}")]) from None
    if len(data) > MAX_STACK_FILE_BYTES:  # grew while being read
        raise StackConfigError([Problem(where, f"a stack file may hold at most {MAX_STACK_FILE_BYTES} bytes")])
    return data


def read_stack_config_map(path: Path) -> dict[str, Any]:
    """The ``config:`` map of a stack file; problems with the file itself raise StackConfigError."""
    where = str(path)
    try:
        text = _read_bounded(path).decode("utf-8")
    except UnicodeDecodeError as error:
        raise StackConfigError([Problem(where, f"not UTF-8 text (byte {error.start})")]) from None
    try:
        document = yaml.load(text, Loader=_StackFileLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as error:
        what = "not accepted in a stack file" if isinstance(error, _Refused) else "not valid YAML"
        mark = error.problem_mark
        where_in_file = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        # The context says what was open ("while parsing a flow sequence ... line 3, column 19").
        opened = ""
        if error.context and error.context_mark:
            opened = f" ({error.context} at line {error.context_mark.line + 1}, column {error.context_mark.column + 1})"
        raise StackConfigError([Problem(where, f"{what}: {where_in_file}{error.problem}{opened}")]) from None
    except yaml.YAMLError as error:
        raise StackConfigError([Problem(where, f"not valid YAML: {str(error).splitlines()[0]}")]) from None
    except RecursionError:
        raise StackConfigError([Problem(where, f"nesting deeper than {MAX_DEPTH} levels")]) from None
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
    name = stack_name_for(path, stack)
    raw = read_stack_config_map(path)
    cfg = parse_and_check(name, raw)
    return cfg, raw

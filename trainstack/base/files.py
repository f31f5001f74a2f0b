"""Every file the command line reads that a user (or someone else) wrote: one bounded reader.

A file is read only when it is a regular file (never a FIFO, which would block for ever, nor a
device such as /dev/zero, which never ends) of at most a given size; YAML is parsed by a loader
that refuses anchors and aliases (a few lines of aliases expand to gigabytes) and merge keys,
tags it has no constructor for (each named as written), nesting deeper than
:data:`MAX_DEPTH`, and duplicate keys (where YAML would silently keep the last one); JSON
is refused past the same depth. Stack files, imported job files, saved gcloud command lines
and the files they name, policy configurations and earlier plans all come through here.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from trainstack.base.errors import shorten

# config > trainstack:cluster > workers > accelerator > type is five levels deep.
MAX_DEPTH = 16


class FileProblem(Exception):
    """The file cannot be used; the message says why, without naming the file (the caller does)."""


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, refusing anything but a regular file of at most ``max_bytes``.

    Opened non-blocking and checked with fstat on the open descriptor: a FIFO would block the
    open or the read for ever, and /dev/zero never ends."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise FileProblem(f"cannot open the file: {error.strerror}") from None
    # Checked on the descriptor before it becomes a file object (a directory opens, then fails).
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise FileProblem("not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > max_bytes:
            raise FileProblem(f"{info.st_size} bytes; at most {max_bytes} are read")
        try:
            data = handle.read(max_bytes + 1)
        except OSError as error:
            raise FileProblem(f"cannot read the file: {error.strerror}") from None
    if len(data) > max_bytes:  # grew while being read
        raise FileProblem(f"more than {max_bytes} bytes")
    return data


def read_text(path: Path, max_bytes: int) -> str:
    data = read_bounded(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileProblem(f"not UTF-8 text (byte {error.start})") from None


class Refused(yaml.MarkedYAMLError):
    """Valid YAML that a stack file may not use."""


# The longest number a file may write. Python refuses to convert decimal strings of more than
# 4300 digits (and cannot show a hex one that long); a shorter one still reaches the checks,
# which name the key and its bounds.
MAX_NUMBER_CHARS = 1000
# Characters YAML reads as line breaks that editors and terminals show inside a line: a key
# after one looks like part of a comment, and is applied.
HIDDEN_LINE_BREAKS = {"\u2028": "U+2028", "\u2029": "U+2029", "\x85": "U+0085"}


# YAML 1.1's tags, as a file writes them short (`!!python/object`) and PyYAML spells them out.
YAML_TAG_PREFIX = "tag:yaml.org,2002:"
# A plain `<<` key (a merge key: `<<: *defaults`) and a plain `=` (YAML 1.1's value key).
MERGE_TAG = f"{YAML_TAG_PREFIX}merge"
VALUE_TAG = f"{YAML_TAG_PREFIX}value"
ANCHORS_REFUSED = "YAML anchors and aliases (&name, *name) are not supported: write each value out where it is used"
MERGE_REFUSED = "YAML merge keys (<<:) are not supported: write the keys out"


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader without anchors, aliases, merge keys, tags it has no constructor for, deep
    nesting, duplicate keys, numbers past :data:`MAX_NUMBER_CHARS` or YAML 1.1's base-60
    numbers (``1:30`` is 90, not a time)."""

    def construct_yaml_int(self, node: ScalarNode) -> int:
        self._check_number(node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: ScalarNode) -> float:
        self._check_number(node)
        return super().construct_yaml_float(node)

    def _check_number(self, node: Node) -> None:
        text, key = str(node.value), self._key_of(node)
        if len(text) > MAX_NUMBER_CHARS:
            raise Refused(
                None, None, f"{key}a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})", node.start_mark
            )
        if ":" in text:
            raise Refused(
                None, None, f"{key}{text} is a base-60 number in YAML, not a time; write the plain number, or quote it",
                node.start_mark,
            )  # fmt: skip

    def construct_document(self, node: Node) -> Any:
        # Where each value sits (config > trainstack:job > epochs), so a value refused while
        # loading is named by its key, as the checks after loading name theirs.
        self._paths.clear()
        self._index_paths(node, "")
        return super().construct_document(node)  # type: ignore[no-untyped-call]

    def _index_paths(self, node: Node, path: str) -> None:
        self._paths[id(node)] = path
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, ScalarNode) else "?"
                self._index_paths(value_node, f"{path}.{key}" if path else str(key))
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                self._index_paths(item, f"{path}[{index}]")

    def _key_of(self, node: Node) -> str:
        path = self._paths.get(id(node), "")
        # A stack file's keys are named as the checks name them: trainstack:job.epochs.
        return f"{shorten(path.removeprefix('config.'), 120).strip(chr(39))}: " if path else ""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        # id(value node) -> its key path, for the document being constructed.
        self._paths: dict[int, str] = {}
        # Where the document's first anchor (&name) is, once one is seen.
        self._first_anchor: yaml.Mark | None = None

    def compose_document(self) -> Node | None:
        self._first_anchor = None
        node: Node | None = super().compose_document()
        if self._first_anchor is not None:  # anchored, never referred to: refused all the same
            raise Refused(None, None, ANCHORS_REFUSED, self._first_anchor)
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        # ``index`` is the key when the node is a mapping's value: `<<` is YAML 1.1's merge key,
        # refused before its value (an alias, a mapping or a list of them) is read.
        if isinstance(index, ScalarNode) and index.tag == MERGE_TAG:
            raise Refused(None, None, MERGE_REFUSED, index.start_mark)
        event = self.peek_event()  # type: ignore[no-untyped-call]
        # An alias is refused where it is (before anything expands); an anchor is refused at
        # the end of the document, so that a merge key (`<<: *name`) is named as one.
        if isinstance(event, AliasEvent):
            raise Refused(None, None, ANCHORS_REFUSED, self._first_anchor or event.start_mark)
        if isinstance(event, NodeEvent) and event.anchor is not None and self._first_anchor is None:
            self._first_anchor = event.start_mark
        nested = isinstance(event, CollectionStartEvent)
        if nested:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise Refused(None, None, f"nesting deeper than {MAX_DEPTH} levels", event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            if nested:
                self._depth -= 1

    def construct_undefined(self, node: Node) -> Any:
        """A tag no constructor is registered for (``!Ref``, ``!!python/object:...``): named as written."""
        if node.tag == VALUE_TAG:
            problem = "a plain = is a special value in YAML 1.1: quote it ('=')"
        else:
            tag = str(node.tag)
            written = f"!!{tag.removeprefix(YAML_TAG_PREFIX)}" if tag.startswith(YAML_TAG_PREFIX) else tag
            problem = (
                f"the tag {shorten(written)} is not supported: write plain values (text, numbers, true or false, "
                "lists, mappings); quote text that starts with !"
            )
        raise Refused(None, None, f"{self._key_of(node)}{problem}", node.start_mark)

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
                raise Refused(
                    None,
                    None,
                    f"duplicate key {shorten(key)} (line {first[0]} column {first[1]}, and line {position[0]} "
                    f"column {position[1]}); YAML would silently keep the last",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
BoundedLoader.add_constructor("tag:yaml.org,2002:float", BoundedLoader.construct_yaml_float)
# Every tag without a constructor of its own (SafeLoader registers its own method for None, the
# key PyYAML looks up for any tag it has no constructor for; the stubs type the key as str).
BoundedLoader.add_constructor(None, BoundedLoader.construct_undefined)  # type: ignore[arg-type]  # None: any other tag


# Control characters YAML refuses, found first with their position (PyYAML's reader gives none).
CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def invisible_character(text: str) -> str | None:
    """Where ``text`` holds a character YAML takes for a line break but a screen does not show
    as one, or a control character, or None."""
    found = [(text.find(c), f"{name}, a line break to YAML that editors show inside a line")
             for c, name in HIDDEN_LINE_BREAKS.items()]  # fmt: skip
    if (control := CONTROL_CHARACTER.search(text)) is not None:
        found.append((control.start(), f"control character U+{ord(control.group()):04X}, not allowed"))
    index, what = min(((i, w) for i, w in found if i >= 0), default=(-1, ""))
    if index < 0:
        return None
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line}, column {column}: {what}"


def load_yaml(text: str) -> Any:
    """YAML (or JSON, which is YAML) through :class:`BoundedLoader`."""
    if (where := invisible_character(text)) is not None:
        raise FileProblem(f"not accepted: {where}")
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as error:
        what = "not accepted" if isinstance(error, Refused) else "not valid YAML"
        mark = error.problem_mark
        where_in_file = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        # The context says what was open ("while parsing a flow sequence ... line 3, column 19").
        opened = ""
        if error.context and error.context_mark:
            opened = f" ({error.context} at line {error.context_mark.line + 1}, column {error.context_mark.column + 1})"
        raise FileProblem(f"{what}: {where_in_file}{error.problem}{opened}") from None
    except yaml.YAMLError as error:
        raise FileProblem(f"not valid YAML: {str(error).splitlines()[0]}") from None
    except RecursionError:
        raise FileProblem(f"nesting deeper than {MAX_DEPTH} levels") from None


def load_json(data: bytes | str) -> Any:
    """JSON, refused past :data:`MAX_DEPTH` levels of nesting."""
    try:
        document = json.loads(data)
    except RecursionError:
        raise FileProblem(f"nesting deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:
        raise FileProblem(f"not JSON ({error})") from None
    if _depth(document) > MAX_DEPTH:
        raise FileProblem(f"nesting deeper than {MAX_DEPTH} levels")
    return document


class OptionFileProblem(Exception):
    """The file an option names cannot be used; the message names the option and the file."""


def load_option_mapping(
    option: str, path: Path, max_bytes: int, *, json_only: bool, not_a_mapping: str
) -> dict[str, Any]:
    """The mapping in the file a command-line option names (``--job-file PATH``): read bounded,
    parsed as JSON (``json_only``) or as YAML (which reads JSON too). Each problem is one
    :class:`OptionFileProblem`, ``<option> <path>: ...``: no such file, what
    :func:`read_bounded` or the parser refused, or ``not_a_mapping`` for any other document."""
    where = f"{option} {path}"
    try:
        document = load_json(read_bounded(path, max_bytes)) if json_only else load_yaml(read_text(path, max_bytes))
    except FileNotFoundError:
        raise OptionFileProblem(f"{where}: no such file") from None
    except FileProblem as problem:
        raise OptionFileProblem(f"{where}: {problem}") from None
    if not isinstance(document, dict):
        raise OptionFileProblem(f"{where}: {not_a_mapping}")
    return document


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max([_depth(item, level + 1) for item in value.values()], default=level + 1)
    if isinstance(value, list):
        return max([_depth(item, level + 1) for item in value], default=level + 1)
    return level

"""The key table of docs/stacks.md, generated from the stack schema (:class:`StackConfig` and the
models it nests): each key's path, type, default and description, so that the page cannot drift
from what `validate` accepts. ``python -m trainstack.stackmodel.keytable`` rewrites the table
between its markers; tests/test_stack_keys_doc.py fails when the page differs."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from trainstack.stackmodel.schema import StackConfig

STACKS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "stacks.md"
COMMAND = ".venv/bin/python -m trainstack.stackmodel.keytable"
BEGIN = f"<!-- key table: generated from the schema by `{COMMAND}`; edit the Field descriptions, not this -->"
END = "<!-- end of the key table -->"
# StackConfig's own fields: these two are gcp: keys; `settings` holds the trainstack: namespace;
# `stack` is the stack's name (Pulumi.<stack>.yaml), no key.
GCP_FIELDS = ("project", "region")
SETTINGS_FIELD = "settings"
NAMESPACE_PREFIX = "trainstack:"
# Types of the schema's own that pydantic validates (schema.JobSecret), as the table names them.
OTHER_TYPES = {"JobSecret": "secret"}


@dataclass(frozen=True)
class KeyRow:
    key: str
    type: str
    default: str
    description: str

    def markdown(self) -> str:
        cells = (f"`{self.key}`", self.type, self.default, self.description)
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _optional_inner(annotation: Any) -> Any:
    """``X`` of ``X | None``; ``annotation`` otherwise."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """The type under ``Annotated`` and ``| None``, and the constraints found on the way."""
    constraints: list[Any] = []
    while True:
        annotation = _optional_inner(annotation)
        if get_origin(annotation) is not Annotated:
            return annotation, constraints
        annotation, *metadata = get_args(annotation)
        for item in metadata:
            constraints += item.metadata if isinstance(item, FieldInfo) else [item]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    kind, _ = _unwrap(annotation)
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bounds(constraints: Sequence[Any]) -> str:
    """``1 to 100``, ``at least 1``, ``above 0, at most 2``, ``at most 256``, or ``""``."""
    found = {
        name: getattr(c, name)
        for c in constraints
        for name in ("ge", "gt", "le", "lt", "min_length", "max_length")
        if getattr(c, name, None) is not None
    }
    low = found.get("ge", found.get("min_length"))
    high = found.get("le", found.get("max_length"))
    if low is not None and high is not None:
        return f"{_number(low)} to {_number(high)}"
    words = [f"at least {_number(low)}"] if low is not None else []
    words += [f"above {_number(found['gt'])}"] if "gt" in found else []
    words += [f"at most {_number(high)}"] if high is not None else []
    words += [f"below {_number(found['lt'])}"] if "lt" in found else []
    return ", ".join(words)


def _type_text(annotation: Any, field_constraints: Sequence[Any] = ()) -> str:
    kind, constraints = _unwrap(annotation)
    bounds = _bounds([*constraints, *field_constraints])
    origin = get_origin(kind)
    if origin is Literal:
        return "one of " + ", ".join(f"`{choice}`" for choice in get_args(kind))
    if origin is list:
        text = f"list of {_type_text(get_args(kind)[0])}"
        return f"{text}; {bounds} items" if bounds else text
    if origin is dict:
        key, value = get_args(kind)
        return f"mapping of {_type_text(key)} to {_type_text(value)}"
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return "mapping"
    names = {bool: "true or false", int: "integer", float: "number", str: "text"}
    text = names.get(kind) or OTHER_TYPES.get(getattr(kind, "__name__", ""), str(kind))
    if kind is str and bounds:
        return f"text of {bounds} characters"
    return f"{text}, {bounds}" if bounds else text


def _default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined or value is None:
        return "not set"
    if isinstance(value, BaseModel):
        return "its keys' defaults"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{json.dumps(value)}`"


def _description(field: FieldInfo) -> str:
    if field.description:
        return " ".join(field.description.split())
    model = _model_of(field.annotation)
    doc = (model.__doc__ or "") if model is not None else ""
    return " ".join(doc.split("\n\n")[0].split()).replace("``", "`")


def _rows(model: type[BaseModel], prefix: str) -> Iterator[KeyRow]:
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        yield KeyRow(key, _type_text(field.annotation, field.metadata), _default_text(field), _description(field))
        nested = _model_of(field.annotation)
        if nested is not None:
            yield from _rows(nested, f"{key}.")


def key_rows() -> list[KeyRow]:
    """Every key a stack file may set, in the schema's order: gcp:project, gcp:region, then the
    trainstack: namespace, each section followed by its keys."""
    fields = StackConfig.model_fields
    rows = [
        KeyRow(
            f"gcp:{name}", _type_text(fields[name].annotation), _default_text(fields[name]), _description(fields[name])
        )
        for name in GCP_FIELDS
    ]
    settings = _model_of(fields[SETTINGS_FIELD].annotation)
    assert settings is not None
    return [*rows, *_rows(settings, NAMESPACE_PREFIX)]


def key_table() -> str:
    lines = ["| key | type | default | what it is |", "|---|---|---|---|", *(row.markdown() for row in key_rows())]
    return "\n".join(lines) + "\n"


def with_key_table(page: str) -> str:
    """``page`` with the text between its markers replaced by the generated table."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no pair of key-table markers ({BEGIN} ... {END})")
    return f"{head}{BEGIN}\n{key_table()}{END}{tail}"


def main(argv: Sequence[str] = ()) -> int:
    """Rewrites the key table of docs/stacks.md."""
    if argv:
        print(f"usage: {COMMAND}  (rewrites the key table of {STACKS_PAGE.name})", file=sys.stderr)
        return 2
    page = STACKS_PAGE.read_text(encoding="utf-8")
    STACKS_PAGE.write_text(with_key_table(page), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

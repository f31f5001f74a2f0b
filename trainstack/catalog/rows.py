"""The catalog's CSV rows read into its typed records, one rule for every file.

A record is a frozen dataclass; each field is read from the column of its name, or of the name
its :func:`column` metadata gives, by the field's type: ``str`` as it is, ``int``, ``float``, ``bool``
(``yes`` or ``no``), ``date`` (ISO), ``tuple[int, ...]`` and ``tuple[str, ...]`` (separated by
spaces), and ``X | None`` (an empty cell is None). A cell that does not read as its type is a
:class:`CatalogError` naming the file, the row and the column: the shipped files are checked by
the tests, and a `catalog refresh` overlay by the same rule.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import date
from typing import Any, TypeVar

Record = TypeVar("Record")

_COLUMN = "trainstack.catalog.column"
_EMPTY = "trainstack.catalog.empty"
_PARSE = "trainstack.catalog.parse"
_BOOLEANS = {"yes": True, "no": False}


class CatalogError(ValueError):
    """A catalog row that does not read as its record; the message names the file, row and column."""


def column(
    name: str | None = None, *, empty: Any = dataclasses.MISSING, parse: Callable[[str], Any] | None = None
) -> dict[str, Any]:
    """The metadata of a record field (``dataclasses.field(metadata=column(...))``) read from
    the column ``name`` (the field's own name if None); ``empty``: its value for an empty cell;
    ``parse``: how its text reads, where its type does not say."""
    return {_COLUMN: name, _EMPTY: empty, _PARSE: parse}


def records(rows: Iterable[Mapping[str, str]], record: type[Record], filename: str) -> list[Record]:
    """Each row of ``filename`` as a ``record``."""
    hints = typing.get_type_hints(record)
    fields = dataclasses.fields(record)  # type: ignore[arg-type]
    found = []
    for number, row in enumerate(rows, start=1):
        values = {}
        for field in fields:
            name = field.metadata.get(_COLUMN) or field.name
            text = row.get(name)
            if text is None:
                if field.default is not dataclasses.MISSING:
                    continue
                raise CatalogError(f"{filename}: no column {name!r} (row {number})")
            try:
                values[field.name] = _read(text, hints[field.name], field.metadata)
            except (ValueError, KeyError) as error:
                raise CatalogError(
                    f"{filename} row {number}, column {name}: {text!r} does not read ({error})"
                ) from None
        found.append(record(**values))
    return found


def _read(text: str, kind: Any, metadata: Mapping[str, Any]) -> Any:
    parse = metadata.get(_PARSE)
    empty = metadata.get(_EMPTY, dataclasses.MISSING)
    if not text.strip() and empty is not dataclasses.MISSING:
        return empty
    if parse is not None:
        return parse(text)
    return _typed(text, kind)


def _typed(text: str, kind: Any) -> Any:
    arguments = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in arguments:
        (inner,) = (argument for argument in arguments if argument is not type(None))
        return None if not text.strip() else _typed(text, inner)
    if typing.get_origin(kind) is tuple:
        return tuple(_typed(part, arguments[0]) for part in text.split())
    if kind is bool:
        return _BOOLEANS[text]
    if kind is date:
        return date.fromisoformat(text)
    if kind in (int, float, str):
        return kind(text)
    raise TypeError(f"a catalog record cannot hold a {kind!r}")

"""A frozen dataclass as the JSON object that a command prints or a document stores."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import fields
from typing import Any


def record_json(record: Any, exclude: Collection[str] = (), **values: Any) -> dict[str, Any]:
    """Each field of the dataclass ``record`` under its own name, in the order declared (``json``
    writes a tuple as an array); ``values`` stand in for a field whose JSON differs (rounded,
    nested) and add the derived keys after the fields; the fields named in ``exclude`` are left out."""
    document = {field.name: getattr(record, field.name) for field in fields(record) if field.name not in exclude}
    document.update(values)
    return document

"""Google's answers checked against the schemas of the discovery documents google-api-python-client
ships (the same documents its clients are built from), so that a reader never takes a
wrong-typed field, an enum value the API does not have, or an off-schema item for data.

``strict`` also refuses fields the schema lacks: the tests hold the answers they write to it.
A reader of live answers leaves it off, since Google adds fields before the pinned library's
documents know them.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any


@cache
def discovery_document(api: str, version: str) -> dict[str, Any]:
    import googleapiclient

    documents = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"
    document: dict[str, Any] = json.loads((documents / f"{api}.{version}.json").read_text(encoding="utf-8"))
    return document


def _object_problems(api: str, version: str, schema: dict[str, Any], value: Any, path: str, strict: bool) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object, got {type(value).__name__}"]
    problems: list[str] = []
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in properties:
            problems += schema_problems(api, version, properties[key], item, f"{path}.{key}", strict)
        elif extra is not None:
            problems += schema_problems(api, version, extra, item, f"{path}[{key!r}]", strict)
        elif strict:
            problems.append(f"{path}: no field {key!r} in the schema (fields: {', '.join(sorted(properties))})")
    return problems


def schema_problems(
    api: str, version: str, schema: dict[str, Any], value: Any, path: str = "$", strict: bool = True
) -> list[str]:
    """Where ``value`` departs from ``schema`` (a discovery-document schema, ``$ref`` followed)."""
    document = discovery_document(api, version)
    if "$ref" in schema:
        return schema_problems(api, version, document["schemas"][schema["$ref"]], value, path, strict)
    kind = schema.get("type")
    if kind == "object":
        return _object_problems(api, version, schema, value, path, strict)
    if kind == "array":
        if not isinstance(value, list):
            return [f"{path}: expected an array, got {type(value).__name__}"]
        return [
            p
            for i, item in enumerate(value)
            for p in schema_problems(api, version, schema["items"], item, f"{path}[{i}]", strict)
        ]
    if kind == "string":
        if not isinstance(value, str):
            # int64 and uint64 travel as strings in JSON: a bare number is a wrong answer.
            return [f"{path}: expected a string ({schema.get('format', 'text')}), got {type(value).__name__}"]
        if "enum" in schema and value not in schema["enum"]:
            return [f"{path}: {value!r} is not one of the schema's values"]
        return []
    if kind == "integer":
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{path}: expected an integer"]
    if kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected a number"]
    if kind == "boolean":
        return [] if isinstance(value, bool) else [f"{path}: expected a boolean"]
    return []  # "any"


def item_problems(api: str, version: str, schema_name: str, value: Any) -> list[str]:
    """Where an item of a live answer departs from the named schema (unknown fields allowed)."""
    return schema_problems(api, version, {"$ref": schema_name}, value, schema_name, strict=False)

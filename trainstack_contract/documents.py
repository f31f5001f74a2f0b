"""JSON documents the program, the agent and the trainer read back from storage or metadata."""

from __future__ import annotations

import json
from typing import Any


def json_object(text: str | bytes) -> dict[str, Any] | None:
    """The JSON object ``text`` holds; None where it is not JSON, or JSON but not an object.

    The caller bounds ``text``'s size first, and says in its own words what it expected."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None

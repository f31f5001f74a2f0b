"""The one error type a user sees: a list of problems, each tied to a config key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A problem line quotes what the user wrote; a hostile file can hold megabytes in one value.
MAX_QUOTED_CHARS = 80
MAX_KEY_CHARS = 200
MAX_MESSAGE_CHARS = 2000


def shorten(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, without building the repr of a huge value."""
    # Values come from YAML and JSON files: spelled as there, never as Python's None and True.
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, bytes)) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, (dict, list, tuple, set)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value)} items"
    try:
        text = repr(value)
    except ValueError:  # an int too long to show (Python's 4300-digit limit)
        return f"a {type(value).__name__} too long to show"
    return text if len(text) <= limit else f"{text[:limit]}..."


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a stack file, located by its config key (e.g. ``trainstack:cluster.workers.count``)."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{one_line(self.key)[:MAX_KEY_CHARS]}: {one_line(self.message)[:MAX_MESSAGE_CHARS]}"


def one_line(text: str) -> str:
    """``text`` with every character that is not printable (control characters, and U+2028 and
    NEL, which YAML reads as line breaks) written as its escape: one line on a terminal or in a
    YAML comment, whatever a file holds."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class StackConfigError(Exception):
    """Raised when a stack file cannot be turned into a valid stack; carries every problem found."""

    def __init__(self, problems: list[Problem], partial: Any = None, dropped: frozenset[str] = frozenset()) -> None:
        self.problems = problems
        # What still parses once the failing sections (``dropped``, e.g. "trainstack:job") are
        # left out: the catalog's rules check it too, so one problem does not hide the others.
        self.partial = partial
        self.dropped = dropped
        super().__init__("\n".join(str(p) for p in problems))

    def report(self) -> str:
        """How every command (and the Pulumi program) prints it: a heading, one line a problem."""
        lines = [f"trainstack: {len(self.problems)} problem(s) in the stack configuration:"]
        return "\n".join([*lines, *(f"  {problem}" for problem in self.problems)])


class ProgramExit(Exception):
    """The Pulumi program ended itself (invalid config: it has printed why); ``code`` is its exit status."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"the Pulumi program exited with status {code}")

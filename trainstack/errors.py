"""The one error type a user sees: a list of problems, each tied to a config key."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a stack file, located by its config key (e.g. ``trainstack:cluster.workers.count``)."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{_printable(self.key)}: {_printable(self.message)}"


def _printable(text: str) -> str:
    """Escape control characters so one problem stays on one line, whatever a file holds."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class StackConfigError(Exception):
    """Raised when a stack file cannot be turned into a valid stack; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

"""A notebook's bash cell (or a short script) that submits an AI Platform job: the ``gcloud
ai-platform jobs submit training`` command found among its other lines, with the variables the
cell itself assigns plainly written into it.

A plain assignment is ``NAME=VALUE`` or ``export NAME=VALUE`` whose value is one word of
letters, digits and ``_./:=@%+,-``, possibly built of other plain variables (``OUTDIR=gs://${BUCKET}/out``).
Anything else (``$(date ...)``, a value with spaces or quotes, a variable the cell does not
assign) stays a variable, and the import names it as it names any shell variable: an import
takes no value from the environment it runs in. Nothing of the cell runs; its other lines
(``echo``, ``gcloud storage rm``, ``cd``) are named as not imported.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

# Jupyter's cell magics and IPython's shell escape, which a notebook cell's lines may carry.
_MAGIC = re.compile(r"%%(?:bash|sh|script\s+bash)\b.*")
_ASSIGNMENT = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
# What a value written into the command may hold: the same in any quoting a shell reads.
_PLAIN = re.compile(r"[A-Za-z0-9_./:=@%+,-]{0,1000}")
MAX_CELL_LINES = 500


@dataclass
class Cell:
    """The cell's command, with its plain variables written in, and what was left out."""

    command: str
    written_in: list[str] = field(default_factory=list)
    not_plain: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def notices(self) -> list[str]:
        notes = []
        if self.written_in:
            notes.append(
                f"the cell's own variables are written into the command: {', '.join(sorted(set(self.written_in)))}"
            )
        if self.not_plain:
            notes.append(
                f"the cell assigns {', '.join(sorted(set(self.not_plain)))} with more than a plain value "
                "(a command, spaces, quotes): they stay variables"
            )
        if self.skipped:
            notes.append(f"the cell's other lines are not imported (nothing of it runs): {'; '.join(self.skipped)}")
        return notes


def _logical_lines(text: str) -> list[str]:
    joined = re.sub(r"\\\r?\n", " ", text)
    lines = []
    for line in joined.splitlines()[:MAX_CELL_LINES]:
        stripped = line.strip().removeprefix("!").strip()
        # A magic line counts as a line (the numbers named are the file's), and holds nothing.
        lines.append("" if _MAGIC.fullmatch(stripped) else stripped)
    return lines


def _substitute(text: str, values: dict[str, str]) -> tuple[str, list[str]]:
    """``text`` with each ``$NAME`` or ``${NAME}`` that ``values`` holds written in, outside
    single quotes (where a shell expands nothing); the names written in."""
    out: list[str] = []
    used: list[str] = []
    quoted = False
    for part in re.split(r"(')", text):
        if part == "'":
            quoted = not quoted
            out.append(part)
            continue
        if quoted:
            out.append(part)
            continue

        def replace(match: re.Match[str]) -> str:
            name = match[1] or match[2]
            if name in values:
                used.append(name)
                return values[name]
            return match[0]

        out.append(_REFERENCE.sub(replace, part))
    return "".join(out), used


def _plain_value(raw: str, values: dict[str, str]) -> str | None:
    """The value of an assignment's right-hand side when it is plain, else None."""
    if "$(" in raw or "`" in raw:
        return None
    text, _ = _substitute(raw, values)
    if "$" in text:
        return None
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    if len(words) > 1:
        return None
    value = words[0] if words else ""
    return value if _PLAIN.fullmatch(value) else None


def command_in_cell(text: str, command_words: tuple[str, ...]) -> Cell | None:
    """The cell's first line that starts ``command_words``, with the plain variables assigned
    before it written in; None when no line starts it."""
    lines = _logical_lines(text)
    values: dict[str, str] = {}
    cell = Cell("")
    for number, line in enumerate(lines, start=1):
        if not line or line.startswith("#"):
            continue
        if tuple(line.split()[: len(command_words)]) == command_words:
            cell.command, used = _substitute(line, values)
            cell.written_in = used
            return cell
        assignment = _ASSIGNMENT.fullmatch(line)
        if assignment is None:
            cell.skipped.append(f"line {number} ({' '.join(line.split()[:3])[:60]})")
            continue
        name, value = assignment[1], _plain_value(assignment[2], values)
        if value is None:
            values.pop(name, None)
            cell.not_plain.append(name)
        else:
            values[name] = value
    return None

"""One meaning for ``--args`` on every command (`local`, `submit`, `tune`): it overrides the
stack's job.args flag by flag.

A flag given (``--lr 0.01`` or ``--lr=0.01``) replaces the same flag of the stack's arguments
and its values, where the stack has it, or is added at the end; every other argument of the
stack's is kept, in its order. A flag's values are the words after it up to the next flag (a
word starting with ``-`` that is not a negative number), as argparse reads ``nargs``. Words
given before any flag are added at the end. ``--args-replace`` replaces the whole list instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A negative number is a value, not a flag (argparse reads ``--shift -1`` so).
_NEGATIVE_NUMBER = re.compile(r"-[0-9.]+(?:[eE][-+]?[0-9]+)?")


def is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and _NEGATIVE_NUMBER.fullmatch(word) is None


def flag_name(word: str) -> str:
    """``--lr`` of ``--lr=0.01``."""
    return word.split("=", 1)[0]


def _groups(args: Sequence[str]) -> list[list[str]]:
    """``args`` cut at each flag: [words before any flag], [flag, values...], ..."""
    groups: list[list[str]] = [[]]
    for word in args:
        if is_flag(word):
            groups.append([word])
        else:
            groups[-1].append(word)
    return groups


def override_arguments(base: Sequence[str], given: Sequence[str]) -> list[str]:
    """``base`` with each flag of ``given`` (and its values) in place of the same flag there."""
    given_groups = _groups(given)
    loose, flagged = given_groups[0], given_groups[1:]
    replacing: dict[str, list[str]] = {}
    for group in flagged:
        # A flag given more than once (an append action's) keeps every occurrence given.
        replacing.setdefault(flag_name(group[0]), []).extend(group)
    result: list[str] = []
    placed: set[str] = set()
    for group in _groups(base):
        name = flag_name(group[0]) if group and is_flag(group[0]) else None
        if name is None or name not in replacing:
            result += group
        elif name not in placed:
            # The first occurrence takes the given values; later ones are dropped with theirs.
            result += replacing[name]
            placed.add(name)
    for name, words in replacing.items():
        if name not in placed:
            result += words
    return [*result, *loose]

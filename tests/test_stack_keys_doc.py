"""docs/stacks.md's key table is the schema's: generated from StackConfig's models, kept equal here."""

from __future__ import annotations

import pytest

from trainstack.stackmodel import keytable


def test_the_key_table_of_stacks_md_is_the_one_the_schema_generates() -> None:
    page = keytable.STACKS_PAGE.read_text(encoding="utf-8")
    assert page == keytable.with_key_table(page), (
        f"docs/stacks.md's key table differs from the schema; regenerate it: {keytable.COMMAND}"
    )


def test_every_key_has_a_type_a_default_and_a_description() -> None:
    rows = keytable.key_rows()
    assert [row.key for row in rows if not (row.type and row.default and row.description)] == []
    keys = [row.key for row in rows]
    assert len(keys) == len(set(keys))
    assert keys[:3] == ["gcp:project", "gcp:region", "trainstack:zone"]


# A few keys of each kind, each with its type and default as its field gives them.
FIELD_FACTS = {
    "trainstack:cluster.chief.disk_gb": ("integer, 50 to 65536", "`200`"),
    "trainstack:cluster.workers.count": ("integer, 0 to 3790", "required"),
    "trainstack:cluster.strategy": (
        "one of `auto`, `one_device`, `mirrored`, `multi_worker_mirrored`, `parameter_server`",
        "`auto`",
    ),
    "trainstack:cluster.max_run_hours": ("number, 0.01 to 2880", "`24`"),
    "trainstack:tpu.on_finish": ("one of `stop`, `delete`, `keep`", "not set"),
    "trainstack:job.args": ("list of text; at most 256 items", "`[]`"),
    "trainstack:budget.thresholds": ("list of number, above 0, at most 2; at most 20 items", "`[0.5, 0.9, 1.0]`"),
    "trainstack:storage.wheelhouse": ("text of 1 to 4096 characters", "not set"),
    "trainstack:secrets": ("mapping of text to secret", "`{}`"),
}


def test_a_keys_type_and_default_come_from_its_field() -> None:
    facts = {row.key: (row.type, row.default) for row in keytable.key_rows() if row.key in FIELD_FACTS}
    assert facts == FIELD_FACTS


def test_the_table_replaces_only_what_lies_between_its_markers() -> None:
    page = f"before\n{keytable.BEGIN}\nstale | table\n{keytable.END}\nafter\n"
    assert keytable.with_key_table(page) == f"before\n{keytable.BEGIN}\n{keytable.key_table()}{keytable.END}\nafter\n"
    with pytest.raises(ValueError, match="markers"):
        keytable.with_key_table("a page without them")

"""The catalog's rows read by one typed rule (trainstack.catalog.rows): each field by its type,
an empty cell where the record allows one, and a cell that does not read named by file, row
and column."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

import pytest

from trainstack.catalog import MachineType, load_catalog
from trainstack.catalog.rows import CatalogError, column, records


@dataclass(frozen=True)
class Sample:
    name: str = field(metadata=column("sample"))
    count: int = field(metadata=column(empty=0))
    price: float | None
    allowed: bool
    sizes: tuple[int, ...]
    until: date
    inferred: bool = field(metadata=column("confidence", parse=lambda text: text == "inferred"))


ROW = {
    "sample": "a",
    "count": "",
    "price": "",
    "allowed": "yes",
    "sizes": "8 16",
    "until": "2026-07-11",
    "confidence": "inferred",
}


def test_each_field_reads_by_its_type_and_column() -> None:
    (sample,) = records([ROW], Sample, "samples.csv")
    assert sample == Sample("a", 0, None, True, (8, 16), date(2026, 7, 11), True)
    (priced,) = records([{**ROW, "count": "3", "price": "0.35", "allowed": "no"}], Sample, "samples.csv")
    assert (priced.count, priced.price, priced.allowed) == (3, 0.35, False)


@pytest.mark.parametrize(
    ("column_name", "text"),
    [("count", "three"), ("price", "free"), ("allowed", "true"), ("sizes", "8 x"), ("until", "soon")],
)
def test_a_cell_that_does_not_read_names_the_file_row_and_column(column_name: str, text: str) -> None:
    with pytest.raises(CatalogError, match=rf"samples\.csv row 2, column {column_name}: '{text}' does not read"):
        records([ROW, {**ROW, column_name: text}], Sample, "samples.csv")


def test_a_missing_column_is_named() -> None:
    row = {key: value for key, value in ROW.items() if key != "sizes"}
    with pytest.raises(CatalogError, match=r"samples\.csv: no column 'sizes' \(row 1\)"):
        records([row], Sample, "samples.csv")


def test_the_shipped_machine_types_read_as_before() -> None:
    # A machine without GPUs has an empty builtin_gpu_count: 0, and no GPU.
    machine = load_catalog().machine_types["n1-standard-1"]
    assert isinstance(machine, MachineType)
    assert (machine.builtin_gpu, machine.builtin_gpu_count, machine.nic_type) == (None, 0, None)
    assert machine.on_demand_allowed is True
    a3 = load_catalog().machine_types["a3-highgpu-8g"]
    assert (a3.builtin_gpu, a3.builtin_gpu_count) == ("nvidia-h100-80gb", 8)

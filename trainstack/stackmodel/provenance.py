"""Which shipped catalog rows a stack's acceptance rests on, and which of those no primary
source confirms (their note or source says "unverified"; `trainstack catalog show --unverified`
lists them all). `validate` says so in one line: a stack that passes only because of such a
row may still be refused by Google."""

from __future__ import annotations

import trainstack_contract as contract
from trainstack.catalog import Catalog, UnverifiedRow, unverified_rows
from trainstack.stackmodel.resolved import ResolvedStack

# A row is named by its file and its first column's value; a second value, where given, must
# match the row's second column too (gpu_zones.csv: GPU and zone).
RowName = tuple[str, str, str | None]


def _capacity_rules(catalog: Catalog, capacity: str, machine_type: str, stops: bool) -> set[RowName]:
    """The capacity_rules.csv rows that decide whether a node of this capacity is accepted;
    ``stops``: the node is stopped, not deleted, at the end of its run."""
    rules = {row.rule for row in catalog.capacity.rows}
    names: set[RowName] = set()
    if capacity == contract.FLEX_START:
        names |= {("capacity_rules.csv", rule, None) for rule in rules if rule.startswith("flex_start_")}
        if not stops:
            names.discard(("capacity_rules.csv", "flex_start_stoppable", None))
    if capacity == contract.RESERVATION:
        names |= {("capacity_rules.csv", rule, None) for rule in rules if rule.startswith("reservation_")}
        names.discard(("capacity_rules.csv", "reservation_bound_machine", None))
        names.add(("capacity_rules.csv", "reservation_bound_machine", machine_type))
    if capacity == contract.SPOT:
        names.add(("capacity_rules.csv", "reservation_spot", None))
    return names


def stack_rows(stack: ResolvedStack, catalog: Catalog) -> set[RowName]:
    """The catalog rows the stack's machines, GPUs, disks, zones, images and capacity rest on."""
    names: set[RowName] = {("zones.csv", stack.region, stack.zone)}
    machines = []
    if stack.cluster is not None:
        for node in stack.cluster.nodes:
            machines.append((node.machine_type, node.accelerator, node.boot_disk_type, node.image))
            stops = node.flex_start is not None and node.flex_start.termination_action == "STOP"
            names |= _capacity_rules(catalog, node.capacity, node.machine_type, stops)
    if stack.notebook is not None:
        notebook = stack.notebook
        machines.append((notebook.machine_type, notebook.accelerator, notebook.boot_disk_type, notebook.image))
    for machine_type, accelerator, disk_type, image in machines:
        names |= {("machine_types.csv", machine_type, None), ("disks.csv", disk_type, None)}
        names.add(("images.csv", image.purpose, image.project))
        if accelerator is not None:
            names |= {("gpus.csv", accelerator.type, None), ("gpu_zones.csv", accelerator.type, stack.zone)}
            names.add(("n1_gpu_limits.csv", accelerator.type, str(accelerator.count)))
    if stack.tpu is not None:
        tpu = stack.tpu
        names |= {("tpu_runtimes.csv", tpu.runtime_version, None), ("capacity_rules.csv", "tpu_capacity", tpu.capacity)}
        found = catalog.tpu_generation_for(tpu.accelerator_type)
        if found is not None:
            generation = found[0].generation
            names |= {("tpu_generations.csv", generation, None), ("tpu_zones.csv", generation, stack.zone)}
    return names


def unverified_rows_of(stack: ResolvedStack, catalog: Catalog) -> list[tuple[UnverifiedRow, str]]:
    """The rows the stack rests on that no primary source confirms, in the catalog's order,
    each with the name it is matched by (file, first column and, where it counts, the second)."""
    names = stack_rows(stack, catalog)
    found = []
    for row in unverified_rows():
        first, second = ((*row.key, "", ""))[:2]
        if (row.filename, first, second) in names:
            found.append((row, f"{row.filename} {first} {second}"))
        elif (row.filename, first, None) in names:
            found.append((row, f"{row.filename} {first}"))
    return found


def unverified_line(stack: ResolvedStack, catalog: Catalog) -> str | None:
    """One line for `validate`, or None when every row the stack rests on is confirmed."""
    rows = unverified_rows_of(stack, catalog)
    if not rows:
        return None
    named = ", ".join(name for _, name in rows)
    return (
        f"this stack rests on {len(rows)} catalog row(s) no primary source confirms ({named}): Google may "
        "refuse or price it otherwise; `trainstack catalog show --unverified` gives each row's note and source"
    )

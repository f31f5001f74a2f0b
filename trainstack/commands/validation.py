"""What `validate` prints for a stack, which `init` prints too for the stack it wrote."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from trainstack.base.errors import StackConfigError
from trainstack.catalog import catalog_line

if TYPE_CHECKING:
    from trainstack.stackmodel.derived import CheckedFacts
    from trainstack.stackmodel.resolved import ResolvedStack
    from trainstack.stackmodel.schema import StackConfig


def _summary(stack: ResolvedStack) -> str:
    parts = []
    if stack.cluster is not None:
        parts.append(f"cluster of {len(stack.cluster.nodes)} VMs ({stack.cluster.strategy})")
    if stack.tpu is not None:
        parts.append(f"TPU {stack.tpu.accelerator_type}")
    if stack.notebook is not None:
        parts.append(f"notebook {stack.notebook.machine_type}")
    return f"stack {stack.stack} is valid: {', '.join(parts)} in {stack.zone}, project {stack.project}"


def validate(config: StackConfig, facts: CheckedFacts | None = None) -> int:
    """Resolve the stack and render its boot files (the checks `pulumi up` would apply), then
    say what it is and warn of what it probably does not mean."""
    from trainstack.catalog import load_catalog
    from trainstack.cloud.prepare import prepare
    from trainstack.stackmodel.provenance import unverified_line
    from trainstack.stackmodel.resolved import placeholder_notes, stack_warnings

    resolved, _ = prepare(config, facts)
    print(_summary(resolved))
    print(catalog_line())
    # Valid offline, refused by Google: an example value `init` or a shipped stack wrote.
    for note in placeholder_notes(resolved):
        print(f"note: {note}", file=sys.stderr)
    for warning in stack_warnings(resolved):
        print(f"warning: {warning}", file=sys.stderr)
    unverified = unverified_line(resolved, load_catalog())
    if unverified is not None:
        print(f"note: {unverified}", file=sys.stderr)
    return 0


def validate_file(path: Path) -> int:
    """What `trainstack validate --stack-file PATH` prints, and its exit code."""
    from trainstack.stackmodel.stackfile import load_checked_stack

    try:
        return validate(*load_checked_stack(path, None))
    except StackConfigError as error:
        print(error.report(), file=sys.stderr)
        return 1

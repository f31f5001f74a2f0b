"""From a parsed stack to what the program builds: validated, resolved once, boot files rendered.

Kept apart from the Pulumi program so that `validate` answers without importing pulumi-gcp.
"""

from __future__ import annotations

from trainstack.cloud.bootscripts import BootFiles, boot_files
from trainstack.stackmodel.derived import CheckedFacts
from trainstack.stackmodel.resolved import ResolvedStack, resolve_stack
from trainstack.stackmodel.schema import StackConfig


def prepare(cfg: StackConfig, facts: CheckedFacts | None = None) -> tuple[ResolvedStack, BootFiles]:
    """Resolve a checked stack (:func:`trainstack.stackmodel.feasibility.parse_check_and_derive`,
    with what its checks derived) once and render its boot files; raises StackConfigError when
    Compute Engine would refuse the metadata."""
    resolved = resolve_stack(cfg, facts=facts)
    return resolved, boot_files(resolved)

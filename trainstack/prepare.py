"""From a parsed stack to what the program builds: validated, resolved once, boot files rendered.

Kept apart from the Pulumi program so that `validate` answers without importing pulumi-gcp.
"""

from __future__ import annotations

from trainstack.config import StackConfig
from trainstack.resolved import ResolvedStack, resolve_stack
from trainstack.rules import validate_stack
from trainstack.scripts import BootFiles, boot_files


def prepare(cfg: StackConfig) -> tuple[ResolvedStack, BootFiles]:
    """Validate a parsed stack, resolve it once and render its boot files; raises
    StackConfigError listing every problem (the catalog's rules, then Compute Engine's
    metadata limits on what would be set)."""
    resolved = resolve_stack(validate_stack(cfg))
    return resolved, boot_files(resolved)

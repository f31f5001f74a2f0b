"""The end of a flex-start machine's run, known in advance.

Compute Engine deletes a flex-start VM when its run duration (the stack's max_run_hours, at
most seven days) has passed since it started, and such a VM cannot be started again. A node
that waited for that would lose the job's last minutes and leave the job RUNNING in its
status until the other nodes time out. So the agent ends the job itself a margin before the
end, with a status that says why (its backup stays in the bucket for a later run), takes no
further queued job, and applies on_finish.

The run is counted from the machine's first boot, which the agent records on the node's boot
disk: a guest reboot does not restart the count, and a new VM (a later `pulumi up`) starts
with a new disk and a new count.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from trainstack_agent.settings import NodeSettings
from trainstack_contract import FLEX_START

STARTED_FILE = "machine-started"
_EPOCH = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True)
class RunEnd:
    """``at``: the monotonic instant this node ends its work; ``reason``: the status it records."""

    at: float
    reason: str


def machine_started(state_dir: Path, now: float) -> float:
    """When this machine first booted (seconds since the epoch), recorded at its first boot.
    A record that is not a time up to ``now`` is taken as now and written again: the count
    then errs late, never early, and a damaged file does not stop the node."""
    path = state_dir / STARTED_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    if _EPOCH.fullmatch(text) and int(text) <= now:
        return float(text)
    state_dir.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(str(int(now)), encoding="ascii")
    os.replace(temporary, path)
    return float(int(now))


def flex_start_end(
    settings: NodeSettings, state_dir: Path, epoch_now: float, monotonic_now: float, margin: float
) -> RunEnd | None:
    """When a flex-start node must end its work, or None for any other node."""
    if settings.capacity != FLEX_START or settings.max_run_seconds is None:
        return None
    ends = machine_started(state_dir, epoch_now) + settings.max_run_seconds
    when = datetime.fromtimestamp(ends, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    reason = (
        f"the flex-start run of this machine ends at {when} ({settings.max_run_seconds / 3600:g} h after it started): "
        "Compute Engine then deletes it and cannot start it again, so the job ended here, its backup kept in the "
        "bucket; `pulumi up` creates the machine again, and the job resumes from its backup when run again"
    )
    return RunEnd(monotonic_now + (ends - epoch_now) - margin, reason)

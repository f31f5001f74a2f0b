"""``trainstack local --standing``: the record that a stack's local cluster is up, in its work
directory, for `trainstack submit --local` to find and wake (SIGUSR1 to the pid it names).

``<workdir>/standing.json`` is ``{"version": 1, "pid": PID, "stack": NAME}`` while the standing
run is up; it is written once every node has booted and removed when the run ends.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Final

STANDING_FILE: Final = "standing.json"
STANDING_VERSION: Final = 1
# What `submit --local` sends the standing run: boot every node that has exited again.
WAKE_SIGNAL: Final = signal.SIGUSR1


def standing_path(workdir: Path) -> Path:
    return workdir / STANDING_FILE


def write_standing(workdir: Path, stack: str, pid: int | None = None) -> Path:
    """Records this process as the stack's standing run (written whole, then renamed into place)."""
    path = standing_path(workdir)
    partial = path.with_name(path.name + ".partial")
    record = {"version": STANDING_VERSION, "pid": os.getpid() if pid is None else pid, "stack": stack}
    partial.write_text(json.dumps(record) + "\n", encoding="utf-8")
    partial.replace(path)
    return path


def remove_standing(workdir: Path) -> None:
    standing_path(workdir).unlink(missing_ok=True)

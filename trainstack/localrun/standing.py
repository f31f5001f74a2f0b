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


# standing.json is a few dozen bytes; a larger one is not ours.
MAX_STANDING_BYTES: Final = 4096


def wake(workdir: Path, stack: str, stack_option: str | None = None) -> str:
    """`submit --local`: WAKE_SIGNAL to the standing run of ``stack`` named in ``workdir``, which
    boots its nodes that have exited; what happened, in words. A stale record's process id may be
    another program's by now: only a `trainstack local` process is signalled."""
    waits = f"the job waits for `trainstack local {stack_option or f'--stack {stack}'} --standing`"
    path = standing_path(workdir)
    try:
        with path.open("rb") as handle:
            document = json.loads(handle.read(MAX_STANDING_BYTES))
    except FileNotFoundError:
        return f"no standing local cluster is up ({path} is absent): {waits}"
    except (OSError, ValueError):
        return f"{path} is not what `trainstack local --standing` writes: {waits}"
    pid = document.get("pid") if isinstance(document, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or document.get("stack") != stack:
        return f"{path} names no standing run of stack {stack}: {waits}"
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        command = None
    words = [] if command is None else [Path(word.decode(errors="replace")).name for word in command.split(b"\0")]
    if command is not None and not ("trainstack" in words and "local" in words):
        return f"process {pid} of {path} is not `trainstack local` any more: {waits}"
    try:
        os.kill(pid, WAKE_SIGNAL)
    except ProcessLookupError:
        return f"the standing local cluster (process {pid}) is not up: {waits}"
    except PermissionError:
        return f"process {pid} (the standing local cluster) may not be signalled by this user: {waits}"
    return f"the standing local cluster (process {pid}) boots its stopped nodes"

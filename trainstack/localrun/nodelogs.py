"""What a local run keeps of each node's output: ``nodes/<node>/boot.log`` in the work
directory, one heading per run, and which lines are TensorFlow's native start-up chatter."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime
from pathlib import Path

from trainstack.localrun.supervisor import POLL_SECONDS

# The first line each run writes to every node's log: `trainstack logs --local` shows one
# heading per run from it, instead of running successive runs together.
RUN_HEADING = "=== trainstack local run started "


def run_heading(started: float) -> str:
    return f"{RUN_HEADING}{datetime.fromtimestamp(started, UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC ==="


def node_log(workdir: Path, node: str) -> Path:
    """A node's output in a work directory, appended line by line as it arrives (every boot
    of the node adds to it, as a VM's journal keeps its earlier boots); `trainstack logs
    --local` reads it."""
    return workdir / "nodes" / node / "boot.log"


# TensorFlow's native start-up messages: absl/glog lines ("E0000 00:00:... cuda_platform.cc:52]
# failed call to cuInit ...", which every CPU-only node prints) and the notice before them.
# `local` shows them only with --verbose; nodes/<node>/boot.log keeps every line.
_NATIVE_LOG_LINE = re.compile(r"[IWEF]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] .*")


_NATIVE_NOTICES = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "To enable the following instructions:",
)


def is_runtime_noise(line: str) -> bool:
    """True for TensorFlow's native start-up chatter, which says nothing about the job."""
    return bool(_NATIVE_LOG_LINE.fullmatch(line)) or line.startswith(_NATIVE_NOTICES)


class NodeLogWriter:
    """Appends each node's new output lines to its :func:`node_log` every POLL_SECONDS, in a
    thread, and the last ones when closed; each run starts every log with its heading."""

    def __init__(self, workdir: Path, lines: dict[str, list[str]], started: float) -> None:
        """``lines``: each node's output so far, a list its reader keeps appending to."""
        self._workdir = workdir
        self._lines = lines
        self._started = started
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._write, name="local-node-logs", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        self._thread.join()

    def _write(self) -> None:
        written = dict.fromkeys(self._lines, 0)
        handles = {name: node_log(self._workdir, name).open("a", encoding="utf-8") for name in self._lines}
        for handle in handles.values():
            handle.write(run_heading(self._started) + "\n")
        try:
            while True:
                closing = self._done.is_set()
                for name, lines in self._lines.items():
                    new = lines[written[name] :]
                    if new:
                        handles[name].write("".join(f"{line}\n" for line in new))
                        handles[name].flush()
                        written[name] += len(new)
                if closing:
                    return
                self._done.wait(POLL_SECONDS)
        finally:
            for handle in handles.values():
                handle.close()

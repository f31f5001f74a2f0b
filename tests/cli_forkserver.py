"""The command line run many times from one parent that imported it once.

A `trainstack` process spends most of half a second importing; a test that runs the command
a hundred times pays that a hundred times. :class:`CliForkServer` starts one plain Python
process (not the pytest worker, which may hold TensorFlow and its threads), imports the
command line and the modules `validate` loads there, and then forks one child per command.
Each child is a process of its own as the command a user types is: its own exit status, its
own CPU-time limit (RLIMIT_CPU counts from zero after a fork), its output in a file, and its
peak resident memory (the high-water mark reset at the fork, so it counts what the command
itself touched on top of the imported modules, as a fresh process's would).

What a fork cannot show (the interpreter's own start, a `python -m trainstack` that fails to
import) the few real-process canaries in tests/test_hostile_stacks.py still run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The modules a `validate` imports on its way (trainstack.commands.validate imports them
# inside its functions, so that `trainstack --help` stays quick).
PRELOADED = (
    "trainstack.commands.main",
    "trainstack.stackmodel.stackfile",
    "trainstack.stackmodel.resolved",
    "trainstack.stackmodel.provenance",
    "trainstack.cloud.prepare",
)

# Reads one request per line ({"argv", "output", "peak", "cpu_seconds", "hang_seconds"}), forks, answers the child's
# exit status (negative: the signal that ended it, as subprocess reports it) and peak memory.
SERVER = """
import importlib, json, os, resource, runpy, signal, sys, traceback

for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print("ready", flush=True)


def child(request):
    resource.setrlimit(resource.RLIMIT_CPU, (request["cpu_seconds"],) * 2)
    signal.alarm(request["hang_seconds"])  # a command that waits without using the CPU
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak resident memory, from here on
    output = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.argv = ["trainstack", *request["argv"]]
    code = 1
    try:
        runpy.run_module("trainstack", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            code = exit.code or 0
        else:
            print(exit.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with open("/proc/self/status") as status:
            peak_kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
        with open(request["peak"], "w") as peak:
            peak.write(peak_kb)
        os._exit(code)


for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps({"code": code}), flush=True)
"""


@dataclass(frozen=True)
class CliResult:
    code: int
    output: str
    peak_rss_mb: int


class CliForkServer:
    """One parent with the command line imported; :meth:`run` forks a command from it."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps(PRELOADED)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._read() == "ready", "the fork server did not start"

    def _read(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server ended (exit {self._process.wait()})")
        return line.strip()

    def run(self, argv: list[str], scratch: Path, cpu_seconds: int, hang_seconds: int) -> CliResult:
        """``trainstack ARGV`` in a child forked from the server, ended by the kernel past
        ``cpu_seconds`` of CPU time (SIGXCPU) or ``hang_seconds`` of any time (SIGALRM)."""
        output, peak = scratch / "cli-output", scratch / "peak-rss-kb"
        request = {
            "argv": argv,
            "output": str(output),
            "peak": str(peak),
            "cpu_seconds": cpu_seconds,
            "hang_seconds": hang_seconds,
        }
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        code = json.loads(self._read())["code"]
        peak_mb = int(peak.read_text()) // 1024 if peak.exists() else -1
        return CliResult(code, output.read_text(errors="replace"), peak_mb)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)

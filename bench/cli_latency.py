"""How long the offline commands take, as a user runs them: whole processes, best of N.

    .venv/bin/python bench/cli_latency.py [--repeat 5]

Each command is started as its own process (interpreter start-up and imports included), as
it is typed at a shell, against the shipped `multiworker` stack. Targets: `validate`, `gpus`
under 0.5 s; `plan` under 2 s. The baseline is the bare interpreter (`python -c pass`),
measured in the same run, so a slow machine shows as a slow baseline, not a slow command.
Python's bytecode cache is on, as in a user's shell, whatever the caller's environment says
(PYTHONDONTWRITEBYTECODE would make every run compile every module again): the first run
writes it, and the best of N counts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "python -c pass (baseline)": [sys.executable, "-c", "pass"],
    "validate": [sys.executable, "-m", "trainstack", "validate", "--stack", "multiworker"],
    "gpus": [sys.executable, "-m", "trainstack", "gpus"],
    "cost": [sys.executable, "-m", "trainstack", "cost", "--stack", "multiworker"],
    "plan": [sys.executable, "-m", "trainstack", "plan", "--stack", "multiworker"],
}
TARGETS = {"validate": 0.5, "gpus": 0.5, "plan": 2.0}


def user_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def best_of(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, cwd=REPOSITORY_ROOT, check=True, stdout=subprocess.DEVNULL, env=user_environment())
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command; the best counts")
    args = parser.parse_args(argv)
    results = {name: best_of(command, args.repeat) for name, command in COMMANDS.items()}
    baseline = results["python -c pass (baseline)"]
    missed = []
    print(f"{'command':<28}{'seconds':>9}{'x baseline':>12}{'target':>9}")
    for name, seconds in results.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else (f"< {target:g}" if seconds < target else f"MISSED {target:g}")
        if target is not None and seconds >= target:
            missed.append(name)
        print(f"{name:<28}{seconds:>9.3f}{seconds / baseline:>12.1f}{verdict:>9}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

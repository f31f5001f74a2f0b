"""A stand-in command on PATH that records each call's argv: how the tests check the exact
commands trainstack and its boot scripts send to tools this machine lacks (docker, gcloud)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest


def install_recording_command(
    name: str, directory: Path, monkeypatch: pytest.MonkeyPatch, exit_variable: str | None = None
) -> Path:
    """Puts ``name`` first on PATH; each call appends its argv as one JSON line to the returned
    file, and exits with ``$exit_variable`` when given (0 otherwise)."""
    bin_dir = directory / f"{name}-bin"
    bin_dir.mkdir(exist_ok=True)
    calls = directory / f"{name}-calls.jsonl"
    command = bin_dir / name
    exit_line = f'exit "${{{exit_variable}:-0}}"\n' if exit_variable else ""
    command.write_text(
        "#!/bin/bash\n"
        # One write() of the whole line: nodes call at the same moment, and under
        # PYTHONUNBUFFERED (as `trainstack local` runs them) print() writes the text and the
        # newline separately, so two calls could interleave on one line.
        "python3 -c 'import json, os, sys; os.write(1, (json.dumps(sys.argv[1:]) + \"\\n\").encode())' "
        f'"$@" >> {json.dumps(str(calls))}\n' + exit_line
    )
    command.chmod(command.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def recorded_calls(calls: Path) -> list[list[str]]:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []

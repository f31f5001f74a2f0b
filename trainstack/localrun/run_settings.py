"""The settings a local run was started with, kept in its work directory so that a resume keeps them.

`trainstack local --epochs 2 --image-size 64 --args ...` changes the job's flags for one run.
Once interrupted, the job resumes from its backup with `trainstack local --stack NAME`: without
the record that command would train from the backup with the stack's own flags (a backup of
64-pixel images restored into a 180-pixel model fails; one of 20 epochs resumed with 10 ships
the old model as final). So a run without overrides takes the recorded ones, a run with the
same ones goes on, and a run with others is refused, naming each difference and the two ways
on: the recorded settings, or ``--fresh``. The record goes once the job has succeeded.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from trainstack.base.files import FileProblem, load_json, read_bounded
from trainstack.localrun.nodes import TrainerOverrides

RUN_SETTINGS_FILE = "run-settings.json"
# Overrides are a few flags and at most `local --args`' 32 KiB.
MAX_RECORD_BYTES = 64 * 1024


class SettingsDiffer(Exception):
    """This run asks for other settings than the run whose backup it would resume."""


@dataclass(frozen=True)
class RecordedRun:
    job: str
    overrides: TrainerOverrides


def record_path(workdir: Path) -> Path:
    return workdir / RUN_SETTINGS_FILE


def write_record(workdir: Path, job: str, overrides: TrainerOverrides) -> None:
    content = {
        "job": job,
        "values": overrides.values,
        "extra": list(overrides.extra),
        "replaced": None if overrides.replaced is None else list(overrides.replaced),
    }
    temporary = record_path(workdir).with_suffix(".tmp")
    # In the order given: the command printed from it reads as the user wrote it.
    temporary.write_text(json.dumps(content, indent=2) + "\n")
    temporary.replace(record_path(workdir))


def forget(workdir: Path) -> None:
    """The job succeeded: nothing is left to resume."""
    record_path(workdir).unlink(missing_ok=True)


def read_record(workdir: Path) -> RecordedRun | None:
    path = record_path(workdir)
    try:
        content = load_json(read_bounded(path, MAX_RECORD_BYTES))
    except FileNotFoundError:
        return None
    except (FileProblem, ValueError) as error:
        raise SettingsDiffer(f"{path}: {error}; --fresh starts the job over") from None
    values, extra, job, replaced = (
        content.get(key) if isinstance(content, dict) else None for key in ("values", "extra", "job", "replaced")
    )
    if (
        (replaced is not None and not (isinstance(replaced, list) and all(isinstance(a, str) for a in replaced)))
        or not isinstance(job, str)
        or not isinstance(values, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())
        or not isinstance(extra, list)
        or not all(isinstance(arg, str) for arg in extra)
    ):
        raise SettingsDiffer(f"{path} is not a record of a local run's settings; --fresh starts the job over")
    return RecordedRun(job, TrainerOverrides(dict(values), tuple(extra), None if replaced is None else tuple(replaced)))


def command_line(stack: str, overrides: TrainerOverrides, workdir: Path | None = None) -> str:
    """The `trainstack local` command that runs the job with ``overrides``."""
    words = ["trainstack", "local", "--stack", stack, *(["--workdir", str(workdir)] if workdir else [])]
    for flag, value in overrides.values.items():
        words += [flag, value]
    if overrides.replaced is not None:
        words.append(f"--args-replace={shlex.join(overrides.replaced)}")
    if overrides.extra:
        words.append(f"--args={shlex.join(overrides.extra)}")
    return shlex.join(words)


def _describe(overrides: TrainerOverrides) -> dict[str, str]:
    described = dict(overrides.values)
    if overrides.replaced is not None:
        described["--args-replace"] = shlex.join(overrides.replaced)
    if overrides.extra:
        described["--args"] = shlex.join(overrides.extra)
    return described


def settings_for_this_run(
    workdir: Path, stack: str, job: str, overrides: TrainerOverrides, custom_workdir: bool
) -> tuple[TrainerOverrides, str | None]:
    """The overrides this run trains with, and a line to say when they are the recorded ones."""
    recorded = read_record(workdir)
    if recorded is None or recorded.job != job or recorded.overrides == overrides:
        return overrides, None
    again = command_line(stack, recorded.overrides, workdir if custom_workdir else None)
    if not overrides.values and not overrides.extra:
        return recorded.overrides, f"resuming job {job} with the settings it was started with: `{again}`"
    then, now = _describe(recorded.overrides), _describe(overrides)
    changed = [
        f"{flag} {now.get(flag, '(not given)')} (interrupted run: {then.get(flag, '(not given)')})"
        for flag in sorted(set(then) | set(now))
        if then.get(flag) != now.get(flag)
    ]
    raise SettingsDiffer(
        f"job {job} has a backup from a run with other settings: {'; '.join(changed)}. Resume it with its own "
        f"settings (`{again}`), or add --fresh to start the job over (its checkpoints and model go)"
    )

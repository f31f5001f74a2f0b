"""The job's user's paths (trainstack_agent/jobuser.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainstack_agent import jobuser


def test_a_file_renamed_away_while_the_job_dir_is_handed_over_is_no_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A local run's nodes share one job directory: another node's agent renames its status
    # object's temporary file away between the walk's listing and the chown.
    job_dir = tmp_path / "job"
    (job_dir / "status").mkdir(parents=True)
    (job_dir / "status" / ".job.json.1.tmp").write_text("{}")
    (job_dir / "status" / "chief.json").write_text("{}")
    owned: list[str] = []
    real_chown = os.chown

    def chown(path: Path, uid: int, gid: int, follow_symlinks: bool = True) -> None:
        if Path(path).name.endswith(".tmp"):
            Path(path).unlink()
            raise FileNotFoundError(2, "No such file or directory", str(path))
        owned.append(Path(path).name)
        real_chown(path, uid, gid, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(jobuser.os, "chown", chown)
    jobuser.give_tree(job_dir, os.getuid(), os.getgid())
    assert sorted(owned) == ["chief.json", "hypertune", "job", "status"]

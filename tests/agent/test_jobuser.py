"""The job's user's paths (trainstack_agent/jobuser.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from trainstack.localrun.workdir import interpreter_for_job_user
from trainstack_agent import jobuser
from trainstack_contract.jobuser import ensure_user


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


def test_a_finished_jobs_directory_is_the_agents_again_and_no_longer_the_job_users_to_write(tmp_path: Path) -> None:
    """A later job's code runs as the same user: it must not rewrite a finished job's backups."""
    assert os.geteuid() == 0, "this test hands a directory to the job's user and back: run the suite as root"
    uid, gid = ensure_user()
    job_dir = tmp_path / "bucket" / "jobs" / "q1_first"
    (job_dir / "backup" / "chief").mkdir(parents=True)
    jobuser.give_tree(job_dir, uid, gid)
    checkpoint = job_dir / "backup" / "chief" / "checkpoint"
    checkpoint.write_text("weights")
    os.chown(checkpoint, uid, gid)
    # (give_tree opened the directories above it to passing through, as in a local run.)
    python = interpreter_for_job_user()
    assert python is not None

    def job_user_may_write(path: Path) -> bool:
        probe = "import sys; open(sys.argv[1], 'a').close()"
        done = subprocess.run(
            [str(python), "-c", probe, str(path)], user=uid, group=gid, extra_groups=[], cwd="/", check=False
        )
        return done.returncode == 0

    assert job_user_may_write(checkpoint)
    assert job_user_may_write(job_dir / "model.pb")
    jobuser.take_back_tree(job_dir)
    assert not job_user_may_write(checkpoint)
    assert not job_user_may_write(job_dir / "planted.pb")
    assert not job_user_may_write(job_dir / "backup" / "chief" / "planted")
    assert checkpoint.read_text() == "weights"
    assert checkpoint.stat().st_uid == 0

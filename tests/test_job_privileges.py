"""What the job's code may do on its node: it runs as an unprivileged user of its own, not as
the agent's root, and it never outlives its agent. Run by the real boot script and agent
(`trainstack local`), which, run as root, drop to that user as a node does."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from stack_helpers import base_config, write_stack
from trainstack.commands.main import main
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.run import LocalStackRun
from trainstack.localrun.supervisor import wait_for
from trainstack.localrun.workdir import JobUserUnreachable, job_user_obstacle
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack
from trainstack_contract.jobuser import JOB_USER_NAME
from trainstack_contract.lifecycle import JobState

# Records who it runs as and whether it could write into the directory --forbidden names.
PRIVILEGES_MODULE = """
import json, os, pathlib, sys
argv = sys.argv[1:]
job_dir = argv[argv.index("--job-dir") + 1]
forbidden = pathlib.Path(argv[argv.index("--forbidden") + 1])
try:
    (forbidden / "written-by-the-job").write_text("the job's code was here")
    wrote = True
except PermissionError:
    wrote = False
record = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
          "wrote": wrote, "home": os.environ.get("HOME"), "user": os.environ.get("USER")}
os.makedirs(job_dir, exist_ok=True)
pathlib.Path(job_dir, "privileges.json").write_text(json.dumps(record))
"""

# Says where it is (its pid, in the job directory), then trains for ever.
LINGERING_MODULE = """
import os, pathlib, sys, time
argv = sys.argv[1:]
job_dir = pathlib.Path(argv[argv.index("--job-dir") + 1])
job_dir.mkdir(parents=True, exist_ok=True)
(job_dir / "trainer.pid.partial").write_text(str(os.getpid()))
(job_dir / "trainer.pid.partial").replace(job_dir / "trainer.pid")
time.sleep(3600)
"""


def local_run(
    tmp_path: Path, module_source: str, args: list[str], workdir: Path | None = None, echo: bool = False
) -> LocalStackRun:
    package = tmp_path / "code" / "probe_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(module_source)
    config = base_config()
    config["trainstack:cluster"] = {"chief": {"machine_type": "n1-standard-4"}, "strategy": "one_device"}
    config["trainstack:job"] = {"name": "probe", "package": str(package), "module": "probe_pkg.main", "args": args}
    stack = resolve_stack(load_stack(write_stack(tmp_path, config))[0])
    return LocalStackRun(stack, workdir or tmp_path / "work", TrainerOverrides(), echo=echo)


def require_root() -> None:
    # Explicit, not skipped: the suite runs as root here and in CI; a user cannot switch users.
    assert os.geteuid() == 0, "this test checks the drop from root to the job's user: run the test suite as root"


def test_the_jobs_code_runs_unprivileged_and_cannot_write_where_only_root_may(tmp_path: Path) -> None:
    require_root()
    # The drop needs a checkout whose packages the job's user can reach (not one in root's home).
    assert job_user_obstacle(tmp_path) is None, job_user_obstacle(tmp_path)
    forbidden = tmp_path / "root-only"
    forbidden.mkdir(mode=0o700)
    forbidden.chmod(0o700)
    result = local_run(tmp_path, PRIVILEGES_MODULE, ["--forbidden", str(forbidden)]).start().wait(timeout=300)
    assert result.succeeded, result.logs
    record: dict[str, Any] = json.loads((Path(result.job_dir) / "privileges.json").read_text())
    assert record["uid"] != 0, record
    assert record["euid"] != 0, record
    assert record["gid"] != 0, record
    assert 0 not in record["groups"], record
    assert record["user"] == JOB_USER_NAME
    assert not record["wrote"]
    assert not (forbidden / "written-by-the-job").exists()
    # Its HOME is its own, not root's.
    home = Path(record["home"])
    assert home.stat().st_uid == record["uid"]
    assert home.stat().st_mode & 0o077 == 0


def test_a_work_directory_the_jobs_user_cannot_enter_is_refused_never_run_as_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A work directory under a folder only root may enter (mktemp -d, root's home): the job's
    user could not reach the run's files. Running the job as root instead would no longer show
    what the cloud enforces: the run is refused, naming the folder and what to do."""
    require_root()
    closed = tmp_path / "home-of-root"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    local = local_run(tmp_path, PRIVILEGES_MODULE, ["--forbidden", str(tmp_path)], closed / "work", echo=True)
    with pytest.raises(JobUserUnreachable) as refused:
        local.start()
    message = str(refused.value)
    assert f"the job's code would run as root here, not as the unprivileged {JOB_USER_NAME}" in message
    assert f"cannot enter {closed} (mode 0700)" in message
    assert f"chmod o+x {closed}" in message
    assert not list((closed / "work").glob("nodes/*/boot.log"))
    stack_file = next(tmp_path.glob("Pulumi.*.yaml"))
    code = main(["local", "--stack-file", str(stack_file), "--workdir", str(closed / "cli")])
    err = capsys.readouterr().err
    assert code != 0
    assert err.startswith("trainstack: the job's code would run as root here")
    assert err.count("\n") == 1


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.mark.slow
def test_a_killed_agent_takes_its_trainer_with_it_and_its_node_is_not_left_running(tmp_path: Path) -> None:
    local = local_run(tmp_path, LINGERING_MODULE, []).start()
    pid_file = Path(local.job_dir) / "trainer.pid"
    trainer = None
    try:
        assert wait_for(pid_file.is_file, time.monotonic() + 120), local.supervisor.logs
        trainer = int(pid_file.read_text())
        chief = local.nodes[0].process
        assert chief is not None
        # The boot script exec'd the agent: this pid is the agent's, and the trainer is its child.
        assert b"trainstack-agent" in Path(f"/proc/{chief.pid}/cmdline").read_bytes()
        os.kill(chief.pid, signal.SIGKILL)
        result = local.wait(timeout=120)
        # The kernel ends it as its parent dies: a moment, not a schedule.
        assert wait_for(lambda: _gone(trainer), time.monotonic() + 30), f"trainer {trainer} outlived its agent"
        assert result.node_status["chief"] is not None
        assert result.job_status is not None
        assert result.node_status["chief"]["state"] == JobState.FAILED, result.node_status
        assert "SIGKILL" in result.node_status["chief"]["reason"]
        assert result.job_status["state"] == JobState.FAILED, result.job_status
    finally:
        if trainer is not None and not _gone(trainer):
            os.kill(trainer, signal.SIGKILL)
        local.supervisor.kill_all()

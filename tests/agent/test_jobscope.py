"""A job's scope ends whatever its code started, in a real cgroup v2 (and, without one, by the
job's mark): a grandchild that made a session of its own is ended with the job, and the cgroups
of an agent that is gone are ended and removed by the next one, another live agent's left alone."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from trainstack_agent.jobscope import CGROUP_PARENT, SCOPE_ENV, JobScope, cgroup2_root, end_abandoned_scopes

# A child that starts a grandchild in a session of its own (setsid), records its pid, and exits.
LEAVER = """
import subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
open(sys.argv[1], "w").write(str(grandchild.pid))
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def leave_a_grandchild(tmp_path: Path, scope: JobScope) -> int:
    record = tmp_path / "grandchild.pid"
    child = subprocess.Popen([sys.executable, "-c", LEAVER, str(record)], env={**os.environ, **scope.env})
    scope.adopt(child.pid)
    child.wait(timeout=60)
    pid = int(record.read_text())
    assert alive(pid)
    return pid


def require_cgroup2() -> Path:
    # Explicit, not skipped: the suite runs as root on a host with cgroup v2, here and in CI.
    root = cgroup2_root()
    assert os.geteuid() == 0, "run the test suite as root"
    assert root is not None, "run the test suite on a host with cgroup v2"
    return root


def test_a_grandchild_in_a_session_of_its_own_ends_with_the_jobs_cgroup(tmp_path: Path) -> None:
    require_cgroup2()
    lines: list[str] = []
    scope = JobScope.create("job-test", None, lines.append)
    assert scope.cgroup is not None
    cgroup = scope.cgroup
    pid = leave_a_grandchild(tmp_path, scope)
    scope.end()
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(pid)
    assert not cgroup.exists()


def test_without_a_cgroup_the_jobs_mark_finds_what_it_left(tmp_path: Path) -> None:
    lines: list[str] = []
    scope = JobScope("0123456789abcdef", None, lines.append, None)
    pid = leave_a_grandchild(tmp_path, scope)
    assert f"{SCOPE_ENV}=0123456789abcdef".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    scope.end()
    assert not alive(pid)
    assert lines == ["ended 1 process(es) the job's code left running outside its cgroup"]


def test_the_cgroups_of_an_agent_that_is_gone_are_ended_and_another_agents_kept(tmp_path: Path) -> None:
    # A hierarchy of the test's own: an agent that starts meanwhile (a test running beside this
    # one) sweeps the machine's, and would remove the abandoned cgroup before its process is in.
    root = require_cgroup2() / f"trainstack-test-{os.getpid()}"
    gone = subprocess.Popen(["true"])
    gone.wait()
    parent = root / CGROUP_PARENT
    abandoned, live = parent / f"job-{gone.pid}-00000000000000aa", parent / f"job-{os.getpid()}-00000000000000bb"
    for cgroup in (abandoned, live):
        cgroup.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (abandoned / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    try:
        end_abandoned_scopes(lambda line: None, root)
        sleeper.wait(timeout=5)
        assert not abandoned.exists()
        assert live.exists()
    finally:
        sleeper.kill()
        live.rmdir()
        for directory in (parent, root):  # empty unless the sweep failed, which the test reports
            with contextlib.suppress(OSError):
                directory.rmdir()

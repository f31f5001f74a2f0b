"""The warm interpreter of a standing node: the built-in trainer's next job runs in a Python
that loaded its imports before the job was known, exactly as `python -m` would run it; any
other job, or one whose environment differs, starts a new interpreter."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest

from trainstack_agent.job import JobCommand
from trainstack_agent.processes import JobLauncher, Log, Processes
from trainstack_agent.warm import WarmStarts, warm_environment
from trainstack_agent.zygote import ForkedChild
from trainstack_contract import BUILTIN_MODULE, ONEDNN_SWITCH

# Stands in for the built-in trainer: records where and how it ran, then exits with the code
# its arguments name.
PROBE = """\
import json, os, sys
record = {
    "pid": os.getpid(),
    "preloaded": "decimal" in sys.modules,
    "argv": sys.argv[1:],
    "argv0": sys.argv[0],
    "tf_config": os.environ.get("TF_CONFIG"),
    "cwd": os.getcwd(),
    "path0": sys.path[0],
    "name": __name__,
}
with open(sys.argv[sys.argv.index("--out") + 1], "w") as out:
    json.dump(record, out)
if "--raise" in sys.argv:
    raise RuntimeError("the job's code failed")
sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
"""


@pytest.fixture
def code(tmp_path: Path) -> Path:
    package = tmp_path / "code" / "trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(PROBE)
    return package.parent


def command(code: Path, workdir: Path, out: Path, tf_config: str, *args: str, **env: str) -> JobCommand:
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code), "TF_CONFIG": tf_config}
    environment.update(env)
    argv = (sys.executable, "-m", BUILTIN_MODULE, "--job-dir", str(workdir / "job"), "--out", str(out), *args)
    return JobCommand(argv, environment, workdir)


def wait(child: object) -> int:
    code = child.poll()  # type: ignore[attr-defined]
    while code is None:
        import time

        time.sleep(0.05)
        code = child.poll()  # type: ignore[attr-defined]
    return int(code)


def pid_of(warm: object) -> int:
    """The process id of a waiting warm interpreter, once the zygote has forked it."""
    child = warm.child.child  # type: ignore[attr-defined]
    if isinstance(child, ForkedChild):
        assert child.born(60)
    return int(child.pid)


@pytest.fixture
def starts() -> WarmStarts:
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    warm = WarmStarts(JobLauncher(processes), lambda line: None, preload=("decimal",))
    yield warm
    warm.stop_all()


def test_the_next_builtin_job_runs_in_the_interpreter_started_before_it(
    code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    first = command(code, tmp_path, tmp_path / "first.json", '{"task": 1}', "--exit", "0")
    starts.prepare(first, allowed=True)
    waiting = starts._warm
    assert waiting is not None
    second = command(code, tmp_path, tmp_path / "second.json", '{"task": 2}', "--epochs", "3", "--exit", "3")
    child = starts.start(second)
    assert wait(child) == 3
    record = json.loads((tmp_path / "second.json").read_text())
    assert record["pid"] == pid_of(waiting)
    assert record["preloaded"] is True
    # As `python -m trainer.task --job-dir DIR ARGS` runs it.
    out = str(tmp_path / "second.json")
    assert record["argv"] == ["--job-dir", str(tmp_path / "job"), "--out", out, "--epochs", "3", "--exit", "3"]
    assert record["argv0"].endswith("trainer/task.py")
    assert record["name"] == "__main__"
    assert record["tf_config"] == '{"task": 2}'
    assert record["cwd"] == str(tmp_path) == record["path0"]
    assert starts.handed == 1


def test_an_exception_in_the_job_exits_1_as_python_does(code: Path, tmp_path: Path, starts: WarmStarts) -> None:
    starts.prepare(command(code, tmp_path, tmp_path / "a.json", "{}"), allowed=True)
    child = starts.start(command(code, tmp_path, tmp_path / "b.json", "{}", "--raise", "--exit", "0"))
    assert wait(child) == 1
    assert starts.handed == 1


def test_a_job_with_other_environment_starts_a_new_interpreter(code: Path, tmp_path: Path, starts: WarmStarts) -> None:
    starts.prepare(command(code, tmp_path, tmp_path / "a.json", "{}"), allowed=True)
    waiting = starts._warm
    assert waiting is not None
    waiting_pid = pid_of(waiting)
    other = command(code, tmp_path, tmp_path / "b.json", "{}", "--exit", "0", TF_USE_LEGACY_KERAS="1")
    child = starts.start(other)
    assert wait(child) == 0
    record = json.loads((tmp_path / "b.json").read_text())
    assert record["pid"] != waiting_pid
    assert record["preloaded"] is False
    assert starts.handed == 0
    # The interpreter that waited in vain is ended, not left behind.
    assert waiting.child.poll() is not None


def test_a_team_module_or_a_job_not_allowed_gets_no_warm_interpreter(
    code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    team = command(code, tmp_path, tmp_path / "a.json", "{}")
    team = JobCommand((sys.executable, "-m", "team.task", *team.argv[3:]), team.env, team.cwd)
    starts.prepare(team, allowed=True)
    assert starts._warm is None
    starts.prepare(command(code, tmp_path, tmp_path / "a.json", "{}"), allowed=False)
    assert starts._warm is None


def test_the_warm_environment_has_the_trainers_onednn_default_unless_set() -> None:
    assert warm_environment({"TF_CONFIG": "{}", "A": "1"}) == {"A": "1", ONEDNN_SWITCH: "1"}
    assert warm_environment({ONEDNN_SWITCH: "0"}) == {ONEDNN_SWITCH: "0"}


def test_processes_stopped_without_closing_still_start_the_next_job(tmp_path: Path) -> None:
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    processes.stop_all(grace=1, close=False)
    child = processes.start([sys.executable, "-c", "pass"])
    assert wait(child) == 0
    processes.stop_all(grace=1)
    with pytest.raises(RuntimeError):
        processes.start([sys.executable, "-c", "pass"])


def test_after_a_builtin_job_the_queue_readies_a_warm_interpreter_for_the_next(
    code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    first = command(code, tmp_path, tmp_path / "a.json", "{}", "--exit", "0")
    assert wait(starts.start(first)) == 0
    starts.prepare_next(allowed=True)
    assert starts._warm is not None
    child = starts.start(command(code, tmp_path, tmp_path / "b.json", "{}", "--exit", "0"))
    assert wait(child) == 0
    assert json.loads((tmp_path / "b.json").read_text())["preloaded"] is True


def test_a_job_started_on_a_standing_node_readies_the_next_ones_interpreter_while_it_runs(
    code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    job = starts.for_job(allowed=True)
    first = job.start(command(code, tmp_path, tmp_path / "a.json", "{}", "--exit", "0"))
    # Ready for the next job before this one has ended: a tuning study's next trial finds
    # the imports done.
    waiting = starts._warm
    assert waiting is not None
    assert waiting.child.poll() is None
    assert wait(first) == 0
    # The job's end stops its processes, not the interpreter waiting for the next job.
    job.stop_all(close=False)
    assert waiting.child.poll() is None
    child = starts.for_job(allowed=True).start(command(code, tmp_path, tmp_path / "b.json", "{}", "--exit", "0"))
    assert wait(child) == 0
    assert json.loads((tmp_path / "b.json").read_text())["pid"] == pid_of(waiting)
    # Ending the boot (close) ends the one the second job readied in turn.
    again = starts._warm
    assert again is not None
    starts.stop_all(close=True)
    assert again.child.poll() is not None


def test_a_job_not_allowed_a_warm_start_readies_nothing(code: Path, tmp_path: Path, starts: WarmStarts) -> None:
    child = starts.for_job(allowed=False).start(command(code, tmp_path, tmp_path / "a.json", "{}", "--exit", "0"))
    assert wait(child) == 0
    assert starts._warm is None


def test_the_imports_run_at_the_lowest_priority_and_the_job_at_its_own(tmp_path: Path) -> None:
    # The preload records its thread's nice value; the job records its own (the main thread's).
    # The module sits in the interpreter's working directory: on its path before the job's code.
    preload_dir = tmp_path
    (preload_dir / "probe_preload.py").write_text(
        "import json, os, threading\n"
        "NICE = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())\n"
        "GROUP = open('/proc/self/autogroup').read().split()[-1] if os.path.exists('/proc/self/autogroup') else None\n"
        "json.dump([NICE, GROUP], open('preloaded.tmp', 'w'))\n"
        "os.rename('preloaded.tmp', 'preloaded.json')\n"
    )
    package = tmp_path / "code" / "trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(
        "import json, os, sys, threading, probe_preload\n"
        "group = open('/proc/self/autogroup').read().split()[-1] if os.path.exists('/proc/self/autogroup') else None\n"
        "json.dump({'preload': probe_preload.NICE, 'job': os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),"
        " 'preload_group': probe_preload.GROUP, 'job_group': group}, open(sys.argv[-1], 'w'))\n"
    )
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    warm = WarmStarts(JobLauncher(processes), lambda line: None, preload=("probe_preload",))
    try:
        out = tmp_path / "nice.json"
        environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(package.parent)}
        argv = (sys.executable, "-m", BUILTIN_MODULE, "--out", str(out))
        warm.prepare(JobCommand(argv, environment, tmp_path), allowed=True)
        # The job comes once the imports are done (as it does when a job runs meanwhile).
        deadline = time.monotonic() + 60
        while not (tmp_path / "preloaded.json").exists():
            assert time.monotonic() < deadline, "the preload did not run"
            time.sleep(0.05)
        child = warm.start(JobCommand(argv, environment, tmp_path))
        assert wait(child) == 0
        record = json.loads(out.read_text())
        # The job runs at the agent's own priority (the test's: a niced test run starts above 0).
        assert (record["preload"], record["job"]) == (19, os.getpriority(os.PRIO_PROCESS, 0))
        # Where Linux groups processes by session (autogroup), the group's priority too.
        if Path("/proc/self/autogroup").exists():
            assert (record["preload_group"], record["job_group"]) == ("19", "0")
    finally:
        warm.stop_all()

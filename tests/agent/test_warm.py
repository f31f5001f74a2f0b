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
from polling import exit_status, wait_until

from trainstack_agent.job import JobCommand
from trainstack_agent.processes import JobLauncher, Log, Processes
from trainstack_agent.warm import WarmStarts, warm_environment
from trainstack_agent.zygote import ForkedChild
from trainstack_contract import BUILTIN_MODULE, ONEDNN_SWITCH, TRIAL_ID_ENV
from trainstack_contract.tf_config import cluster_key

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
    assert exit_status(child) == 3
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
    assert exit_status(child) == 1
    assert starts.handed == 1


def test_a_job_with_other_environment_starts_a_new_interpreter(code: Path, tmp_path: Path, starts: WarmStarts) -> None:
    starts.prepare(command(code, tmp_path, tmp_path / "a.json", "{}"), allowed=True)
    waiting = starts._warm
    assert waiting is not None
    waiting_pid = pid_of(waiting)
    other = command(code, tmp_path, tmp_path / "b.json", "{}", "--exit", "0", TF_USE_LEGACY_KERAS="1")
    child = starts.start(other)
    assert exit_status(child) == 0
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
    assert exit_status(child) == 0
    processes.stop_all(grace=1)
    with pytest.raises(RuntimeError):
        processes.start([sys.executable, "-c", "pass"])


def test_after_a_builtin_job_the_queue_readies_a_warm_interpreter_for_the_next(
    code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    first = command(code, tmp_path, tmp_path / "a.json", "{}", "--exit", "0")
    assert exit_status(starts.start(first)) == 0
    starts.prepare_next(allowed=True)
    assert starts._warm is not None
    child = starts.start(command(code, tmp_path, tmp_path / "b.json", "{}", "--exit", "0"))
    assert exit_status(child) == 0
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
    assert exit_status(first) == 0
    # The job's end stops its processes, not the interpreter waiting for the next job.
    job.stop_all(close=False)
    assert waiting.child.poll() is None
    child = starts.for_job(allowed=True).start(command(code, tmp_path, tmp_path / "b.json", "{}", "--exit", "0"))
    assert exit_status(child) == 0
    assert json.loads((tmp_path / "b.json").read_text())["pid"] == pid_of(waiting)
    # Ending the boot (close) ends the one the second job readied in turn.
    again = starts._warm
    assert again is not None
    starts.stop_all(close=True)
    assert again.child.poll() is not None


def test_a_job_not_allowed_a_warm_start_readies_nothing(code: Path, tmp_path: Path, starts: WarmStarts) -> None:
    child = starts.for_job(allowed=False).start(command(code, tmp_path, tmp_path / "a.json", "{}", "--exit", "0"))
    assert exit_status(child) == 0
    assert starts._warm is None


AUTOGROUPS = Path("/proc/self/autogroup").exists()


def group_priority(pid: int) -> str:
    """The nice value of a process's autogroup ("/autogroup-123 nice 19")."""
    return Path(f"/proc/{pid}/autogroup").read_text().split()[-1]


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
        if AUTOGROUPS:
            # Idle once the imports are done, the interpreter's group is back at the usual
            # priority before the job comes: the job's start does not wait for that change.
            pid = pid_of(warm._warm)
            wait_until(lambda: group_priority(pid) == "0", "the interpreter's group back at nice 0", 30)
        child = warm.start(JobCommand(argv, environment, tmp_path))
        assert exit_status(child) == 0
        record = json.loads(out.read_text())
        # The job runs at the agent's own priority (the test's: a niced test run starts above 0).
        assert (record["preload"], record["job"]) == (19, os.getpriority(os.PRIO_PROCESS, 0))
        # Where Linux groups processes by session (autogroup), the group's priority too.
        if AUTOGROUPS:
            assert (record["preload_group"], record["job_group"]) == ("19", "0")
    finally:
        warm.stop_all()


# --- A rehearsal: the next job's strategy and model made before it comes (trainer.rehearsal) ---

# Stands in for trainer.rehearsal: records its arguments, environment and process, marks the
# package it was imported with, and fails or hangs when its arguments say so: hangs sleeping, or
# in a C call that keeps Python's lock, as TensorFlow's strategy does while it waits for the
# cluster's other nodes.
REHEARSAL_PROBE = """\
import ctypes, json, os, sys, time
def rehearse(argv, report):
    if "--fail-rehearsal" in argv:
        raise RuntimeError("the rehearsal failed")
    if "--hang-rehearsal" in argv:
        time.sleep(600)
    if "--hang-rehearsal-holding-the-gil" in argv:
        ctypes.PyDLL(None).sleep(600)
    report("strategy made")
    if "--slow-model" in argv:
        time.sleep(3)
    if "--hang-after-the-strategy" in argv:
        time.sleep(600)
    sys.modules["trainer"].rehearsed_here = True
    out = argv[argv.index("--out") + 1] + ".rehearsal"
    group = open("/proc/self/autogroup").read().split()[-1] if os.path.exists("/proc/self/autogroup") else None
    record = {"pid": os.getpid(), "argv": list(argv), "tf_config": os.environ.get("TF_CONFIG"), "group": group}
    with open(out, "w") as handle:
        json.dump(record, handle)
    return "the probe rehearsed"
"""
CLUSTER = '{"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]}, "task": {"type": "chief", "index": 0}}'
TRIAL = CLUSTER[:-2] + ', "trial": "2"}}'
OTHER_CLUSTER = CLUSTER.replace("localhost:2", "localhost:3")
ONE_NODE = '{"cluster": {"chief": ["localhost:9"]}, "task": {"type": "chief", "index": 0, "trial": "3"}}'
DIGEST = "a" * 64


@pytest.fixture
def rehearsing_code(code: Path) -> Path:
    (code / "trainer" / "rehearsal.py").write_text(REHEARSAL_PROBE)
    # The job records whether it was imported afresh (the rehearsal's package is dropped) and
    # what the rehearsal left it.
    (code / "trainer" / "task.py").write_text(
        PROBE.replace(
            '"name": __name__,',
            '"name": __name__, "fresh_package": not getattr(sys.modules["trainer"], "rehearsed_here", False),',
        )
    )
    return code


def rehearsed_command(code: Path, workdir: Path, out: Path, tf_config: str, *args: str, **env: str) -> JobCommand:
    plain = command(code, workdir, out, tf_config, *args, **env)
    return JobCommand(plain.argv, plain.env, plain.cwd, code_digest=DIGEST)


def rehearsed_after(starts: WarmStarts, code: Path, tmp_path: Path, tf_config: str, *args: str, **env: str) -> object:
    """Runs a first job, then readies and rehearses the next like it; the interpreter that waits."""
    first = rehearsed_command(code, tmp_path, tmp_path / "first.json", tf_config, *args, "--exit", "0", **env)
    assert exit_status(starts.start(first)) == 0
    starts.prepare_next(allowed=True)
    waiting = starts._warm
    assert waiting is not None
    pid_of(waiting)
    return waiting


def test_after_a_builtin_job_the_next_one_like_it_runs_where_it_was_rehearsed(
    rehearsing_code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    waiting = rehearsed_after(starts, rehearsing_code, tmp_path, CLUSTER)
    assert waiting.rehearsal is not None  # type: ignore[attr-defined]
    # A tuning trial's number names no process: the same cluster.
    second = rehearsed_command(rehearsing_code, tmp_path, tmp_path / "second.json", TRIAL, "--lr", "0.1", "--exit", "0")
    assert exit_status(starts.start(second)) == 0
    rehearsal = json.loads((tmp_path / "first.json.rehearsal").read_text())
    record = json.loads((tmp_path / "second.json").read_text())
    # The rehearsal ran the ended job's arguments, with its environment, in the process the next
    # job then ran in; the job imported its own code afresh, with its own TF_CONFIG.
    assert rehearsal["pid"] == record["pid"] == pid_of(waiting)
    assert rehearsal["argv"] == [
        "--job-dir",
        str(tmp_path / "job"),
        "--out",
        str(tmp_path / "first.json"),
        "--exit",
        "0",
    ]
    assert rehearsal["tf_config"] == CLUSTER
    # Once this node's job has ended the rehearsal is on the next one's path: the usual priority.
    if AUTOGROUPS:
        assert rehearsal["group"] == "0"
    assert record["fresh_package"] is True
    assert record["tf_config"] == TRIAL
    assert record["argv"][-4:] == ["--lr", "0.1", "--exit", "0"]
    assert (starts.handed, starts.rehearsed) == (1, 1)


@pytest.mark.parametrize(
    ("tf_config", "digest"), [(OTHER_CLUSTER, DIGEST), (CLUSTER, "b" * 64), (CLUSTER, None)], ids=str
)
def test_a_job_of_another_cluster_or_other_code_starts_a_new_interpreter(
    tf_config: str, digest: str | None, rehearsing_code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    waiting = rehearsed_after(starts, rehearsing_code, tmp_path, CLUSTER)
    plain = command(rehearsing_code, tmp_path, tmp_path / "second.json", tf_config, "--exit", "0")
    assert exit_status(starts.start(JobCommand(plain.argv, plain.env, plain.cwd, code_digest=digest))) == 0
    assert json.loads((tmp_path / "second.json").read_text())["pid"] != pid_of(waiting)
    # Its strategy holds the cluster's port: it is ended before the new job's code starts.
    assert waiting.child.poll() is not None  # type: ignore[attr-defined]
    assert starts.handed == 0


def test_a_one_node_job_leaves_the_rehearsed_interpreter_to_the_clusters_next_job(
    rehearsing_code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    waiting = rehearsed_after(starts, rehearsing_code, tmp_path, CLUSTER)
    lone = rehearsed_command(rehearsing_code, tmp_path, tmp_path / "lone.json", ONE_NODE, "--exit", "0")
    assert exit_status(starts.for_job(allowed=True).start(lone)) == 0
    assert json.loads((tmp_path / "lone.json").read_text())["pid"] != pid_of(waiting)
    assert starts._warm is waiting
    cluster_job = rehearsed_command(rehearsing_code, tmp_path, tmp_path / "next.json", CLUSTER, "--exit", "0")
    assert exit_status(starts.start(cluster_job)) == 0
    assert json.loads((tmp_path / "next.json").read_text())["pid"] == pid_of(waiting)


def test_on_a_gpu_node_a_one_node_job_ends_the_rehearsed_interpreter_which_holds_the_gpus_memory(
    rehearsing_code: Path, tmp_path: Path
) -> None:
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    starts = WarmStarts(JobLauncher(processes), lambda line: None, preload=("decimal",), keep_apart=False)
    try:
        waiting = rehearsed_after(starts, rehearsing_code, tmp_path, CLUSTER)
        lone = rehearsed_command(rehearsing_code, tmp_path, tmp_path / "lone.json", ONE_NODE, "--exit", "0")
        assert exit_status(starts.start(lone)) == 0
        assert waiting.child.poll() is not None  # type: ignore[attr-defined]
    finally:
        starts.stop_all()


@pytest.mark.parametrize(
    ("trouble", "said"),
    [
        ("--fail-rehearsal", "its rehearsal failed: RuntimeError: the rehearsal failed"),
        ("--hang-rehearsal", "its rehearsal made no strategy in 1 s: a node did not take part"),
        ("--hang-rehearsal-holding-the-gil", "its rehearsal made no strategy in 1 s: a node did not take part"),
        ("--hang-after-the-strategy", "its rehearsal did not end in 2 s after its strategy was made"),
    ],
)
def test_a_rehearsal_that_fails_or_does_not_end_leaves_the_job_to_a_new_process(
    trouble: str, said: str, rehearsing_code: Path, tmp_path: Path
) -> None:
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    lines: list[str] = []
    starts = WarmStarts(
        JobLauncher(processes), lines.append, preload=("decimal",), rehearsal_wait=1.0, rehearsal_rest=2.0
    )
    try:
        waiting = rehearsed_after(starts, rehearsing_code, tmp_path, CLUSTER, trouble)
        second = rehearsed_command(rehearsing_code, tmp_path, tmp_path / "second.json", CLUSTER, "--exit", "4")
        child = starts.start(second)
        # The rehearsed interpreter (which holds the cluster's port) is gone before the job starts.
        assert waiting.child.poll() is not None  # type: ignore[attr-defined]
        assert exit_status(child) == 4
        record = json.loads((tmp_path / "second.json").read_text())
        assert record["pid"] != pid_of(waiting)
        assert record["preloaded"] is False
        assert record["tf_config"] == CLUSTER
        assert f"the warm interpreter did not take the job ({said}); starting a new one" in lines
        assert starts.handed == 0
    finally:
        starts.stop_all()


def test_a_rehearsal_whose_strategy_is_made_is_waited_for_longer_than_one_whose_nodes_have_not_come(
    rehearsing_code: Path, tmp_path: Path
) -> None:
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    starts = WarmStarts(
        JobLauncher(processes), lambda line: None, preload=("decimal",), rehearsal_wait=1.0, rehearsal_rest=60.0
    )
    try:
        # Its model takes 3 s, past the wait for a strategy: the job still runs where it was rehearsed.
        waiting = rehearsed_after(starts, rehearsing_code, tmp_path, CLUSTER, "--slow-model")
        second = rehearsed_command(rehearsing_code, tmp_path, tmp_path / "second.json", CLUSTER, "--exit", "0")
        assert exit_status(starts.start(second)) == 0
        assert json.loads((tmp_path / "second.json").read_text())["pid"] == pid_of(waiting)
        assert (starts.handed, starts.rehearsed) == (1, 1)
    finally:
        starts.stop_all()


def test_a_trials_job_is_not_rehearsed_its_studys_next_trial_comes_at_once(
    rehearsing_code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    waiting = rehearsed_after(starts, rehearsing_code, tmp_path, TRIAL, **{TRIAL_ID_ENV: "2"})
    assert waiting.rehearsal is None  # type: ignore[attr-defined]


def test_a_rehearsal_takes_the_cluster_and_task_not_the_trials_number() -> None:
    assert cluster_key(CLUSTER) == cluster_key(TRIAL) != cluster_key(OTHER_CLUSTER)
    worker = CLUSTER.replace('"type": "chief"', '"type": "worker"')
    assert cluster_key(worker) != cluster_key(CLUSTER)
    # A lone task makes no server: as no cluster at all.
    assert cluster_key(ONE_NODE) == cluster_key(None) == cluster_key("") == ""

"""The zygote that forks a standing node's warm interpreters (trainstack_agent.zygote): one
import for every job, each job in a process of its own whose end and exit status the agent
sees as for any child, a stop that keeps its grace, and nothing left once the agent ends it."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from polling import exit_status

from trainstack_agent.job import JobCommand
from trainstack_agent.processes import JobLauncher, Log, Processes
from trainstack_agent.warm import RUNNER, WarmStarts, runner_arguments
from trainstack_agent.zygote import ForkedChild, Zygote
from trainstack_contract import BUILTIN_MODULE

# Stands in for the built-in trainer: records its process, then exits as its arguments say;
# with --on-term it ends on SIGTERM only after writing that it had its grace.
PROBE = """\
import json, os, signal, sys, time
import counted
out = sys.argv[sys.argv.index("--out") + 1]
record = {"pid": os.getpid(), "parent": os.getppid(), "group": os.getpgid(0), "imported": counted.MARK}
with open(out, "w") as handle:
    json.dump(record, handle)
if "--on-term" in sys.argv:
    def ending(signum, frame):
        time.sleep(1.0)  # a final backup's time: longer than the zygote takes to react
        with open(out + ".term", "w") as handle:
            handle.write("had its grace")
        sys.exit(0)
    signal.signal(signal.SIGTERM, ending)
    time.sleep(600)
sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
"""
# A module the zygote preloads: each import of it leaves one line in the file it names.
COUNTED = """\
import os, time
MARK = time.time()
with open(os.environ["IMPORTS_FILE"], "a") as handle:
    handle.write(str(os.getpid()) + "\\n")
"""


@pytest.fixture
def code(tmp_path: Path) -> Path:
    package = tmp_path / "code" / "trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(PROBE)
    (tmp_path / "code" / "counted.py").write_text(COUNTED)
    return package.parent


def command(code: Path, tmp_path: Path, out: str, *args: str) -> JobCommand:
    env = {
        "PATH": "/usr/bin:/bin",
        "IMPORTS_FILE": str(tmp_path / "imports.txt"),
        "PYTHONPATH": str(code),
    }
    argv = (sys.executable, "-m", BUILTIN_MODULE, "--out", str(tmp_path / out), *args)
    # From the code's directory: the zygote, which has no PYTHONPATH (a late variable), finds
    # the counted module there.
    return JobCommand(argv, env, code)


def forked_interpreter(zygote: Zygote) -> tuple[ForkedChild, int]:
    """An interpreter the zygote forked, and the write end of the pipe it reads its job from."""
    read, write = os.pipe()
    number = zygote.request(read)
    os.close(read)
    assert number is not None
    forked = ForkedChild(zygote, number)
    assert forked.born(300)
    return forked, write


@pytest.fixture
def starts() -> WarmStarts:
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    warm = WarmStarts(JobLauncher(processes), lambda line: None, preload=("counted",))
    yield warm
    warm.stop_all()


def test_every_job_runs_in_its_own_fork_of_one_zygote_which_imported_once(
    code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    records = []
    for number, exit_code in enumerate((0, 3, 0)):
        job = starts.for_job(allowed=True)
        child = job.start(command(code, tmp_path, f"{number}.json", "--exit", str(exit_code)))
        assert exit_status(child) == exit_code
        job.stop_all(close=False)
        records.append(json.loads((tmp_path / f"{number}.json").read_text()))
    zygote = starts.forks.zygote
    assert zygote is not None
    # The first job came before any interpreter was ready: it started afresh. The next two ran
    # in forks of the one zygote, each in a session of its own.
    assert [record["parent"] for record in records[1:]] == [zygote.child.pid] * 2
    assert all(record["group"] == record["pid"] for record in records[1:])
    assert len({record["pid"] for record in records}) == 3
    # One import in the zygote, one in the first job's own interpreter: none per fork.
    imports = (tmp_path / "imports.txt").read_text().split()
    assert imports.count(str(zygote.child.pid)) == 1
    assert len(imports) == 2
    assert records[1]["imported"] == records[2]["imported"]


def test_a_forked_job_stopped_with_the_boot_gets_its_grace_and_nothing_is_left(
    code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    starts.prepare(command(code, tmp_path, "ready.json", "--exit", "0"), allowed=True)
    child = starts.start(command(code, tmp_path, "job.json", "--on-term", "--exit", "0"))
    forked = child.child
    assert isinstance(forked, ForkedChild)
    deadline = time.monotonic() + 60
    while not (tmp_path / "job.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    zygote = starts.forks.zygote
    assert zygote is not None
    # The agent ends: SIGTERM reaches the zygote and the job at once.
    starts.stop_all(close=True)
    assert (tmp_path / "job.json.term").read_text() == "had its grace"
    assert forked.poll() == 0
    assert zygote.child.poll() is not None
    for pid in (forked.pid, zygote.child.pid):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_a_waiting_interpreter_ends_with_its_zygote(code: Path, tmp_path: Path) -> None:
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    template = command(code, tmp_path, "unused.json", "--exit", "0")
    zygote = Zygote.start(
        processes, sys.executable, RUNNER, ("counted",), runner_arguments(("counted",)), template.env, code, None
    )
    forked, write = forked_interpreter(zygote)
    # SIGKILL: the zygote cannot say anything; its child goes with it (PR_SET_PDEATHSIG).
    os.kill(zygote.child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{forked.pid}").exists() and "Z" not in Path(f"/proc/{forked.pid}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the forked interpreter outlived its zygote"
        time.sleep(0.02)
    os.close(write)
    processes.stop_all(grace=1)


@pytest.mark.slow
def test_two_forked_interpreters_train_as_one_multi_worker_cluster(tmp_path: Path) -> None:
    """The zygote imported TensorFlow and ran none of it: each fork makes its strategy, its
    servers and its collectives as a new process would."""
    trainer = tmp_path / "code" / "mwms_probe.py"
    trainer.parent.mkdir()
    trainer.write_text(
        "import json, os, sys\n"
        "import numpy as np, tensorflow as tf, tf_keras as keras\n"
        "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
        "with strategy.scope():\n"
        "    model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,))])\n"
        "    model.compile('sgd', 'mse')\n"
        "data = tf.data.Dataset.from_tensor_slices((np.ones((32, 3), 'float32'), np.ones((32, 2), 'float32')))\n"
        "history = model.fit(data.batch(8).repeat(), epochs=1, steps_per_epoch=3, verbose=0)\n"
        "with open(sys.argv[1], 'w') as out:\n"
        "    json.dump({'loss': history.history['loss'][-1], 'replicas': strategy.num_replicas_in_sync}, out)\n"
    )
    processes = Processes(Log(stream=io.StringIO(), journal=False))
    env = {"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"}
    preload = ("tensorflow", "tf_keras")
    zygote = Zygote.start(
        processes, sys.executable, RUNNER, preload, runner_arguments(preload), env, trainer.parent, None
    )
    ports = [free_port(), free_port()]
    children = []
    try:
        for index in range(2):
            forked, write = forked_interpreter(zygote)
            tf_config = {
                "cluster": {"worker": [f"localhost:{port}" for port in ports]},
                "task": {"type": "worker", "index": index},
            }
            job = {
                "module": "mwms_probe",
                "args": [str(tmp_path / f"worker-{index}.json")],
                "env": {**env, "TF_CONFIG": json.dumps(tf_config)},
                "path": [str(trainer.parent)],
            }
            os.write(write, json.dumps(job).encode())
            os.close(write)
            children.append(forked)
        assert [exit_status(child, 300) for child in children] == [0, 0]
    finally:
        for child in children:
            child.stop(1)
        zygote.close()
    results = [json.loads((tmp_path / f"worker-{index}.json").read_text()) for index in range(2)]
    assert results[0] == results[1]
    assert results[0]["replicas"] == 2


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return int(probe.getsockname()[1])


def test_a_job_after_its_zygote_was_killed_still_runs_and_the_next_gets_a_new_zygote(
    code: Path, tmp_path: Path, starts: WarmStarts
) -> None:
    job = starts.for_job(allowed=True)
    assert exit_status(job.start(command(code, tmp_path, "first.json", "--exit", "0"))) == 0
    job.stop_all(close=False)
    killed = starts.forks.zygote
    assert killed is not None
    # Out of memory, say: the zygote and the interpreter it forked for the next job go.
    os.kill(killed.child.pid, signal.SIGKILL)
    assert exit_status(killed.child) != 0
    job = starts.for_job(allowed=True)
    assert exit_status(job.start(command(code, tmp_path, "second.json", "--exit", "0"))) == 0
    job.stop_all(close=False)
    assert starts.forks.zygote is not None
    assert starts.forks.zygote is not killed
    third = starts.start(command(code, tmp_path, "third.json", "--exit", "0"))
    assert exit_status(third) == 0
    assert json.loads((tmp_path / "third.json").read_text())["parent"] == starts.forks.zygote.child.pid

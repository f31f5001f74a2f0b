"""The experiment loop on a standing local cluster, end to end through the commands a user types:
`trainstack local --standing` keeps a three-node MultiWorkerMirroredStrategy cluster up, jobs
submitted back to back run one after the other in the same node processes, `cancel` ends the
running job and the next starts, `jobs` lists them all, and the idle nodes stop themselves
after `idle_minutes` (time-scaled, as the agent's other waits are) and the run ends."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from polling import wait_until

from stack_helpers import write_stack
from trainstack.base.project import PROJECT_ROOT as REPOSITORY_ROOT

# Every bounded wait of the test: a cluster that takes longer has failed.
WAIT_SECONDS = 600.0
SHORT = ["--epochs", "1", "--steps-per-epoch", "2", "--image-size", "32", "--batch-size-per-replica", "8"]
# Long enough to be running when it is cancelled.
LONG = ["--epochs", "500", "--steps-per-epoch", "50", "--image-size", "32", "--batch-size-per-replica", "8"]


def stack_config(shipped_stack: str = "multiworker", idle_minutes: int = 1) -> dict[str, Any]:
    """A shipped stack whose job trains briefly, with a short idle time (time-scaled here)."""
    shipped = yaml.safe_load((REPOSITORY_ROOT / "stacks" / f"Pulumi.{shipped_stack}.yaml").read_text())["config"]
    shipped["trainstack:cluster"]["idle_minutes"] = idle_minutes
    shipped["trainstack:job"].update(epochs=1, steps_per_epoch=2, image_size=32, batch_size_per_replica=8)
    return dict(shipped)


TRAINSTACK = [sys.executable, "-m", "trainstack"]


def environment() -> dict[str, str]:
    # One minute of idle time is 15 s here; every other wait of the agent shrinks alike.
    return dict(os.environ, PYTHONPATH=str(REPOSITORY_ROOT), TRAINSTACK_AGENT_TIME_SCALE="0.25")


def trainstack(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A trainstack command, bounded by ``timeout`` seconds (a hang guard, not a measure)."""
    return subprocess.run(
        [*TRAINSTACK, *args],
        cwd=REPOSITORY_ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_standing(stack_file: Path, workdir: Path) -> subprocess.Popen[str]:
    """`trainstack local --standing` in the background, its output and errors on one pipe."""
    return subprocess.Popen(
        [*TRAINSTACK, "local", "--standing", "--stack-file", str(stack_file), "--workdir", str(workdir)],
        cwd=REPOSITORY_ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@contextlib.contextmanager
def standing_cluster(stack_file: Path, workdir: Path) -> Iterator[subprocess.Popen[str]]:
    """A standing run for the ``with`` block; killed at its end if it has not ended by itself."""
    standing = start_standing(stack_file, workdir)
    try:
        yield standing
    finally:
        if standing.poll() is None:
            standing.kill()
            standing.wait()


def until(predicate: Any, what: str, process: subprocess.Popen[str] | None = None) -> Any:
    """``predicate``'s first true value, while the standing run ``process`` goes on."""

    def ended() -> str | None:
        if process is None or process.poll() is None:
            return None
        return f"the standing run ended: {process.stdout.read() if process.stdout else ''}"

    return wait_until(predicate, what, WAIT_SECONDS, interval=0.2, gone_wrong=ended)


def job_state(job_dir: Path) -> str | None:
    try:
        return str(json.loads((job_dir / "status" / "job.json").read_text())["state"])
    except (OSError, ValueError, KeyError):
        return None


def incarnations(job_dir: Path) -> dict[str, str]:
    """Each node's incarnation (one boot of its agent) in the job's status objects."""
    found = {}
    for path in sorted((job_dir / "status").glob("*.json")):
        if path.stem not in ("job", "settings", "taken_by"):
            found[path.stem] = json.loads(path.read_text())["incarnation"]
    return found


@pytest.mark.slow
def test_jobs_run_one_after_the_other_on_a_standing_cluster_cancel_ends_one_and_idle_nodes_stop(
    tmp_path: Path,
) -> None:
    config = stack_config()
    # Equal jobs train to equal figures (threads otherwise sum in any order).
    config["trainstack:job"]["env"] = {"TF_DETERMINISTIC_OPS": "1"}
    stack_file = write_stack(tmp_path, config, stack="loop")
    workdir = tmp_path / "work"
    with standing_cluster(stack_file, workdir) as standing:
        target = ["--stack-file", str(stack_file), "--local", "--workdir", str(workdir)]
        # Queued while the stack's own job (job 0) still runs: they follow it, in submit order.
        for name, options in (("first", SHORT), ("long", LONG), ("last", SHORT)):
            submitted = trainstack("submit", *target, "--name", name, *options)
            assert submitted.returncode == 0, submitted.stderr
        jobs_dir = until(lambda: next(iter(workdir.glob("bucket/*/jobs")), None), "the bucket's jobs/", standing)
        until(lambda: job_state(jobs_dir / "q2_long") == "RUNNING", "job 2 running", standing)
        cancelled = trainstack("cancel", *target, "2")
        assert cancelled.returncode == 0, cancelled.stderr
        # The nodes end job 2, run job 3, then idle out: the run ends by itself.
        output, _ = standing.communicate(timeout=WAIT_SECONDS)
    assert standing.returncode == 0, output
    # The run ends with every job it ran, as `jobs` lists them.
    ending = output[output.index("standing: every node idled out") :]
    assert [line.split()[:3] for line in ending.splitlines()[2:]] == [
        ["0", "flowers_mwms", "SUCCEEDED"],
        ["1", "first", "SUCCEEDED"],
        ["2", "long", "CANCELLED"],
        ["3", "last", "SUCCEEDED"],
    ], ending
    listed = trainstack("jobs", "--stack-file", str(stack_file), "--local", "--workdir", str(workdir), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)["jobs"]}
    assert {job_id: rows[job_id]["state"] for job_id in (0, 1, 2, 3)} == {
        0: "SUCCEEDED",
        1: "SUCCEEDED",
        2: "CANCELLED",
        3: "SUCCEEDED",
    }, listed.stdout
    for job_id in (0, 1, 3):
        assert rows[job_id]["duration_seconds"] > 0, rows[job_id]
    # One boot of each node's agent ran every job: the cluster's processes were never restarted.
    job_dirs = [jobs_dir / "flowers_mwms", jobs_dir / "q1_first", jobs_dir / "q2_long", jobs_dir / "q3_last"]
    seen = [incarnations(job_dir) for job_dir in job_dirs]
    assert sorted(seen[0]) == ["chief", "worker-0", "worker-1"]
    # Job 2 was cancelled once the chief ran it: a node that had not taken it yet skips it and
    # writes no status there (a slow worker on a loaded machine did, in CI).
    assert all(seen[index] == seen[0] for index in (1, 3)), seen
    assert seen[2].items() <= seen[0].items(), seen
    # Job 1 is job 0 again: every node's warm interpreter made its strategy and model once job 0
    # had ended (trainer.rehearsal), and it trained exactly as job 0's new processes did.
    for node in ("chief", "worker-0", "worker-1"):
        log = (workdir / "nodes" / node / "boot.log").read_text()
        assert "the job's code starts in the rehearsed warm interpreter" in log, log[-3000:]
    first, again = (json.loads((job_dirs[index] / "metrics.json").read_text()) for index in (0, 1))
    for figure in ("loss_history", "eval_loss", "eval_accuracy"):
        assert first[figure] == again[figure], (figure, first, again)
    # Idle for idle_minutes: every node applied on_finish (stop) once, and nothing runs.
    stops = (workdir / "self-stop.log").read_text().split("\n")
    assert sorted(line.split()[-1] for line in stops if line) == ["chief", "worker-0", "worker-1"], stops
    assert not (workdir / "standing.json").exists()


# A team's job that ends well only when another node runs the same job at the same time, and
# without TF_CONFIG: each writes its node's name in a shared directory, then waits for a second.
RENDEZVOUS_TASK = """\
import os
import pathlib
import sys
import tempfile
import time

if "TF_CONFIG" in os.environ:
    sys.exit("a one-node job was given TF_CONFIG")
where = pathlib.Path(os.environ["RENDEZVOUS_DIR"])
(where / os.environ["NODE_NAME"]).write_text("")
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    if len(list(where.iterdir())) >= 2:
        sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
"""


def status_time(job_dir: Path, node: str, state: str) -> str:
    """When ``node`` first recorded ``state`` in the job's directory."""
    history = json.loads((job_dir / "status" / f"{node}.json").read_text())["history"]
    return str(next(entry["time"] for entry in history if entry["state"] == state))


@pytest.mark.slow
def test_one_node_jobs_run_side_by_side_on_two_nodes_and_a_whole_cluster_job_follows_them(tmp_path: Path) -> None:
    package = tmp_path / "rendezvous"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(RENDEZVOUS_TASK)
    stack_file = write_stack(tmp_path, stack_config(), stack="side")
    workdir = tmp_path / "work"
    # Where the jobs' unprivileged user may write (the test's own directory is not its to enter).
    meeting = Path(tempfile.mkdtemp(prefix="trainstack-meeting-"))
    meeting.chmod(0o777)
    try:
        with standing_cluster(stack_file, workdir) as standing:
            target = ["--stack-file", str(stack_file), "--local", "--workdir", str(workdir)]
            for name in ("left", "right"):
                submitted = trainstack(
                    "submit",
                    *target,
                    "--one-node",
                    "--name",
                    name,
                    "--package",
                    str(package),
                    "--module",
                    "rendezvous.task",
                    "--env",
                    f"RENDEZVOUS_DIR={meeting}",
                )
                assert submitted.returncode == 0, submitted.stderr
                assert "queued to run on one node" in submitted.stdout
            after = trainstack("submit", *target, "--name", "after", *SHORT)
            assert after.returncode == 0, after.stderr
            output, _ = standing.communicate(timeout=WAIT_SECONDS)
        met = sorted(path.name for path in meeting.iterdir())
    finally:
        shutil.rmtree(meeting, ignore_errors=True)
    assert standing.returncode == 0, output
    jobs_dir = next(workdir.glob("bucket/*/jobs"))
    states = {name: job_state(jobs_dir / name) for name in ("q1_left", "q2_right", "q3_after")}
    assert states == {"q1_left": "SUCCEEDED", "q2_right": "SUCCEEDED", "q3_after": "SUCCEEDED"}, output
    # Each ran on the one node that took it, two nodes at once, with no TF_CONFIG.
    ran_on = {name: sorted(set(incarnations(jobs_dir / name))) for name in ("q1_left", "q2_right")}
    assert [len(nodes) for nodes in ran_on.values()] == [1, 1], ran_on
    assert ran_on["q1_left"] != ran_on["q2_right"]
    assert met == sorted(ran_on["q1_left"] + ran_on["q2_right"])
    # The whole-cluster job ran on every node, and only after both one-node jobs had ended.
    assert sorted(incarnations(jobs_dir / "q3_after")) == ["chief", "worker-0", "worker-1"]
    started = min(status_time(jobs_dir / "q3_after", node, "RUNNING") for node in ("chief", "worker-0", "worker-1"))
    for name, (node,) in ran_on.items():
        assert status_time(jobs_dir / name, node, "SUCCEEDED") <= started


def rehearsed_interpreter(workdir: Path, node: str) -> int:
    """The process id of ``node``'s warm interpreter (the one started with the agent's runner)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if b"trainstack-rehearsal" in command and f"/nodes/{node}/" in cwd + "/":
            return int(entry.name)
    raise AssertionError(f"no warm interpreter of {node}")


@pytest.mark.slow
def test_a_node_whose_rehearsed_interpreter_died_runs_the_next_job_with_the_others_all_the_same(
    tmp_path: Path,
) -> None:
    # Idle long enough (2 minutes, time-scaled) for the rehearsals on a loaded machine.
    config = stack_config(idle_minutes=8)
    config["trainstack:cluster"]["workers"]["count"] = 1
    stack_file = write_stack(tmp_path, config, stack="lost")
    workdir = tmp_path / "work"
    with standing_cluster(stack_file, workdir) as standing:
        target = ["--stack-file", str(stack_file), "--local", "--workdir", str(workdir)]

        def rehearsed(node: str) -> bool:
            log = workdir / "nodes" / node / "boot.log"
            return log.exists() and "trainstack warm interpreter: rehearsed:" in log.read_text()

        until(lambda: rehearsed("chief") and rehearsed("worker-0"), "both nodes' rehearsals", standing)
        # The worker's interpreter dies (out of memory, say) after it made the strategy with
        # the chief's: the chief's next job starts with that strategy, the worker's in a new
        # process.
        os.kill(rehearsed_interpreter(workdir, "worker-0"), 9)
        submitted = trainstack("submit", *target, "--name", "after", *SHORT)
        assert submitted.returncode == 0, submitted.stderr
        jobs_dir = until(lambda: next(iter(workdir.glob("bucket/*/jobs")), None), "the bucket's jobs/", standing)
        until(lambda: job_state(jobs_dir / "q1_after") in ("SUCCEEDED", "FAILED"), "job 1's end", standing)
        standing.kill()
        output = standing.communicate()[0]
    assert job_state(jobs_dir / "q1_after") == "SUCCEEDED", output[-4000:]

"""The experiment loop's latency on a standing local cluster, against a cold `trainstack local`
run measured in the same run.

Baseline: `trainstack local --stack S --fresh` (three nodes for `multiworker`), from the
command's start to the end of the job's first training step. Standing: `trainstack local
--stack S --standing` is brought up once and trains the stack's own job; then, each round,
`trainstack submit --stack S --local` queues the same job under a new name, and the figure is
from the submit command's start to the end of that job's first step. Both jobs train two
epochs of one step each of the built-in trainer, so "the end of the first step" is the end of
the first epoch, which the trainer records in progress.json (its "first_epoch_time"). (Until
2026-11-29 the jobs trained one epoch, whose end also waited for the job's last backup and
checkpoint: the figures then held those saves too. With saves by time, the first of two epochs
ends with none.) Each run, cold or submitted,
starts SETTLE seconds after the run before it ended (a user's next command, and the standing
nodes' warm interpreters loaded, so that no run shares the CPU with them), and the rounds
alternate so machine load drifts over both alike.

Beside each figure: the nodes' part, from the last node's RUNNING for the job (recorded before
it fetches and checks the job's code) to the first step, read off the nodes' status objects.
It is what a queue that took no time at all would leave: with a standing cluster, preparing the
job and the trainer's own start (bench/trainer_start.py breaks that down).

Then, on the same standing cluster, `trainstack tune --local` runs a study of the same job
(ROUNDS + 1 trials of the learning rate, one at a time, as maxParallelTrials 1 runs them): the
figure is from one trial's end (SUCCEEDED in its status/job.json, as the nodes record it) to
the next trial's first step (its progress.json), which takes in the tune command's poll, its
metric reading and suggestion, the submit, and the node's start of the next job.

With --one-node-trials, a second study follows whose trials run on one node each (`tune
--one-node`), measured the same way.

Targets (issue 37): submit to first step at most 0.3x the cold run's start to first step;
`submit` itself returns in under 2 s. (Issue 38): a trial's end to the next trial's first step
under 5 s. (Issue 56): the nodes' part at most 1.5 s, with the next job rehearsed by the nodes'
warm interpreters (trainer.rehearsal) once the one before it has ended.

    python bench/queue_latency.py [--stack multiworker] [--rounds 3] [--one-node-trials]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPOSITORY), str(REPOSITORY / "tests")]

from stack_helpers import LEARNING_RATE_STUDY  # noqa: E402 (the tests' study, after the path)

TRAINSTACK = [sys.executable, "-m", "trainstack"]
# The first epoch's end is the first step's: no save is due then (saves go by time).
ONE_STEP = ["--epochs", "2", "--steps-per-epoch", "1", "--image-size", "32"]
# After a job ends, before the next submit: a user's next command, and the nodes' warm
# interpreters loading TensorFlow (about 5 s on this project's 2-core machines).
SETTLE_SECONDS = 20.0
# Bounds on every wait: a run that takes longer has failed.
JOB_SECONDS = 600.0
POLL_SECONDS = 0.05


def environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPOSITORY))
    # Measured with the agent's waits as on Compute Engine, whatever the caller's shell says.
    env.pop("TRAINSTACK_AGENT_TIME_SCALE", None)
    return env


def wait_for_file(pattern: str, root: Path, deadline: float) -> Path:
    while time.monotonic() < deadline:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
        time.sleep(POLL_SECONDS)
    raise SystemExit(f"{pattern} did not appear under {root} in time")


def first_step(progress: Path, deadline: float) -> float:
    """When the job's first epoch (its first step) ended, as the trainer recorded it in
    progress.json (seconds since the epoch)."""
    while time.monotonic() < deadline:
        try:
            return float(json.loads(progress.read_text())["first_epoch_time"])
        except (OSError, ValueError, KeyError):
            time.sleep(POLL_SECONDS)
    raise SystemExit(f"{progress} was not written in time")


def job_ended(job_dir: Path, deadline: float) -> None:
    status = job_dir / "status" / "job.json"
    while time.monotonic() < deadline:
        try:
            state = json.loads(status.read_text())["state"]
        except (OSError, ValueError, KeyError):
            state = None
        if state == "SUCCEEDED":
            return
        if state in ("FAILED", "CANCELLED"):
            raise SystemExit(f"{job_dir} ended {state}")
        time.sleep(POLL_SECONDS)
    raise SystemExit(f"{job_dir} did not end in time")


def recorded(entry_time: str) -> float:
    """A status object's time (ISO 8601, UTC) as seconds since the epoch."""
    from datetime import datetime

    return datetime.fromisoformat(entry_time.replace("Z", "+00:00")).timestamp()


def nodes_began(job_dir: Path) -> float:
    """When the last node of the job recorded it RUNNING (its first RUNNING): from then on the
    job's time is the nodes' (preparing the code, checking its digest, the trainer's own start),
    which no queue can shorten."""
    firsts = []
    for node_status in (job_dir / "status").glob("*.json"):
        if node_status.name in ("job.json", "settings.json"):
            continue
        history = json.loads(node_status.read_text())["history"]
        firsts.append(min(recorded(entry["time"]) for entry in history if entry["state"] == "RUNNING"))
    if not firsts:
        raise SystemExit(f"{job_dir}: no node recorded the job RUNNING")
    return max(firsts)


def cold_run(stack: str, workdir: Path) -> tuple[float, float]:
    """Seconds from the command's start to the job's first step, and from the last node's start
    of the job to it."""
    started = time.time()
    subprocess.run(
        [*TRAINSTACK, "local", "--stack", stack, "--fresh", "--workdir", str(workdir), *ONE_STEP],
        cwd=REPOSITORY,
        env=environment(),
        check=True,
        capture_output=True,
    )
    progress = wait_for_file("bucket/*/jobs/*/progress.json", workdir, time.monotonic() + 5)
    step = first_step(progress, time.monotonic() + 5)
    return step - started, step - nodes_began(progress.parent)


def submit(stack: str, workdir: Path, name: str) -> tuple[float, float, float]:
    """Seconds the submit command took, from its start to the job's first step, and from the
    last node's start of the job to that step."""
    started = time.time()
    clock = time.monotonic()
    subprocess.run(
        [*TRAINSTACK, "submit", "--stack", stack, "--local", "--workdir", str(workdir), "--name", name, *ONE_STEP],
        cwd=REPOSITORY,
        env=environment(),
        check=True,
        capture_output=True,
    )
    returned = time.monotonic() - clock
    deadline = time.monotonic() + JOB_SECONDS
    job_dir = wait_for_file(f"bucket/*/jobs/q*_{name}", workdir, deadline)
    step = first_step(job_dir / "progress.json", deadline)
    job_ended(job_dir, deadline)
    return returned, step - started, step - nodes_began(job_dir)


def ended_at(job_dir: Path) -> float:
    """When the nodes recorded the job SUCCEEDED (seconds since the epoch)."""
    history = json.loads((job_dir / "status" / "job.json").read_text())["history"]
    return recorded(next(entry["time"] for entry in history if entry["state"] == "SUCCEEDED"))


def tune(stack: str, workdir: Path, trials: int, scratch: Path, name: str, one_node: bool = False) -> list[float]:
    """Seconds from each trial's end to the next trial's first step, in a study of ``trials``
    (each trial on one node with ``one_node``)."""
    spec = scratch / "hptuning_config.yaml"
    spec.write_text(LEARNING_RATE_STUDY.format(trials=trials, parallel=1))
    subprocess.run(
        [
            *TRAINSTACK,
            "tune",
            "--stack",
            stack,
            "--local",
            "--workdir",
            str(workdir),
            "--spec",
            str(spec),
            "--name",
            name,
            *(["--one-node"] if one_node else []),
            *ONE_STEP,
        ],
        cwd=REPOSITORY,
        env=environment(),
        check=True,
        capture_output=True,
        timeout=JOB_SECONDS * trials,
    )
    job_dirs = sorted(workdir.glob(f"bucket/*/jobs/q*_{name}_t*"), key=lambda path: int(path.name.rsplit("_t", 1)[1]))
    gaps = []
    for finished, following in itertools.pairwise(job_dirs):
        gaps.append(first_step(following / "progress.json", time.monotonic() + 5) - ended_at(finished))
    return gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="multiworker")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--one-node-trials",
        action="store_true",
        help="then a second study whose trials run on one node each (`tune --one-node`)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the runs' directories (the nodes' logs) and print where"
    )
    args = parser.parse_args()
    cold, returned, loop, one_node_gaps = [], [], [], []
    cold_nodes, loop_nodes = [], []
    runs_dir = (
        contextlib.nullcontext(tempfile.mkdtemp(prefix="queue-latency-"))
        if args.keep
        else tempfile.TemporaryDirectory(prefix="queue-latency-")
    )
    with runs_dir as scratch:
        if args.keep:
            print(f"the runs' directories: {scratch}", flush=True)
        # The job's unprivileged user must pass through to the run's files (mkdtemp makes 0700).
        os.chmod(scratch, 0o711)  # noqa: S103 - search only: nothing in it becomes listable
        standing_dir = Path(scratch) / "standing"
        standing = subprocess.Popen(
            [*TRAINSTACK, "local", "--stack", args.stack, "--standing", "--workdir", str(standing_dir), *ONE_STEP],
            cwd=REPOSITORY,
            env=environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + JOB_SECONDS
            # The stack's own job comes first (job 0); the loop starts once it has ended.
            job_ended(wait_for_file("bucket/*/jobs/*", standing_dir, deadline), deadline)
            for round_number in range(args.rounds):
                # The standing nodes' warm interpreters load TensorFlow after each job: the cold
                # run waits for that too, so that it shares the CPU with nothing.
                time.sleep(SETTLE_SECONDS)
                to_step, nodes_part = cold_run(args.stack, Path(scratch) / f"cold-{round_number}")
                cold.append(to_step)
                cold_nodes.append(nodes_part)
                time.sleep(SETTLE_SECONDS)
                took, to_step, nodes_part = submit(args.stack, standing_dir, f"probe{round_number}")
                returned.append(took)
                loop.append(to_step)
                loop_nodes.append(nodes_part)
            time.sleep(SETTLE_SECONDS)
            gaps = tune(args.stack, standing_dir, args.rounds + 1, Path(scratch), "tuneprobe")
            if args.one_node_trials:
                time.sleep(SETTLE_SECONDS)
                one_node_gaps = tune(args.stack, standing_dir, args.rounds + 1, Path(scratch), "onenode", one_node=True)
        finally:
            standing.send_signal(signal.SIGTERM)
            try:
                standing.wait(timeout=60)
            except subprocess.TimeoutExpired:
                standing.kill()
    c, s, r = statistics.median(cold), statistics.median(loop), statistics.median(returned)

    def runs(values: list[float]) -> str:
        return ", ".join(f"{value:.2f}" for value in values)

    print(f"cold `trainstack local` start to first step: {c:.2f} s (runs: {runs(cold)})")
    print(f"standing cluster, `submit` start to first step: {s:.2f} s (runs: {runs(loop)})")
    ratio = s / c
    print(f"ratio {ratio:.2f}; target: at most 0.3: {'met' if ratio <= 0.3 else 'MISSED'}")
    n, cn = statistics.median(loop_nodes), statistics.median(cold_nodes)
    # The nodes' part is what remains with a queue that took no time at all: the least ratio
    # any change to submit, the queue or the agent's polls could reach.
    print(
        f"of which the nodes' part, from the last node's start of the job to its first step: {n:.2f} s "
        f"(runs: {runs(loop_nodes)}), {n / c:.2f}x of the cold run, whose own nodes' part (TensorFlow's import "
        f"included) took {cn:.2f} s (runs: {runs(cold_nodes)}); target: at most 1.5 s: "
        f"{'met' if n <= 1.5 else 'MISSED'}"
    )
    print(f"`submit` returned in {r:.2f} s (runs: {runs(returned)}); target: under 2 s: {'met' if r < 2 else 'MISSED'}")
    g = statistics.median(gaps)
    print(
        f"`tune`: a trial's end to the next trial's first step: {g:.2f} s (gaps: {runs(gaps)}); "
        f"target: under 5 s: {'met' if max(gaps) < 5 else 'MISSED'}"
    )
    if one_node_gaps:
        g = statistics.median(one_node_gaps)
        print(
            f"`tune --one-node`: a trial's end to the next trial's first step: {g:.2f} s "
            f"(gaps: {runs(one_node_gaps)}); target: under 5 s: {'met' if max(one_node_gaps) < 5 else 'MISSED'}"
        )


if __name__ == "__main__":
    main()

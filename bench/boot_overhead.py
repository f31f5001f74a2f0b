"""What a node's boot (its boot script and the node agent) adds to a training job, measured in
one run on this machine.

1. Start to first step. The `dev` stack (one node) is run by `trainstack local`, with the
   environment already installed, from the boot script's start (which fetches and checks the
   agent, which reads its metadata, checks and unpacks the code and starts the trainer); the
   baseline starts `python -m trainer.task` directly with the same flags and environment.
   Both run one epoch of one step, and the first step is over when the trainer writes
   progress.json (its "time" field). Target: the boot adds under 2 s.
2. Trainer exit to self-stop. The agent runs a probe trainer that records the time it exits;
   the agent then writes its status objects and calls self-stop, which `trainstack local`
   records with a timestamp. Target: under 5 s.

    python bench/boot_overhead.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from trainstack.localrun.nodes import TrainerOverrides  # noqa: E402
from trainstack.localrun.run import THREADS_PER_NODE, LocalStackRun  # noqa: E402
from trainstack.stackmodel.resolved import resolve_stack  # noqa: E402
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack  # noqa: E402
from trainstack_contract import LAYOUT  # noqa: E402
from trainstack_contract.timescale import TIME_SCALE_VARIABLE  # noqa: E402

PROBE_TRAINER = REPOSITORY / "tests" / "fixtures" / "probe_trainer" / "trainer"
ONE_STEP = {"--epochs": "1", "--steps-per-epoch": "1", "--image-size": "32", "--batch-size-per-replica": "8"}


def first_step_time(job_dir: Path) -> float:
    return float(json.loads((job_dir / LAYOUT.progress).read_text())["time"])


def through_boot_script(workdir: Path) -> float:
    cfg, _ = load_stack(STACKS_DIR / "Pulumi.dev.yaml")
    # start() installs the environment before it starts the clock (run.started_at), as
    # on a restart where the environment is already there.
    run = LocalStackRun(resolve_stack(cfg), workdir, TrainerOverrides(ONE_STEP), echo=False)
    run.start()
    result = run.wait(timeout=600)
    if not result.succeeded:
        raise SystemExit("\n".join(result.logs["chief"]))
    return first_step_time(result.job_dir) - run.started_at


def trainer_directly(workdir: Path) -> float:
    cfg, _ = load_stack(STACKS_DIR / "Pulumi.dev.yaml")
    assert cfg.settings.cluster is not None
    cluster = resolve_stack(cfg).cluster
    assert cluster is not None
    args = TrainerOverrides(ONE_STEP).apply(list(cluster.trainer_args))
    job_dir = workdir / "job"
    env = dict(
        os.environ,
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_NUM_INTRAOP_THREADS=THREADS_PER_NODE,
        OMP_NUM_THREADS=THREADS_PER_NODE,
    )
    started = time.time()
    subprocess.run(
        [sys.executable, "-m", "trainer.task", "--job-dir", str(job_dir), *args],
        cwd=REPOSITORY,
        env=env,
        check=True,
        capture_output=True,
    )
    return first_step_time(job_dir) - started


def exit_to_self_stop(workdir: Path) -> float:
    cfg, _ = load_stack(STACKS_DIR / "Pulumi.dev.yaml")
    result = (
        LocalStackRun(resolve_stack(cfg), workdir, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER)
        .start()
        .wait(timeout=120)
    )
    exited = json.loads((result.job_dir / "probe" / "chief.json").read_text())["exit_time"]
    stopped = float(result.self_stops[-1].split()[0])
    return stopped - float(exited)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    # Measured with the agent's waits as on Compute Engine, whatever the caller's shell says.
    os.environ.pop(TIME_SCALE_VARIABLE, None)
    scripted, direct, stop = [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        # The job's unprivileged user must pass through to the run's files (mkdtemp makes 0700).
        os.chmod(scratch, 0o711)  # noqa: S103 - search only: nothing in it becomes listable
        for attempt in range(args.repeat):
            # Alternate the two so machine load drifts over both alike.
            scripted.append(through_boot_script(Path(scratch) / f"script-{attempt}"))
            direct.append(trainer_directly(Path(scratch) / f"direct-{attempt}"))
            stop.append(exit_to_self_stop(Path(scratch) / f"stop-{attempt}"))
    s, d, x = statistics.median(scripted), statistics.median(direct), statistics.median(stop)
    print(f"start to first step, through the boot script: {s:.2f} s (runs: {', '.join(f'{v:.2f}' for v in scripted)})")
    print(f"start to first step, trainer started directly: {d:.2f} s (runs: {', '.join(f'{v:.2f}' for v in direct)})")
    print(
        f"the boot script adds {s - d:.2f} s (ratio {s / d:.2f}); target: under 2 s: {'met' if s - d < 2 else 'MISSED'}"
    )
    print(
        f"trainer exit to self-stop call: {x:.3f} s (runs: {', '.join(f'{v:.3f}' for v in stop)}); target: under 5 s: {'met' if x < 5 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()

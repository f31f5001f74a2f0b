"""The built-in trainer's own start, phase by phase: from its code's start, with TensorFlow
already imported (as a standing node's warm interpreter has it when a job arrives), to the end
of its first step. This is the part of `submit` to first step (bench/queue_latency.py) that no
queue can shorten: each job is a new process that builds its strategy and traces its step.

    .venv/bin/python bench/trainer_start.py                # three processes, as `multiworker`
    .venv/bin/python bench/trainer_start.py --nodes 1      # one, as `dev`

Each run starts ``--nodes`` processes on loopback (a chief and workers, TF_CONFIG each, for
MultiWorkerMirroredStrategy; one process alone takes the trainer's own choice); each imports
TensorFlow and tf-keras, waits until every one has, then runs ``trainer.task`` on one epoch of
one step of synthetic 32 px images, as the queue benchmark's jobs do. The times are the chief's,
from the moment every process was ready, read off wrappers around the trainer's own functions
and a Keras callback ahead of its own; the first step ends when the trainer writes
progress.json (its end-of-epoch backup and checkpoint come first). Medians of ``--repeat`` runs.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))
JOB_ARGS = ["--model", "cnn", "--data", "synthetic", "--batch-size-per-replica", "32", "--epochs", "1"]
JOB_ARGS += ["--steps-per-epoch", "1", "--image-size", "32"]
# Bounds on every wait: a run that takes longer has failed.
RUN_SECONDS = 300.0
# The marks a run records, in order, and what lies between each and the one before it.
PHASES = (
    ("strategy", "the strategy made (several processes: their servers and a barrier)"),
    ("choice", "this node's choice of settings (the CPU precision probe)"),
    ("decided", "the job's settings decided once (several: the chief's sent to every node)"),
    ("model", "the model built and compiled (several: each variable's first value sent from the chief)"),
    ("fit_ready", "fit's set-up: the distributed dataset, the callbacks made"),
    ("step_begins", "the callbacks' start (the backup's restore check)"),
    ("step_ends", "the first step: its tracing, graph optimisation, first run and all-reduce"),
    ("progress", "the epoch's end: the backup and the checkpoint, then progress.json"),
)


def tf_configs(count: int) -> list[str | None]:
    """Each process's TF_CONFIG, the chief's first: ``trainstack local``'s loopback cluster of a
    chief and workers; none for one process, which trains alone as `dev`'s node does."""
    from trainstack.localrun.bare_trainers import cluster_nodes
    from trainstack.localrun.bare_trainers import tf_configs as loopback_configs

    if count == 1:
        return [None]
    nodes = cluster_nodes(workers=count - 1, ps=0, chief=True, evaluator=False)
    configs = loopback_configs(nodes)
    return [configs[node.name] for node in nodes]


def one_run(nodes: int, scratch: Path) -> dict[str, float]:
    """Seconds from the start to each mark, on the chief."""
    marks = scratch / "marks.json"
    children = []
    for index, tf_config in enumerate(tf_configs(nodes)):
        env = dict(os.environ, PYTHONPATH=str(REPOSITORY), TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("TF_CONFIG", None)
        if tf_config is not None:
            env["TF_CONFIG"] = tf_config
        command = [sys.executable, __file__, "--child", str(scratch), str(nodes), str(index)]
        children.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    errors = []
    for child in children:
        _, stderr = child.communicate(timeout=RUN_SECONDS)
        if child.returncode != 0:
            errors.append(stderr.decode(errors="replace")[-2000:])
    if errors:
        raise SystemExit("a trainer failed:\n" + "\n".join(errors))
    recorded: dict[str, float] = json.loads(marks.read_text())
    return recorded


def child(scratch: Path, nodes: int, index: int) -> int:
    """One process: TensorFlow first, then the barrier, then the trainer under the marks."""
    import tensorflow  # noqa: F401 (loaded before the clock starts, as the warm interpreter has it)
    import tf_keras as keras

    from trainer import callbacks, job_settings, task, training
    from trainer import strategy as strategies

    (scratch / f"ready-{index}").touch()
    deadline = time.monotonic() + RUN_SECONDS
    while not all((scratch / f"ready-{i}").exists() for i in range(nodes)):
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.005)
    started = time.time()
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.setdefault(name, time.time() - started)

    def after(module: Any, name: str, label: str) -> None:
        original: Callable[..., Any] = getattr(module, name)

        def marked(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            mark(label)
            return result

        setattr(module, name, marked)

    after(strategies, "build_strategy", "strategy")
    after(training, "node_choice", "choice")
    after(job_settings, "decide", "decided")
    after(training, "build_and_compile", "model")

    class Marks(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_begin(self, logs: Any = None) -> None:
            mark("fit_ready")

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            mark("step_begins")

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            mark("step_ends")

    made = callbacks.make_callbacks
    callbacks.make_callbacks = lambda *args, **kwargs: [Marks(), *made(*args, **kwargs)]
    job_dir = scratch / "job"
    code = task.main([*JOB_ARGS, "--job-dir", str(job_dir)])
    if index == 0 and code == 0:
        marks["progress"] = json.loads((job_dir / "progress.json").read_text())["time"] - started
        (scratch / "marks.json").write_text(json.dumps(marks))
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--nodes", type=int, default=3, choices=range(1, 9), metavar="1-8", help="trainer processes (default 3)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        choices=range(1, 21),
        metavar="1-20",
        help="runs, of which the median (default 3)",
    )
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="trainer-start-") as scratch:
            runs.append(one_run(args.nodes, Path(scratch)))
    print(
        f"the built-in trainer's start on {args.nodes} process(es), TensorFlow imported before; medians of {len(runs)}"
    )
    previous = [0.0] * len(runs)
    for name, what in PHASES:
        reached = [run.get(name, float("nan")) for run in runs]
        spans = [now - before for now, before in zip(reached, previous, strict=True)]
        print(f"  {statistics.median(spans):6.2f} s  {what}")
        previous = reached
    total = [run["progress"] for run in runs]
    print(
        f"  {statistics.median(total):6.2f} s  in all, start to the first step's end (runs: {', '.join(f'{t:.2f}' for t in total)})"
    )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        sys.exit(child(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
    main()

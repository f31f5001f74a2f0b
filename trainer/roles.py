"""Nodes that do not run model.fit: parameter-server workers and ps, and the evaluator.

Under ParameterServerStrategy only the chief runs Python training code; workers
and parameter servers just host a gRPC server, which normally blocks forever in
``server.join()``. Here they instead poll the job directory and exit 0 once the
chief has published metrics.json, so a boot script or launcher needs no special
knowledge to end them. If the chief fails they keep serving (a restarted chief
can reconnect); the launcher or boot script ends them by the chief's status.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from trainer import data_checks, data_pipeline, data_sources, jobdir
from trainer.checkpointing import write_scalar
from trainer.config import TrainerConfig
from trainer.data_sources import DataSource
from trainer.jobdir import JobLayout
from trainer.strategy import ClusterInfo

log = logging.getLogger(__name__)

# How often idle nodes look for the finished marker; a trade-off between how
# fast they exit and how many reads a gs:// job dir receives.
FINISHED_POLL_SECONDS = 2.0


def _marker_to_ignore(layout: JobLayout, overwrite: bool) -> dict[str, Any] | None:
    """The finished marker that does not end this node: with --overwrite, the old run's. Without
    it, any marker does, also one the chief wrote after this trainer's own start-up check (a
    node started again late in the job, after a preemption, would otherwise serve on until its
    boot script gives up on the heartbeat)."""
    return jobdir.finished_metrics(layout) if overwrite else None


def _job_finished_since(layout: JobLayout, marker_at_start: dict[str, Any] | None) -> bool:
    current = jobdir.finished_metrics(layout)
    # With --overwrite an old marker is already there; only a new one counts.
    return current is not None and current != marker_at_start


def serve_until_finished(cluster: ClusterInfo, layout: JobLayout, overwrite: bool) -> None:
    """Hosts a parameter-server-strategy worker or ps task until the job finishes."""
    import tensorflow as tf

    marker_at_start = _marker_to_ignore(layout, overwrite)
    # Recommended for ParameterServerStrategy servers: lets the coordinator's
    # RPC settings decide whether calls fail fast during a peer restart.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster.cluster),
        job_name=cluster.task_type,
        task_index=cluster.task_id,
        protocol="grpc",
        start=True,
    )
    log.info("%s serving at %s; exits when %s appears", cluster.task_name, server.target, layout.metrics_path)
    while not _job_finished_since(layout, marker_at_start):
        time.sleep(FINISHED_POLL_SECONDS)
    log.info("job finished; %s exits", cluster.task_name)


def run_evaluator(config: TrainerConfig, layout: JobLayout, source: DataSource) -> None:
    """Side-car evaluation: evaluates each new epoch checkpoint until the job finishes."""
    import tensorflow as tf

    from trainer import model as models

    marker_at_start = _marker_to_ignore(layout, config.overwrite)
    source = data_sources.count_records(config, source)
    network = models.build_model(config.model, config.image_size, source.num_classes)
    models.compile_model(network, config.learning_rate, steps_per_execution=1, jit_compile=False)
    steps = max(1, config.eval_steps or source.num_eval_examples // config.batch_size_per_replica)
    eval_data = data_pipeline.make_input_fn(config, source, steps, training=False)(tf.distribute.InputContext())
    writer = tf.summary.create_file_writer(jobdir.join(layout.log_dir, "eval"))
    checkpoint = tf.train.Checkpoint(model=network)

    def evaluate(path: str) -> None:
        checkpoint.restore(path).expect_partial()
        epoch = int(path.rsplit("-", 1)[-1])
        with data_checks.input_errors(config, "evaluation"):
            loss, accuracy = network.evaluate(eval_data, steps=steps, verbose=0)
        log.info("evaluated %s: loss=%.4f accuracy=%.4f", path, loss, accuracy)
        with writer.as_default():
            write_scalar("epoch_loss", loss, step=epoch)
            write_scalar("epoch_accuracy", accuracy, step=epoch)
        writer.flush()

    last_evaluated = None
    # Evaluates the newest checkpoint each time; when training outpaces
    # evaluation, intermediate epochs are skipped rather than queued.
    for path in tf.train.checkpoints_iterator(
        layout.checkpoint_dir,
        min_interval_secs=FINISHED_POLL_SECONDS,
        timeout=FINISHED_POLL_SECONDS,
        timeout_fn=lambda: _job_finished_since(layout, marker_at_start),
    ):
        evaluate(path)
        last_evaluated = path
    final = tf.train.latest_checkpoint(layout.checkpoint_dir)
    if final is not None and final != last_evaluated:
        evaluate(final)

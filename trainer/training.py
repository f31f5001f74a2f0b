"""One training run on a chief or worker: strategy, model, fit, evaluate, export.

Parameter servers, parameter-server workers and evaluators do not come here;
see ``trainer.roles``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from trainer import (
    checkpointing,
    data_checks,
    data_pipeline,
    data_sources,
    job_settings,
    jobdir,
    kernels,
    prepared,
    warm_agreement,
)
from trainer import precision as precisions
from trainer import strategy as strategies
from trainer.checkpointing import RunRecord
from trainer.config import TrainerConfig
from trainer.data_sources import DataSource
from trainer.jobdir import JobLayout
from trainer.strategy import ClusterInfo, StrategyError
from trainstack_contract import CHIEF, FINISHED, MIRRORED, MULTI_WORKER_MIRRORED, ONE_DEVICE, PARAMETER_SERVER, WORKER

log = logging.getLogger(__name__)


class PeerLost(Exception):
    """TensorFlow reported a peer of the cluster lost while this node trained, evaluated or
    exported: not this node's failure. ``record`` says how far training got and how far its
    backup reaches."""

    def __init__(self, reason: str, record: RunRecord) -> None:
        super().__init__(reason)
        self.reason = reason
        self.record = record


def peer_loss(error: BaseException) -> str | None:
    """The first line of TensorFlow's error when ``error`` (or what caused it) says a peer is
    gone: UnavailableError (a task stopped sending heartbeats, a refused connection) or
    AbortedError (collectives aborted because of another task); None for anything else."""
    import tensorflow as tf

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (tf.errors.UnavailableError, tf.errors.AbortedError)):
            lines = str(current).strip().splitlines()
            return f"{type(current).__name__}: {lines[0][:300] if lines else ''}"
        current = current.__cause__ or current.__context__
    return None


def stop_on_sigterm(record: RunRecord) -> None:
    """On SIGTERM (the node is shutting down, or its agent ends training because a peer is
    lost) say how far training got and what the backup keeps, then exit at once: TensorFlow's
    runtime otherwise catches SIGTERM and trains on until it is killed. The backup is written
    atomically, so nothing is left half-saved; the next start resumes from it."""

    def stop(signum: int, frame: Any) -> None:
        # A backup still being written in the background is let finish (Compute Engine gives
        # a preempted VM 30 s): the restart then resumes from it.
        record.pending.wait(timeout=PENDING_SAVE_SECONDS)
        print(
            f"trainer: stopped by {signal.Signals(signum).name} after step {record.trained_to_step} of the job; "
            f"the backup reaches step {record.backed_up_to_step}, so "
            f"{record.trained_to_step - record.backed_up_to_step} steps will be trained again when it resumes",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


# How long a signalled trainer waits for a backup being written in the background.
PENDING_SAVE_SECONDS = 20


def largest_divisor_at_most(number: int, limit: int) -> int:
    """steps_per_execution must divide the epoch so backups land on epoch ends."""
    for candidate in range(min(number, limit), 0, -1):
        if number % candidate == 0:
            return candidate
    return 1


def steady_examples_per_second(record: RunRecord, global_batch: int) -> float | None:
    """Throughput without the first epoch, which also pays for tracing and XLA compiles."""
    steps, seconds = record.epoch_steps, record.epoch_seconds
    if len(steps) > 1:
        steps, seconds = steps[1:], seconds[1:]
    if not steps or sum(seconds) <= 0:
        return None
    return sum(steps) * global_batch / sum(seconds)


@dataclasses.dataclass(frozen=True)
class TrainingSetup:
    """How this node trains: the strategy and everything sized from it."""

    kind: str
    strategy: Any
    num_gpus: int
    precision: str
    task_type: str
    task_id: int
    source: DataSource
    replicas: int
    global_batch: int
    steps: int
    steps_per_execution: int
    use_xla: bool
    onednn: bool


@dataclasses.dataclass(frozen=True)
class TrainingOutcome:
    """What a node's training ends with: its metrics, and whether this node publishes them."""

    metrics: dict[str, Any]
    writes: bool


def set_up(
    config: TrainerConfig,
    cluster: ClusterInfo,
    source: DataSource,
    layout: JobLayout,
    rehearsing: bool = False,
    strategy_made: Callable[[], None] = lambda: None,
) -> TrainingSetup:
    """The strategy, and the settings every replica trains with: decided once for the job
    (:mod:`trainer.job_settings`), whatever this node measures on its own. A job's nodes first
    agree whether they start with the strategy they rehearsed (:mod:`trainer.warm_agreement`);
    a rehearsal (``rehearsing``) has none to agree on. ``strategy_made`` is called once the
    strategy is made (a multi-worker one once every node has joined it)."""
    import tensorflow as tf
    import tf_keras as keras

    rehearsed = prepared.held() is not None
    if not rehearsed:
        # A rehearsal made its strategy with one device per CPU: it rehearses no other.
        strategies.configure_logical_cpus(config.logical_cpus)
    num_gpus = len(tf.config.list_physical_devices("GPU"))
    kind = strategies.choose_strategy(config.strategy, cluster, num_gpus, config.tpu, config.logical_cpus)
    if rehearsed and config.logical_cpus > 1:
        raise StrategyError("--logical-cpus must split the CPU before TensorFlow starts; start the trainer anew")
    if kind == MULTI_WORKER_MIRRORED and not rehearsing and cluster.task_type in (CHIEF, WORKER):
        agreed = warm_agreement.Agreement(layout, cluster).agree(prepared.rehearsal_token())
        if rehearsed and not agreed:
            prepared.start_anew()
    keras.utils.set_random_seed(config.seed)
    strategy = prepared.strategy_for(kind, os.environ)
    if strategy is None:
        strategy = strategies.build_strategy(kind, config.tpu)
    strategy_made()
    task_type, task_id = strategies.task_identity(strategy)
    # Not before: counting and the precision probe run TensorFlow ops, which must follow the
    # strategy's set-up.
    source = data_sources.count_records(config, source)
    mine = node_choice(config, kind, num_gpus, strategy.num_replicas_in_sync, source)
    job = job_settings.decide(
        config,
        strategy,
        layout.backup_dir,
        mine,
        is_chief=checkpointing.is_writer(strategy),
        broadcast=kind == MULTI_WORKER_MIRRORED,
    )
    keras.mixed_precision.set_global_policy(job.precision)
    setup = TrainingSetup(
        kind=kind,
        strategy=strategy,
        num_gpus=num_gpus,
        precision=job.precision,
        task_type=task_type,
        task_id=task_id,
        source=dataclasses.replace(source, num_classes=job.num_classes),
        replicas=job.replicas,
        global_batch=job.global_batch,
        steps=job.steps_per_epoch,
        steps_per_execution=job.steps_per_execution,
        use_xla=job.xla,
        onednn=kernels.onednn_enabled(),
    )
    log.info(
        "strategy=%s replicas=%d global_batch=%d steps_per_epoch=%d steps_per_execution=%d precision=%s xla=%s "
        "onednn=%s",
        kind,
        setup.replicas,
        setup.global_batch,
        setup.steps,
        setup.steps_per_execution,
        setup.precision,
        setup.use_xla,
        setup.onednn,
    )
    return setup


def node_choice(
    config: TrainerConfig, kind: str, num_gpus: int, replicas: int, source: DataSource
) -> job_settings.JobSettings:
    """The settings this node would train with on its own: its flags, its probe, its devices."""
    precision = precisions.auto_precision(kind, num_gpus) if config.precision == "auto" else config.precision
    global_batch = config.batch_size_per_replica * replicas
    steps = data_sources.steps_per_epoch(config, source, global_batch)
    # XLA on the CPU halves this CNN's speed (its convolutions lose oneDNN; measured,
    # see docs/trainer.md), so auto enables it only for a single GPU. Multi-device
    # strategies would put the all-reduce inside the compiled step, and TPUs
    # compile with XLA anyway.
    use_xla = config.xla == "on" or (config.xla == "auto" and kind == ONE_DEVICE and num_gpus > 0)
    return job_settings.JobSettings(
        precision=precision,
        xla=use_xla,
        steps_per_epoch=steps,
        steps_per_execution=largest_divisor_at_most(steps, config.steps_per_execution),
        global_batch=global_batch,
        num_classes=source.num_classes,
        model=config.model,
        data=config.data,
        image_size=config.image_size,
        batch_size_per_replica=config.batch_size_per_replica,
        replicas=replicas,
        epochs=config.epochs,
        learning_rate=config.learning_rate,
        seed=config.seed,
        validation_split=config.validation_split,
    )


def run_training(config: TrainerConfig, cluster: ClusterInfo, layout: JobLayout, source: DataSource) -> TrainingOutcome:
    """Trains on this node; returns its metrics (written to metrics.json by the chief)."""
    setup = set_up(config, cluster, source, layout)
    model = prepared.take_model(prepared.model_key(config, setup), config.learning_rate)
    if model is None:
        with setup.strategy.scope():
            model = build_and_compile(config, setup.source, setup.steps_per_execution, setup.use_xla)
    record = RunRecord(steps_per_epoch=setup.steps)
    stop_on_sigterm(record)
    try:
        train_seconds = fit(config, setup, model, layout, record)
        evaluation = evaluate(config, setup, model)
        checkpointing.export_model(model, setup.strategy, layout, setup.task_type, setup.task_id)
    except Exception as error:
        lost = peer_loss(error)
        if lost is None:
            raise
        raise PeerLost(lost, record) from error
    metrics = node_metrics(config, cluster, setup, record, train_seconds, evaluation)
    return TrainingOutcome(metrics, writes=checkpointing.is_writer(setup.strategy))


def fit(config: TrainerConfig, setup: TrainingSetup, model: Any, layout: JobLayout, record: RunRecord) -> float:
    """Trains from the backup (if any) to the last epoch; returns the seconds it took."""
    import tf_keras as keras

    from trainer.callbacks import make_callbacks

    parameter_server = setup.kind == PARAMETER_SERVER
    steps_bound = config.save_every_steps
    every_calls = (
        None
        if steps_bound is None
        else checkpointing.backup_save_frequency(steps_bound, setup.steps_per_execution, False)
    )
    saving = saving_plan(config, setup, record, every_calls if isinstance(every_calls, int) else None)
    save_freq: int | str = "epoch" if parameter_server else (every_calls if isinstance(every_calls, int) else 1)
    callbacks = make_callbacks(setup.strategy, layout, record, save_freq, setup.task_type, setup.task_id, saving)
    make_input = data_pipeline.make_input_fn(config, setup.source, setup.steps, training=True)
    train_input = keras.utils.experimental.DatasetCreator(make_input, input_options=device_prefetch(parameter_server))
    started = time.perf_counter()
    with data_checks.input_errors(config, "training"):
        model.fit(train_input, epochs=config.epochs, steps_per_epoch=setup.steps, callbacks=callbacks, verbose=2)
    return time.perf_counter() - started


# Batches each replica's device holds ready beyond the one it trains on: the next batch's copy
# to a GPU overlaps the current step.
DEVICE_PREFETCH_BATCHES = 2


def device_prefetch(parameter_server: bool) -> Any:
    """The strategy's input options: batches copied to each replica's device ahead of its step
    (parameter servers' workers fetch their own, as TensorFlow's coordinator arranges)."""
    import tensorflow as tf

    if parameter_server:
        return None
    return tf.distribute.InputOptions(
        experimental_fetch_to_device=True, experimental_per_replica_buffer_size=DEVICE_PREFETCH_BATCHES
    )


def saving_plan(config: TrainerConfig, setup: TrainingSetup, record: RunRecord, every_calls: int | None) -> Any:
    """When the backup and the epoch checkpoints are written, on one clock every node counts
    alike (under MultiWorkerMirroredStrategy, calls of the training function at the chief's
    measured pace), and whether the writer's saves finish in the background: on one process
    (one device, the GPUs of one machine), not where saves are collective across workers or
    run on a TPU, where asynchronous checkpoints are not verified here."""
    from trainer.callbacks import Saving

    agree = None
    if setup.kind == MULTI_WORKER_MIRRORED:
        is_chief = checkpointing.is_writer(setup.strategy)

        def agree(measured: float) -> float:
            # Microseconds as whole numbers: what the broadcast carries.
            chief = job_settings.broadcast_from_chief(setup.strategy, [round(measured * 1e6)], is_chief)
            return chief[0] / 1e6

    clock = checkpointing.TrainingClock(agree)
    seconds = config.save_every_seconds
    return Saving(
        backup=checkpointing.SaveInterval(clock, seconds, every_calls),
        checkpoint=checkpointing.SaveInterval(clock, seconds),
        every_epoch=config.save_every_steps is not None,
        asynchronous=setup.kind in (ONE_DEVICE, MIRRORED),
        pending=record.pending,
    )


def evaluate(config: TrainerConfig, setup: TrainingSetup, model: Any) -> tuple[float | None, float | None]:
    """Loss and accuracy on held-out data; (None, None) when there is none to evaluate on."""
    import tf_keras as keras

    eval_steps = config.eval_steps or setup.source.num_eval_examples // setup.global_batch
    if eval_steps <= 0:
        return None, None
    eval_input = keras.utils.experimental.DatasetCreator(
        data_pipeline.make_input_fn(config, setup.source, setup.steps, training=False)
    )
    # Keras prints evaluation steps like training steps: say which is which.
    log.info("evaluation on held-out data: %d steps", eval_steps)
    with data_checks.input_errors(config, "evaluation"):
        eval_loss, eval_accuracy = model.evaluate(eval_input, steps=eval_steps, verbose=2)
    log.info("evaluation: loss=%.4f accuracy=%.4f", eval_loss, eval_accuracy)
    return eval_loss, eval_accuracy


def node_metrics(
    config: TrainerConfig,
    cluster: ClusterInfo,
    setup: TrainingSetup,
    record: RunRecord,
    train_seconds: float,
    evaluation: tuple[float | None, float | None],
) -> dict[str, Any]:
    """metrics.json: what was trained, how, how fast, and from where it resumed."""
    global_batch, kind = setup.global_batch, setup.kind
    steady = steady_examples_per_second(record, global_batch)
    total_steps = sum(record.epoch_steps)
    if record.first_epoch is None:
        # No epoch ran: the backup said training had ended, and only the
        # evaluation and export were left from an interrupted run.
        epochs_resumed, resumed = config.epochs, True
    else:
        epochs_resumed, resumed = record.first_epoch, bool(record.first_epoch or record.first_step)
    return {
        "status": FINISHED,
        "model": config.model,
        "data": setup.source.kind,
        "num_classes": setup.source.num_classes,
        "image_size": config.image_size,
        "strategy": kind,
        "replicas": setup.replicas,
        # Under parameter servers the chief only coordinates; workers do the steps.
        "workers": (
            len(cluster.cluster.get("worker", [])) if kind == PARAMETER_SERVER else max(1, cluster.num_workers)
        ),
        "parameter_servers": cluster.num_ps,
        "batch_size_per_replica": config.batch_size_per_replica,
        "global_batch_size": global_batch,
        "steps_per_epoch": setup.steps,
        "steps_per_execution": setup.steps_per_execution,
        "precision": setup.precision,
        "xla": setup.use_xla,
        "onednn": setup.onednn,
        "epochs": config.epochs,
        "epochs_run": len(record.epoch_losses),
        # Epochs that a previous, interrupted run had completed and the backup restored.
        "epochs_resumed": epochs_resumed,
        "resumed": resumed,
        "resumed_at_step": record.first_step or 0,
        "final_loss": record.epoch_losses[-1] if record.epoch_losses else None,
        "final_accuracy": record.epoch_accuracies[-1] if record.epoch_accuracies else None,
        "loss_history": record.epoch_losses,
        "accuracy_history": record.epoch_accuracies,
        "eval_loss": evaluation[0],
        "eval_accuracy": evaluation[1],
        "examples_per_second": steady,
        "examples_per_second_all_epochs": (
            total_steps * global_batch / sum(record.epoch_seconds) if record.epoch_seconds else None
        ),
        "train_seconds": train_seconds,
        "epoch_save_seconds": record.epoch_save_seconds,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def build_and_compile(config: TrainerConfig, source: DataSource, steps_per_execution: int, use_xla: bool) -> Any:
    from trainer import model as models

    network = models.build_model(config.model, config.image_size, source.num_classes)
    models.compile_model(network, config.learning_rate, steps_per_execution, use_xla)
    return network


def finish(outcome: TrainingOutcome, layout: JobLayout) -> None:
    """The chief publishes metrics.json (the finished marker) and drops the backup."""
    if not outcome.writes:
        return
    jobdir.write_json_atomically(layout.metrics_path, outcome.metrics)
    # The backup only serves an interrupted run; a finished one must not resume from it.
    jobdir.remove_tree_if_exists(layout.backup_dir)
    warm_agreement.remove(layout)
    jobdir.remove_dir_if_empty(layout.tmp_dir)

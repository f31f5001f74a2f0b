"""Surviving restarts: who writes, the backup frequency, the run record, a damaged backup,
TensorBoard scalars and export (the Keras callbacks that use them: :mod:`trainer.callbacks`).

Who writes is decided by the strategy (``strategy.extended.should_checkpoint``),
never by parsing TF_CONFIG by hand. Saves that involve every worker (MWMS
checkpoints and model export) run everywhere; the non-chief workers write into
their own ``<job-dir>/tmp/<task>`` path, which is removed right after.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from trainer import jobdir
from trainer.config import ConfigError
from trainer.jobdir import JobLayout

log = logging.getLogger(__name__)

# Epoch checkpoints kept in <job-dir>/checkpoints (older ones are pruned).
CHECKPOINTS_TO_KEEP = 3


class BackupDamaged(ConfigError):
    """The backup a run would resume from cannot be read whole; the message names the file
    and what to do. Nothing is removed: the backup is the user's to move aside."""


def damaged_backup_file(backup_dir: str) -> tuple[str, str] | None:
    """The file of the backup's latest checkpoint that cannot be read whole, and what is wrong
    with it; None when there is no backup or every tensor of it reads (then what failed was
    not the backup's bytes: an unreachable bucket, a refused read).

    tf-keras restores from ``<backup>/chief``; a checkpoint is an index (a table of every
    tensor's place) and data files. A data file shorter than its index says raises IndexError
    ("Read less bytes than requested"); a damaged index, or bytes whose checksum does not
    match, an OpError. Reading every tensor again costs one more read of the backup, and only
    after its restore failed."""
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(jobdir.join(backup_dir, "chief"))
    if prefix is None:
        return None
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (IndexError, tf.errors.OpError) as error:
        return (f"{prefix}.index", _damage(error)) if _is_damage(error) else None
    data_files = sorted(tf.io.gfile.glob(f"{prefix}.data-*"))
    where = data_files[0] if len(data_files) == 1 else f"{prefix}.data-* ({len(data_files)} files)"
    for name in sorted(reader.get_variable_to_shape_map()):
        try:
            reader.get_tensor(name)
        except (IndexError, tf.errors.OpError) as error:
            return (where, _damage(error)) if _is_damage(error) else None
    return None


def _is_damage(error: BaseException) -> bool:
    """Whether TensorFlow's error is about the file's bytes, not about reaching it."""
    import tensorflow as tf

    unreachable = (
        tf.errors.NotFoundError,
        tf.errors.PermissionDeniedError,
        tf.errors.UnauthenticatedError,
        tf.errors.UnavailableError,
        tf.errors.DeadlineExceededError,
        tf.errors.ResourceExhaustedError,
        tf.errors.CancelledError,
        tf.errors.AbortedError,
    )
    return not isinstance(error, unreachable)


def _damage(error: BaseException) -> str:
    text = " ".join(str(getattr(error, "message", None) or error).split())[:200]
    # A data file shorter than its index says, or an index shorter than any table, is cut
    # short; any other damage (an index cut elsewhere, a checksum) may be either.
    truncated = isinstance(error, IndexError) or "too short" in text or "less bytes" in text
    return f"{'truncated' if truncated else 'truncated or corrupt'}: {text}"


def backup_damaged(backup_dir: str, checkpoint_dir: str) -> BackupDamaged | None:
    """The error a run that cannot resume from its backup ends with (exit 2, one line); None
    when the backup's bytes are not what failed."""
    found = damaged_backup_file(backup_dir)
    if found is None:
        return None
    path, damage = found
    return BackupDamaged(
        f"{path} is damaged ({damage}), so the job cannot resume from its backup; nothing was changed. "
        f"Move {backup_dir} aside (or remove it) to start the job over from its first epoch; {checkpoint_dir} "
        "keeps the weights of its last epochs, which a run that starts over replaces: copy them first to keep them"
    )


def is_writer(strategy: Any) -> bool:
    return bool(strategy.extended.should_checkpoint)


def backup_save_frequency(save_every_steps: int, steps_per_execution: int, parameter_server: bool) -> int | str:
    """BackupAndRestore's save_freq, which counts calls of train_function.

    One call runs ``steps_per_execution`` steps. ParameterServerStrategy only
    supports epoch-level backups in tf-keras.
    """
    if parameter_server:
        return "epoch"
    return max(1, -(-save_every_steps // steps_per_execution))


# Calls of the training function a MultiWorkerMirroredStrategy chief times before the job's
# saving interval is turned into calls: the first call traces and compiles, the next ones run.
CALIBRATION_CALLS = 3


class TrainingClock:
    """Training time as every node of a job counts it, for deciding when to save.

    Saves under MultiWorkerMirroredStrategy are collective (every worker takes part), so the
    workers must decide alike; each one timing itself would split the decision where their
    clocks straddle the interval. There the clock counts calls of the training function, each
    worth the seconds per call the chief measured over its first calls and broadcast (``agree``):
    one decision for the job. A single process (one device, several GPUs of one machine, a TPU
    VM, a parameter-server coordinator) reads the monotonic clock."""

    def __init__(self, agree: Callable[[float], float] | None = None, clock: Callable[[], float] = time.monotonic):
        self._agree = agree
        self._clock = clock
        self.calls = 0
        self._first_call_ended: float | None = None
        self.seconds_per_call: float | None = None

    def call_ended(self) -> None:
        self.calls += 1
        if self._agree is None or self.seconds_per_call is not None:
            return
        if self.calls == 1:
            self._first_call_ended = self._clock()
        elif self.calls == CALIBRATION_CALLS and self._first_call_ended is not None:
            measured = (self._clock() - self._first_call_ended) / (CALIBRATION_CALLS - 1)
            self.seconds_per_call = max(self._agree(measured), 1e-6)
            log.info("saving interval counted in calls of %.4f s (the chief's measure)", self.seconds_per_call)

    def now(self) -> float:
        """Seconds of training so far, as this clock counts them."""
        if self._agree is None:
            return self._clock()
        return self.calls * (self.seconds_per_call or 0.0)


class SaveInterval:
    """When a save is due: ``seconds`` of training since the last one, by ``clock``, or
    ``every_calls`` calls of the training function where a step bound is set as well."""

    def __init__(self, clock: TrainingClock, seconds: float, every_calls: int | None = None) -> None:
        self.clock = clock
        self.seconds = seconds
        self.every_calls = every_calls
        self._saved_at = clock.now()
        self._saved_at_call = clock.calls

    def due(self) -> bool:
        if self.every_calls is not None and self.clock.calls - self._saved_at_call >= self.every_calls:
            return True
        return self.clock.now() - self._saved_at >= self.seconds

    def saved(self) -> None:
        self._saved_at = self.clock.now()
        self._saved_at_call = self.clock.calls


class PendingSaves:
    """Checkpoint writes still under way in the background (asynchronous saves): waited for
    before the run ends or a signal stops it, so that a save that was started is not lost."""

    def __init__(self) -> None:
        self._managers: list[Any] = []

    def add(self, manager: Any) -> None:
        if manager not in self._managers:
            self._managers.append(manager)

    def wait(self, timeout: float | None = None) -> bool:
        """Waits for every write (at most ``timeout`` seconds); whether they all finished."""
        waiter = threading.Thread(target=self._sync_all, daemon=True)
        waiter.start()
        waiter.join(timeout)
        return not waiter.is_alive()

    def _sync_all(self) -> None:
        for manager in self._managers:
            manager.sync()


@dataclasses.dataclass
class RunRecord:
    """What happened during fit, filled in by ``ProgressCallback``."""

    first_epoch: int | None = None
    first_step: int | None = None
    epochs_completed: int = 0
    # When this run (this attempt at the job) first ended an epoch (seconds since the epoch):
    # with its start, how long the trainer took to get going.
    first_epoch_ended_at: float | None = None
    epoch_losses: list[float] = dataclasses.field(default_factory=list)
    epoch_accuracies: list[float] = dataclasses.field(default_factory=list)
    epoch_seconds: list[float] = dataclasses.field(default_factory=list)
    epoch_steps: list[int] = dataclasses.field(default_factory=list)
    # Seconds the backups and the epoch checkpoints held training up: in all (saving) and
    # within each epoch (part of that epoch's seconds). What the resume guarantee costs.
    saving: float = 0.0
    epoch_save_seconds: list[float] = dataclasses.field(default_factory=list)
    # Counted in steps of the whole job (epoch * steps_per_epoch + steps into the epoch):
    # where this attempt started (the backup it restored), how far it trained, and how far
    # its latest backup reaches. A lost peer costs the steps between the last two.
    steps_per_epoch: int = 0
    started_at_step: int = 0
    trained_to_step: int = 0
    backed_up_to_step: int = 0
    # Saves still being written in the background; waited for before the run ends or stops.
    pending: PendingSaves = dataclasses.field(default_factory=lambda: PendingSaves())


def write_scalar(name: str, value: float, step: int) -> None:
    """One TensorBoard scalar through the default summary writer, without tensorboard."""
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=metadata.SerializeToString())


def export_model(model: Any, strategy: Any, layout: JobLayout, task_type: str, task_id: int) -> None:
    """Saves the SavedModel; only the chief's copy is kept.

    Every MWMS worker must take part in the save (it may run collective ops),
    so the others save into their own temporary path and delete it.
    """
    if is_writer(strategy):
        model.save(layout.model_dir)
        return
    scratch = layout.worker_tmp_dir(task_type, task_id)
    try:
        model.save(jobdir.join(scratch, "model"))
    finally:
        jobdir.remove_tree_if_exists(scratch)
        jobdir.remove_dir_if_empty(layout.tmp_dir)

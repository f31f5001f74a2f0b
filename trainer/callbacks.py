"""The trainer's Keras callbacks: progress and resume point, epoch checkpoints, TensorBoard
scalars, and backups by training time, in the order :func:`make_callbacks` gives.

This module imports TensorFlow: :func:`trainer.training.fit` imports it once training starts,
so that the trainer's command line answers without loading it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras
from tf_keras.src.distribute import distributed_file_utils

from trainer import jobdir
from trainer.checkpointing import (
    CHECKPOINTS_TO_KEEP,
    PendingSaves,
    RunRecord,
    SaveInterval,
    backup_damaged,
    is_writer,
    write_scalar,
)
from trainer.jobdir import JobLayout

log = logging.getLogger("trainer.checkpointing")


class ProgressCallback(keras.callbacks.Callback):  # type: ignore[misc]  # tf-keras is untyped
    """Records resume point, per-epoch loss and timing; the chief writes progress.json."""

    def __init__(self, strategy: Any, layout: JobLayout, record: RunRecord) -> None:
        super().__init__()
        self._strategy, self._layout, self._record = strategy, layout, record
        # Keras then hands over logs as tensors without forcing a sync per batch.
        self._supports_tf_logs = True
        self._epoch = 0
        self._epoch_start = 0.0
        self._saving_at_start = 0.0
        self._epoch_first_step: int | None = None
        self._epoch_last_step = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        # After a restore Keras hands over the epoch and batch as NumPy integers, which
        # metrics.json cannot hold: plain ints from here on.
        epoch = int(epoch)
        if self._record.first_epoch is None:
            self._record.first_epoch = epoch
        self._epoch = epoch
        self._epoch_start = time.perf_counter()
        self._saving_at_start = self._record.saving
        self._epoch_first_step = None

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        batch = int(batch)
        if self._epoch_first_step is None:
            self._epoch_first_step = batch
            if self._record.first_step is None:
                self._record.first_step = batch
                self._record.started_at_step = self._record.backed_up_to_step = (
                    self._epoch * self._record.steps_per_epoch + batch
                )
                # Either line marks this node's first step, a time a user (or
                # bench/preemption_recovery.py) can read off the log.
                if self._record.first_epoch or batch:
                    log.info("resuming from the backup at epoch %d, step %d", self._record.first_epoch, batch)
                else:
                    log.info("training from the start")

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._epoch_last_step = int(batch)
        self._record.trained_to_step = self._epoch * self._record.steps_per_epoch + self._epoch_last_step + 1

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        # Keras has synced the logs to Python numbers by now, so this time
        # includes all of the epoch's device work.
        seconds = time.perf_counter() - self._epoch_start
        logs = logs or {}
        first = self._epoch_first_step or 0
        self._record.epoch_steps.append(self._epoch_last_step - first + 1)
        self._record.epoch_seconds.append(seconds)
        self._record.epoch_save_seconds.append(self._record.saving - self._saving_at_start)
        self._record.epoch_losses.append(float(logs.get("loss", float("nan"))))
        self._record.epoch_accuracies.append(float(logs.get("accuracy", float("nan"))))
        self._record.epochs_completed = epoch + 1
        if self._record.first_epoch_ended_at is None:
            self._record.first_epoch_ended_at = time.time()
        if is_writer(self._strategy):
            # A backup of this epoch's end written in the background is on disk before the
            # progress file says the epoch is done.
            self._record.pending.wait()
            jobdir.write_json_atomically(
                self._layout.progress_path,
                {
                    "epochs_completed": epoch + 1,
                    "loss": self._record.epoch_losses[-1],
                    "accuracy": self._record.epoch_accuracies[-1],
                    "time": time.time(),
                    "first_epoch_time": self._record.first_epoch_ended_at,
                },
            )


def weights_of(model: Any) -> Any:
    """A model of the same layers, so of the same variables, that has no optimizer: checkpointed
    as ``model``, it holds what ``tf.train.Checkpoint(model=...)`` restores into a model built
    the same way (the evaluator's restore), without Adam's two slots per weight, which nothing
    reads from an epoch checkpoint (the backup keeps them for resuming) and which made each
    one three times the size of the weights."""
    if isinstance(model, keras.Sequential):
        return keras.Sequential(model.layers)
    return keras.Model(model.inputs, model.outputs)


@dataclasses.dataclass(frozen=True)
class Saving:
    """When and how the backup and the epoch checkpoints are written."""

    backup: SaveInterval
    checkpoint: SaveInterval
    # Also at every epoch's end (--save-every-steps asks for a bound in steps).
    every_epoch: bool
    # Whether the writer's saves may finish in the background (asynchronous checkpoints).
    asynchronous: bool
    pending: PendingSaves

    def options(self, writes: bool) -> Any:
        """The writer's saves copy the state and write it in the background; a worker that
        writes to a scratch directory removed at once saves in the foreground."""
        if self.asynchronous and writes:
            return tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
        return None


def last_epoch(callback: Any, epoch: int) -> bool:
    return int(epoch) + 1 >= int(callback.params.get("epochs") or 0)


class EpochCheckpoint(keras.callbacks.Callback):  # type: ignore[misc]  # tf-keras is untyped
    """Keeps the last few checkpoints' weights for evaluation and for rolling back: at the first
    epoch's end after the saving interval, at every epoch's end with a step bound, and at the last."""

    def __init__(
        self, strategy: Any, layout: JobLayout, record: RunRecord, task_type: str, task_id: int, saving: Saving
    ) -> None:
        super().__init__()
        self._strategy, self._layout, self._task = strategy, layout, (task_type, task_id)
        self._record = record
        self._saving = saving
        self._manager: Any = None

    def on_train_begin(self, logs: Any = None) -> None:
        directory = (
            self._layout.checkpoint_dir
            if is_writer(self._strategy)
            else jobdir.join(self._layout.worker_tmp_dir(*self._task), "checkpoints")
        )
        checkpoint = tf.train.Checkpoint(model=weights_of(self.model))
        self._manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=CHECKPOINTS_TO_KEEP)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        saving = self._saving
        if not (saving.every_epoch or saving.checkpoint.due() or last_epoch(self, epoch)):
            return
        started = time.perf_counter()
        writes = is_writer(self._strategy)
        options = saving.options(writes)
        self._manager.save(checkpoint_number=epoch + 1, options=options)
        if options is not None:
            saving.pending.add(self._manager)
        if not writes:
            jobdir.remove_tree_if_exists(self._manager.directory)
        saving.checkpoint.saved()
        self._record.saving += time.perf_counter() - started

    def on_train_end(self, logs: Any = None) -> None:
        self._saving.pending.wait()


class ScalarLogger(keras.callbacks.Callback):  # type: ignore[misc]  # tf-keras is untyped
    """Epoch scalars as TensorBoard event files, written by the chief only.

    Keras' TensorBoard callback needs the ``tensorboard`` package, which
    TensorFlow 2.21 no longer pulls in; ``tf.summary.write`` with the
    scalars plugin's metadata produces the same events from TensorFlow alone.
    """

    def __init__(self, strategy: Any, layout: JobLayout, record: RunRecord) -> None:
        super().__init__()
        self._strategy, self._layout, self._record = strategy, layout, record
        self._writer: Any = None

    def on_train_begin(self, logs: Any = None) -> None:
        if is_writer(self._strategy):
            self._writer = tf.summary.create_file_writer(jobdir.join(self._layout.log_dir, "train"))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._writer is None:
            return
        scalars = dict(logs or {})
        if self._record.epoch_seconds and self._record.epoch_seconds[-1] > 0:
            scalars["steps_per_second"] = self._record.epoch_steps[-1] / self._record.epoch_seconds[-1]
        with self._writer.as_default():
            for name, value in scalars.items():
                write_scalar(f"epoch_{name}", float(value), step=epoch)
        self._writer.flush()

    def on_train_end(self, logs: Any = None) -> None:
        if self._writer is not None:
            self._writer.close()


class StepAccurateBackupAndRestore(keras.callbacks.BackupAndRestore):  # type: ignore[misc]  # tf-keras is untyped
    """BackupAndRestore that records the last step a backup covers, and backs up when the
    saving interval has passed (checked after every call of the training function), at the
    last epoch's end, and, with a step bound, every ``save_freq`` calls and at every epoch's end.

    tf-keras 2.21 stores the step at which the last train_function call
    *began*; with steps_per_execution > 1 a restart then repeats up to
    steps_per_execution - 1 steps and misses that the epoch had ended.
    Recording the end step before the save fixes both.

    A backup that cannot be read whole (a truncated or corrupt file) ends the run with
    :class:`~trainer.checkpointing.BackupDamaged`, which names the file, instead of
    TensorFlow's traceback.
    """

    def __init__(self, record: RunRecord, checkpoint_dir: str, saving: Saving, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._record = record
        self._checkpoint_dir = checkpoint_dir
        self._saving = saving
        self._calls_since_backup = 0

    def on_train_begin(self, logs: Any = None) -> None:
        try:
            super().on_train_begin(logs)
        except (IndexError, tf.errors.OpError) as error:
            damaged = backup_damaged(self.backup_dir, self._checkpoint_dir)
            if damaged is None:
                raise
            raise damaged from error

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if isinstance(self.model.distribute_strategy, tf.distribute.ParameterServerStrategy):
            return
        # Once per call of the training function, on every worker alike: the clock the
        # saving interval is counted by.
        self._saving.backup.clock.call_ended()
        self._training_state._ckpt_saved_batch.assign(batch)
        self._training_state.backup_if_preempted()
        self._calls_since_backup += 1
        if self._saving.backup.due():
            self._backup(epoch=self._current_epoch, batch=batch)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.save_freq == "epoch":
            # Parameter servers: the coordinator alone saves, at an epoch's end.
            if self._saving.every_epoch or self._saving.backup.due() or last_epoch(self, epoch):
                self._backup(epoch=epoch)
            return
        # The last batch's end is also the epoch's end: where the last epoch's backup must
        # land (a restart between fit and export then trains nothing again), and, with a step
        # bound, every epoch's (N steps alone never land on an epoch's end when N does not
        # divide the epoch: a node lost after two whole epochs then started over).
        if (self._saving.every_epoch or last_epoch(self, epoch)) and self._calls_since_backup != 0:
            self._training_state._ckpt_saved_batch.assign(self._record.steps_per_epoch - 1)
            self._backup(epoch=epoch, batch=self._record.steps_per_epoch - 1)

    def on_train_end(self, logs: Any = None) -> None:
        self._saving.pending.wait()
        super().on_train_end(logs)

    def _backup(self, epoch: int, batch: int = 0) -> None:
        """WorkerTrainingState.back_up, with the writer's save finishing in the background
        where the strategy allows it."""
        started = time.perf_counter()
        manager = self._training_state.write_checkpoint_manager
        options = self._saving.options(is_writer(self.model.distribute_strategy))
        if manager.save(options=options):
            distributed_file_utils.remove_temp_dirpath(manager.directory, self.model.distribute_strategy)
        if options is not None:
            self._saving.pending.add(manager)
        self._saving.backup.saved()
        self._calls_since_backup = 0
        self._record.saving += time.perf_counter() - started
        # An epoch-end backup (save_freq "epoch") reaches the end of that epoch.
        steps_into_epoch = self._record.steps_per_epoch if self.save_freq == "epoch" else int(batch) + 1
        self._record.backed_up_to_step = int(epoch) * self._record.steps_per_epoch + steps_into_epoch
        if is_writer(self.model.distribute_strategy):
            log.info("backup at step %d of the job", self._record.backed_up_to_step)


def make_callbacks(
    strategy: Any,
    layout: JobLayout,
    record: RunRecord,
    save_freq: int | str,
    task_type: str,
    task_id: int,
    saving: Saving,
) -> list[Any]:
    """Callback order matters: the backup is written before progress reports the epoch, and
    its batch hook ticks the clock the saving interval counts by before anything reads it."""
    return [
        StepAccurateBackupAndRestore(
            record,
            layout.checkpoint_dir,
            saving,
            layout.backup_dir,
            save_freq=save_freq,
            # Kept until metrics.json is written, so a restart
            # between fit and export does not train again.
            delete_checkpoint=False,
        ),
        EpochCheckpoint(strategy, layout, record, task_type, task_id, saving),
        ProgressCallback(strategy, layout, record),
        ScalarLogger(strategy, layout, record),
    ]

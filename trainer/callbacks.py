"""The trainer's Keras callbacks: progress and resume point, epoch checkpoints, TensorBoard
scalars, and backups that land on every epoch's end, in the order :func:`make_callbacks` gives.

This module imports TensorFlow: :func:`trainer.training.fit` imports it once training starts,
so that the trainer's command line answers without loading it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer import jobdir
from trainer.checkpointing import CHECKPOINTS_TO_KEEP, RunRecord, backup_damaged, is_writer, write_scalar
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
        if is_writer(self._strategy):
            jobdir.write_json_atomically(
                self._layout.progress_path,
                {
                    "epochs_completed": epoch + 1,
                    "loss": self._record.epoch_losses[-1],
                    "accuracy": self._record.epoch_accuracies[-1],
                    "time": time.time(),
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


class EpochCheckpoint(keras.callbacks.Callback):  # type: ignore[misc]  # tf-keras is untyped
    """Keeps the last few epochs' weights for evaluation and for rolling back."""

    def __init__(self, strategy: Any, layout: JobLayout, record: RunRecord, task_type: str, task_id: int) -> None:
        super().__init__()
        self._strategy, self._layout, self._task = strategy, layout, (task_type, task_id)
        self._record = record
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
        started = time.perf_counter()
        self._manager.save(checkpoint_number=epoch + 1)
        if not is_writer(self._strategy):
            jobdir.remove_tree_if_exists(self._manager.directory)
        self._record.saving += time.perf_counter() - started


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
    """BackupAndRestore that records the last step a backup covers, and backs up at every
    epoch's end as well as every ``save_freq`` steps.

    tf-keras 2.21 stores the step at which the last train_function call
    *began*; with steps_per_execution > 1 a restart then repeats up to
    steps_per_execution - 1 steps and misses that the epoch had ended.
    Recording the end step before the save fixes both.

    A backup that cannot be read whole (a truncated or corrupt file) ends the run with
    :class:`~trainer.checkpointing.BackupDamaged`, which names the file, instead of
    TensorFlow's traceback.
    """

    # BackupAndRestore's own count of train_function calls since its last backup.
    _batches_count: int

    def __init__(self, record: RunRecord, checkpoint_dir: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._record = record
        self._checkpoint_dir = checkpoint_dir

    def on_train_begin(self, logs: Any = None) -> None:
        try:
            super().on_train_begin(logs)
        except (IndexError, tf.errors.OpError) as error:
            damaged = backup_damaged(self.backup_dir, self._checkpoint_dir)
            if damaged is None:
                raise
            raise damaged from error

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not isinstance(self.model.distribute_strategy, tf.distribute.ParameterServerStrategy):
            self._training_state._ckpt_saved_batch.assign(batch)
        super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        super().on_epoch_end(epoch, logs)
        # Every N steps alone never lands on an epoch's end when N does not divide the
        # epoch: a node lost after two whole epochs of 40 steps, with backups every 200,
        # made every node start over. The last batch's end is also the epoch's end.
        if isinstance(self.save_freq, int) and self._batches_count != 0:
            self._batches_count = 0
            self._training_state._ckpt_saved_batch.assign(self._record.steps_per_epoch - 1)
            self._backup(epoch=epoch, batch=self._record.steps_per_epoch - 1)

    def _backup(self, epoch: int, batch: int = 0) -> None:
        started = time.perf_counter()
        super()._backup(epoch=epoch, batch=batch)
        self._record.saving += time.perf_counter() - started
        # An epoch-end backup (save_freq "epoch") reaches the end of that epoch.
        steps_into_epoch = self._record.steps_per_epoch if self.save_freq == "epoch" else int(batch) + 1
        self._record.backed_up_to_step = int(epoch) * self._record.steps_per_epoch + steps_into_epoch


def make_callbacks(
    strategy: Any, layout: JobLayout, record: RunRecord, save_freq: int | str, task_type: str, task_id: int
) -> list[Any]:
    """Callback order matters: the backup is written before progress reports the epoch."""
    return [
        StepAccurateBackupAndRestore(
            record,
            layout.checkpoint_dir,
            layout.backup_dir,
            save_freq=save_freq,
            # Kept until metrics.json is written, so a restart
            # between fit and export does not train again.
            delete_checkpoint=False,
        ),
        EpochCheckpoint(strategy, layout, record, task_type, task_id),
        ProgressCallback(strategy, layout, record),
        ScalarLogger(strategy, layout, record),
    ]

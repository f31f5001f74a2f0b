"""Surviving restarts: backups, epoch checkpoints, progress, TensorBoard and export.

Who writes is decided by the strategy (``strategy.extended.should_checkpoint``),
never by parsing TF_CONFIG by hand. Saves that involve every worker (MWMS
checkpoints and model export) run everywhere; the non-chief workers write into
their own ``<job-dir>/tmp/<task>`` path, which is removed right after.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from trainer import jobdir
from trainer.jobdir import JobLayout

log = logging.getLogger(__name__)

# Epoch checkpoints kept in <job-dir>/checkpoints (older ones are pruned).
CHECKPOINTS_TO_KEEP = 3


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


@dataclasses.dataclass
class RunRecord:
    """What happened during fit, filled in by ``ProgressCallback``."""

    first_epoch: int | None = None
    first_step: int | None = None
    epochs_completed: int = 0
    epoch_losses: list[float] = dataclasses.field(default_factory=list)
    epoch_accuracies: list[float] = dataclasses.field(default_factory=list)
    epoch_seconds: list[float] = dataclasses.field(default_factory=list)
    epoch_steps: list[int] = dataclasses.field(default_factory=list)
    # Counted in steps of the whole job (epoch * steps_per_epoch + steps into the epoch):
    # where this attempt started (the backup it restored), how far it trained, and how far
    # its latest backup reaches. A lost peer costs the steps between the last two.
    steps_per_epoch: int = 0
    started_at_step: int = 0
    trained_to_step: int = 0
    backed_up_to_step: int = 0


def make_callbacks(
    strategy: Any, layout: JobLayout, record: RunRecord, save_freq: int | str, task_type: str, task_id: int
) -> list[Any]:
    """Callback order matters: the backup is written before progress reports the epoch."""
    import tensorflow as tf
    import tf_keras as keras

    class ProgressCallback(keras.callbacks.Callback):  # type: ignore[misc]  # tf-keras is untyped
        """Records resume point, per-epoch loss and timing; the chief writes progress.json."""

        def __init__(self) -> None:
            super().__init__()
            # Keras then hands over logs as tensors without forcing a sync per batch.
            self._supports_tf_logs = True
            self._epoch = 0
            self._epoch_start = 0.0
            self._epoch_first_step: int | None = None
            self._epoch_last_step = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            # After a restore Keras hands over the epoch and batch as NumPy integers, which
            # metrics.json cannot hold: plain ints from here on.
            epoch = int(epoch)
            if record.first_epoch is None:
                record.first_epoch = epoch
            self._epoch = epoch
            self._epoch_start = time.perf_counter()
            self._epoch_first_step = None

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            batch = int(batch)
            if self._epoch_first_step is None:
                self._epoch_first_step = batch
                if record.first_step is None:
                    record.first_step = batch
                    record.started_at_step = record.backed_up_to_step = self._epoch * record.steps_per_epoch + batch
                    # Either line marks this node's first step, a time a user (or
                    # bench/preemption_recovery.py) can read off the log.
                    if record.first_epoch or batch:
                        log.info("resuming from the backup at epoch %d, step %d", record.first_epoch, batch)
                    else:
                        log.info("training from the start")

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._epoch_last_step = int(batch)
            record.trained_to_step = self._epoch * record.steps_per_epoch + self._epoch_last_step + 1

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            # Keras has synced the logs to Python numbers by now, so this time
            # includes all of the epoch's device work.
            seconds = time.perf_counter() - self._epoch_start
            logs = logs or {}
            first = self._epoch_first_step or 0
            record.epoch_steps.append(self._epoch_last_step - first + 1)
            record.epoch_seconds.append(seconds)
            record.epoch_losses.append(float(logs.get("loss", float("nan"))))
            record.epoch_accuracies.append(float(logs.get("accuracy", float("nan"))))
            record.epochs_completed = epoch + 1
            if is_writer(strategy):
                jobdir.write_json_atomically(
                    layout.progress_path,
                    {
                        "epochs_completed": epoch + 1,
                        "loss": record.epoch_losses[-1],
                        "accuracy": record.epoch_accuracies[-1],
                        "time": time.time(),
                    },
                )

    class EpochCheckpoint(keras.callbacks.Callback):  # type: ignore[misc]  # tf-keras is untyped
        """Keeps the last few epochs' weights for evaluation and for rolling back."""

        def __init__(self) -> None:
            super().__init__()
            self._manager: Any = None

        def on_train_begin(self, logs: Any = None) -> None:
            directory = (
                layout.checkpoint_dir
                if is_writer(strategy)
                else jobdir.join(layout.worker_tmp_dir(task_type, task_id), "checkpoints")
            )
            checkpoint = tf.train.Checkpoint(model=self.model)
            self._manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=CHECKPOINTS_TO_KEEP)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._manager.save(checkpoint_number=epoch + 1)
            if not is_writer(strategy):
                jobdir.remove_tree_if_exists(self._manager.directory)

    class ScalarLogger(keras.callbacks.Callback):  # type: ignore[misc]  # tf-keras is untyped
        """Epoch scalars as TensorBoard event files, written by the chief only.

        Keras' TensorBoard callback needs the ``tensorboard`` package, which
        TensorFlow 2.21 no longer pulls in; ``tf.summary.write`` with the
        scalars plugin's metadata produces the same events from TensorFlow alone.
        """

        def __init__(self) -> None:
            super().__init__()
            self._writer: Any = None

        def on_train_begin(self, logs: Any = None) -> None:
            if is_writer(strategy):
                self._writer = tf.summary.create_file_writer(jobdir.join(layout.log_dir, "train"))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self._writer is None:
                return
            scalars = dict(logs or {})
            if record.epoch_seconds and record.epoch_seconds[-1] > 0:
                scalars["steps_per_second"] = record.epoch_steps[-1] / record.epoch_seconds[-1]
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
        """

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
                self._training_state._ckpt_saved_batch.assign(record.steps_per_epoch - 1)
                self._backup(epoch=epoch, batch=record.steps_per_epoch - 1)

        def _backup(self, epoch: int, batch: int = 0) -> None:
            super()._backup(epoch=epoch, batch=batch)
            # An epoch-end backup (save_freq "epoch") reaches the end of that epoch.
            steps_into_epoch = record.steps_per_epoch if self.save_freq == "epoch" else int(batch) + 1
            record.backed_up_to_step = int(epoch) * record.steps_per_epoch + steps_into_epoch

    return [
        StepAccurateBackupAndRestore(
            layout.backup_dir,
            save_freq=save_freq,
            # Kept until metrics.json is written, so a restart
            # between fit and export does not train again.
            delete_checkpoint=False,
        ),
        EpochCheckpoint(),
        ProgressCallback(),
        ScalarLogger(),
    ]


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

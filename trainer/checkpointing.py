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

"""The job directory: where each output lives, and how a finished job is recognised.

The layout is the contract's (``trainstack_contract.BucketLayout``); the job directory is a
local path or gs://, and every access goes through tf.io.gfile.

Vertex AI's AIP_MODEL_DIR / AIP_CHECKPOINT_DIR / AIP_TENSORBOARD_LOG_DIR replace
the model, checkpoints and logs paths when set.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import tempfile
from typing import Any

from trainer import locations
from trainer.config import ConfigError, TrainerConfig
from trainstack_contract import FINISHED, LAYOUT, node_name


def join(base: str, *parts: str) -> str:
    """Joins with '/', which both local paths and gs:// URLs accept."""
    return posixpath.join(base, *parts)


@dataclasses.dataclass(frozen=True)
class JobLayout:
    root: str
    backup_dir: str
    checkpoint_dir: str
    log_dir: str
    model_dir: str
    tmp_dir: str
    metrics_path: str
    progress_path: str

    @classmethod
    def from_config(cls, config: TrainerConfig) -> JobLayout:
        root = config.job_dir
        return cls(
            root=root,
            backup_dir=join(root, LAYOUT.backup_dir),
            checkpoint_dir=config.checkpoint_dir_override or join(root, LAYOUT.checkpoint_dir),
            log_dir=config.tensorboard_dir_override or join(root, LAYOUT.log_dir),
            model_dir=config.model_dir_override or join(root, LAYOUT.model_dir),
            tmp_dir=join(root, LAYOUT.tmp_dir),
            metrics_path=join(root, LAYOUT.metrics),
            progress_path=join(root, LAYOUT.progress),
        )

    def worker_tmp_dir(self, task_type: str, task_id: int) -> str:
        """A path no other worker writes to, for saves that every worker must run."""
        return join(self.tmp_dir, node_name(task_type, task_id))


def check_job_dir(config: TrainerConfig) -> None:
    """Fails with ConfigError when the job directory can never be written, changing nothing.

    A gs:// URI is checked by name (``reach_remote`` makes the first request); a local path
    must not have a file in the way (``create_local`` finds every other cause)."""
    root = config.job_dir
    if locations.is_remote(root):
        problem = locations.remote_problem(root)
        if problem:
            raise ConfigError(f"--job-dir {root}: {problem}")
        return
    blocker = _file_in_the_way(root)
    if blocker is not None:
        raise ConfigError(f"--job-dir {root}: {blocker} is not a directory")


def create_local(config: TrainerConfig) -> None:
    """Creates a local job directory and writes to it, or fails with ConfigError.

    Found here rather than at the first checkpoint or summary (a TensorFlow traceback): a
    read-only or pseudo file system, missing permissions. It takes a real write: as root,
    access() says yes to directories that still refuse files."""
    root = config.job_dir
    try:
        os.makedirs(root, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as error:
        raise ConfigError(f"--job-dir {root}: cannot create it or write to it: {error.strerror or error}") from None


def _file_in_the_way(path: str) -> str | None:
    """The path, or its nearest existing ancestor, when that is not a directory."""
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
    return None if os.path.isdir(current) else current


def reach_remote(layout: JobLayout, config: TrainerConfig) -> dict[str, Any] | None:
    """The finished marker of a gs:// job dir, read within --storage-timeout-seconds.

    It is the trainer's first request to the bucket: an unreachable or forbidden bucket is
    reported here, within the bound, rather than by a traceback at the first checkpoint."""
    try:
        return locations.bounded(lambda: finished_metrics(layout), config.storage_timeout_seconds, layout.root)
    except locations.StorageError as error:
        raise ConfigError(f"--job-dir {layout.root}: cannot reach it: {error}") from None


def read_json(path: str) -> dict[str, Any] | None:
    """The parsed file, or None if it is missing or half-written."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path, "r") as handle:
            content = json.load(handle)
    except (ValueError, tf.errors.OpError):
        return None
    return content if isinstance(content, dict) else None


def write_json_atomically(path: str, content: dict[str, Any]) -> None:
    """Writes to a temporary name and renames, so readers never see half a file."""
    import tensorflow as tf

    tf.io.gfile.makedirs(posixpath.dirname(path) or ".")
    temporary = f"{path}.tmp"
    with tf.io.gfile.GFile(temporary, "w") as handle:
        json.dump(content, handle, indent=2, sort_keys=True)
        handle.write("\n")
    tf.io.gfile.rename(temporary, path, overwrite=True)


def finished_metrics(layout: JobLayout) -> dict[str, Any] | None:
    """metrics.json of a finished job, or None when the job still has work to do."""
    metrics = read_json(layout.metrics_path)
    if metrics is None or metrics.get("status") != FINISHED:
        return None
    return metrics


def remove_tree_if_exists(path: str) -> None:
    import tensorflow as tf

    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)


def remove_dir_if_empty(path: str) -> None:
    """Drops our scratch parent once no worker uses it; another worker may race us."""
    import tensorflow as tf

    try:
        if tf.io.gfile.isdir(path) and not tf.io.gfile.listdir(path):
            tf.io.gfile.rmtree(path)
    except tf.errors.OpError:
        pass

"""The job directory: where each output lives, and how a finished job is recognised.

The layout is the contract's (``trainer.contract.BucketLayout``); the job directory is a
local path or gs://, and every access goes through tf.io.gfile.

Vertex AI's AIP_MODEL_DIR / AIP_CHECKPOINT_DIR / AIP_TENSORBOARD_LOG_DIR replace
the model, checkpoints and logs paths when set.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import Any

from trainer.config import TrainerConfig
from trainer.contract import FINISHED, LAYOUT, node_name


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

"""What every replica of a job must train with, decided once per job and kept by its resumes.

MultiWorkerMirroredStrategy runs the same step on every worker and all-reduces every
gradient: the workers must agree on the precision policy (mixed_float16 adds a loss-scale
variable, and a bfloat16 and a float32 worker all-reduce tensors of different shapes), the
global batch, the steps per epoch and per execution, XLA, the image size and the classes.
Some of those are measured on the node (``--precision auto`` times a probe on a CPU; XLA
follows the visible GPUs), and a measurement under load can differ from one node to the
next. So each node works out its own choice, the chief's choice is broadcast over the
strategy's own collectives, and every node trains with it; a node whose choice differs logs
it and follows the job.

The decision is recorded beside the backup (``backup/job_settings.json``). A run that
resumes from that backup takes the recorded precision and XLA where its flags leave them to
``auto``, and is refused, naming each difference, when its flags ask for other settings: a
backup restored into another shape fails deep inside TensorFlow, and one restored with
fewer epochs ships an old model as final.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.config import PRECISIONS, ConfigError, TrainerConfig
from trainstack_contract.documents import json_object

log = logging.getLogger(__name__)

# Inside the backup directory, so that it goes when the backup goes (a finished job drops
# both): a record without a backup describes no run to resume.
SETTINGS_FILE = "job_settings.json"
# The record is a few hundred bytes; anything bigger is not ours.
MAX_SETTINGS_BYTES = 16 * 1024
# Precisions a job trains in: what ``auto`` resolves to, as numbers for the broadcast.
CONCRETE_PRECISIONS = tuple(precision for precision in PRECISIONS if precision != "auto")


class SettingsChanged(ConfigError):
    """The flags ask for other settings than the backup this run would resume from."""


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """The settings every replica trains with; the first six are what the chief broadcasts."""

    precision: str
    xla: bool
    steps_per_epoch: int
    steps_per_execution: int
    global_batch: int
    num_classes: int
    model: str
    data: str
    image_size: int
    batch_size_per_replica: int
    replicas: int
    epochs: int
    learning_rate: float
    seed: int
    validation_split: float

    def as_numbers(self) -> list[int]:
        """What the broadcast carries: the settings a node derives rather than reads from its flags."""
        return [
            CONCRETE_PRECISIONS.index(self.precision),
            int(self.xla),
            self.steps_per_epoch,
            self.steps_per_execution,
            self.global_batch,
            self.num_classes,
        ]

    def with_numbers(self, numbers: Sequence[int]) -> JobSettings:
        precision, xla, steps, per_execution, global_batch, classes = numbers
        return dataclasses.replace(
            self,
            precision=CONCRETE_PRECISIONS[precision],
            xla=bool(xla),
            steps_per_epoch=steps,
            steps_per_execution=per_execution,
            global_batch=global_batch,
            num_classes=classes,
        )


# Each setting, the flag a user changes it with (None: derived from the cluster or the data).
FLAG_OF = {
    "precision": "--precision",
    "xla": "--xla",
    "steps_per_epoch": "--steps-per-epoch",
    "steps_per_execution": "--steps-per-execution",
    "global_batch": None,
    "num_classes": "--num-classes",
    "model": "--model",
    "data": "--data",
    "image_size": "--image-size",
    "batch_size_per_replica": "--batch-size-per-replica",
    "replicas": None,
    "epochs": "--epochs",
    "learning_rate": "--learning-rate",
    "seed": "--seed",
    "validation_split": "--validation-split",
}


def differences(recorded: JobSettings, requested: JobSettings) -> list[str]:
    """Each setting the two differ in, as ``--flag NOW (backup: THEN)``."""
    found = []
    for field in dataclasses.fields(JobSettings):
        then, now = getattr(recorded, field.name), getattr(requested, field.name)
        if then != now:
            flag = FLAG_OF[field.name] or field.name.replace("_", " ")
            found.append(f"{flag} {_shown(now)} (backup: {_shown(then)})")
    return found


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def resume_with(config: TrainerConfig, recorded: JobSettings, mine: JobSettings, path: str) -> JobSettings:
    """The settings a resumed run trains with: the recorded ones, where the flags leave the
    choice to ``auto`` or ask for the same; SettingsChanged naming every difference otherwise."""
    requested = dataclasses.replace(
        mine,
        precision=recorded.precision if config.precision == "auto" else mine.precision,
        xla=recorded.xla if config.xla == "auto" else mine.xla,
    )
    changed = differences(recorded, requested)
    if changed:
        raise SettingsChanged(
            f"the backup in {path.rsplit('/', 1)[0]} was made with other settings: {'; '.join(changed)}. "
            "Resume with the backup's settings, or start the job over in a new job directory "
            "(trainstack local: --fresh; on Google Cloud: a new job name)"
        )
    return requested


def parse_record(text: str, path: str) -> JobSettings:
    """A record as written by :func:`write_record`; ConfigError for anything else (a damaged or
    foreign file is not resumed from: the run stops and says how to go on)."""
    problem = f"{path} is not a settings record this trainer wrote"
    if len(text) > MAX_SETTINGS_BYTES:
        raise ConfigError(f"{problem} (over {MAX_SETTINGS_BYTES} bytes); remove the backup to start over")
    content = json_object(text)
    if content is None:
        raise ConfigError(f"{problem} (not a JSON object); remove the backup to start over")
    return _settings_from(content, problem)


def _settings_from(content: Mapping[str, Any], problem: str) -> JobSettings:
    fields = {field.name: field.type for field in dataclasses.fields(JobSettings)}
    if set(content) != set(fields):
        raise ConfigError(f"{problem} (its keys differ from {sorted(fields)}); remove the backup to start over")
    kinds: dict[str, type | tuple[type, ...]] = {"str": str, "bool": bool, "int": int, "float": (int, float)}
    for name, type_name in fields.items():
        value = content[name]
        wanted = kinds[str(type_name)]
        # bool is an int to Python; not here.
        if not isinstance(value, wanted) or (isinstance(value, bool) and type_name != "bool"):
            raise ConfigError(f"{problem} ({name} is {value!r}); remove the backup to start over")
    if content["precision"] not in CONCRETE_PRECISIONS:
        raise ConfigError(f"{problem} (precision {content['precision']!r}); remove the backup to start over")
    return JobSettings(**content)


def log_disagreement(job: JobSettings, mine: JobSettings) -> None:
    """One line when this node would have chosen otherwise: it follows the job all the same."""
    changed = [
        f"{name} {_shown(getattr(mine, name))}"
        for name in ("precision", "xla", "steps_per_epoch", "steps_per_execution", "global_batch", "num_classes")
        if getattr(mine, name) != getattr(job, name)
    ]
    if changed:
        log.warning(
            "this node on its own would train with %s; it follows the job's decision, made once by the chief: "
            "precision %s, xla %s, %d steps per epoch, %d per execution, global batch %d, %d classes",
            ", ".join(changed),
            job.precision,
            _shown(job.xla),
            job.steps_per_epoch,
            job.steps_per_execution,
            job.global_batch,
            job.num_classes,
        )


def record_path(backup_dir: str) -> str:
    return f"{backup_dir.rstrip('/')}/{SETTINGS_FILE}"


def backup_holds_a_checkpoint(backup_dir: str) -> bool:
    """Whether a run would resume: tf-keras' BackupAndRestore restores from ``<backup>/chief``
    on every node, whichever node wrote it."""
    import tensorflow as tf

    return tf.train.latest_checkpoint(f"{backup_dir.rstrip('/')}/chief") is not None


def read_record(backup_dir: str) -> JobSettings | None:
    import tensorflow as tf

    path = record_path(backup_dir)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as handle:
        text = handle.read(MAX_SETTINGS_BYTES + 1)
    return parse_record(text, path)


def write_record(backup_dir: str, settings: JobSettings) -> None:
    from trainer import jobdir

    jobdir.write_json_atomically(record_path(backup_dir), dataclasses.asdict(settings))


def broadcast_from_chief(strategy: Any, numbers: Sequence[int], is_chief: bool) -> list[int]:
    """The chief's ``numbers`` on every worker, through the strategy's own all-reduce: every
    replica of the chief contributes its numbers and every other replica zeros, and the sum
    is divided by the replicas per worker (MultiWorkerMirroredStrategy gives every worker the
    same number of devices)."""
    import tensorflow as tf

    local_replicas = len(strategy.extended.worker_devices)
    # int64 holds any count exactly; collectives on the CPU reduce it like any other dtype.
    mine = tf.constant(list(numbers) if is_chief else [0] * len(numbers), dtype=tf.int64)
    per_replica = strategy.experimental_distribute_values_from_function(lambda context: mine)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    return [int(value) // local_replicas for value in total.numpy()]


def decide(
    config: TrainerConfig, strategy: Any, backup_dir: str, mine: JobSettings, is_chief: bool, broadcast: bool
) -> JobSettings:
    """The job's settings on this node: the backup's record on a resume (SettingsChanged when
    the flags ask for others), else this node's choice; under MultiWorkerMirroredStrategy
    (``broadcast``) the chief's, whatever this node measured. The chief records a new
    decision beside the backup."""
    recorded = read_record(backup_dir) if backup_holds_a_checkpoint(backup_dir) else None
    job = resume_with(config, recorded, mine, record_path(backup_dir)) if recorded else mine
    if broadcast:
        job = job.with_numbers(broadcast_from_chief(strategy, job.as_numbers(), is_chief))
    log_disagreement(job, mine)
    if is_chief and recorded != job:
        write_record(backup_dir, job)
    return job

"""What every kind of imported job file shares: reading it, naming its keys in either spelling,
and choosing a zone that offers its accelerators."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.base.errors import shorten

if TYPE_CHECKING:
    from trainstack.tuning.spec import HyperparameterSpec

MAX_IMPORT_BYTES = 1024 * 1024
DEFAULT_REGION = "us-central1"


class ImportProblem(ValueError):
    """The file cannot become a stack; the message says why."""


@dataclass
class Imported:
    config: dict[str, Any]
    notices: list[str] = field(default_factory=list)
    # The job's hyperparameter tuning spec, when it had one (AI Platform's trainingInput.hyperparameters).
    tuning: HyperparameterSpec | None = None


def get(mapping: Any, *names: str) -> Any:
    """A key in any spelling the service accepts (replica_count / replicaCount)."""
    if not isinstance(mapping, dict):
        return None
    for name in names:
        if name in mapping:
            return mapping[name]
    return None


# The most digits a count in a job file has; larger ones are no count a stack takes.
MAX_DIGITS = 9
DECIMAL = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")


def whole_number(value: Any) -> int | None:
    """An int, or the decimal string the REST APIs write int64 fields as; None for anything else."""
    # ASCII digits only (str.isdigit also takes '²', which int() refuses), and bounded.
    if isinstance(value, str) and DECIMAL.fullmatch(value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**MAX_DIGITS:
        return value
    return None


def job_name_of_stack(stack: str) -> str:
    """A job name (letters, digits and '_', starting with a letter) for an imported job that
    names none: the stack's name, with every other character as '_'."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", stack)
    return name if name[:1].isalpha() else f"job_{name}"


def gpu_name(enum_or_name: str) -> str:
    """A GPU as Compute Engine names it (nvidia-tesla-t4), from either spelling (NVIDIA_TESLA_T4)."""
    return enum_or_name.strip().lower().replace("_", "-")


def read_text(path: Path) -> str:
    """A job file (or a file a saved command line names), through the command line's one bounded
    reader: a regular file (never a FIFO or a device) of at most :data:`MAX_IMPORT_BYTES`."""
    from trainstack.base.files import FileProblem
    from trainstack.base.files import read_text as read_bounded_text

    try:
        return read_bounded_text(path, MAX_IMPORT_BYTES)
    except FileNotFoundError:
        raise ImportProblem(f"{path}: no such file") from None
    except FileProblem as problem:
        raise ImportProblem(f"{path}: {problem}") from None


def parse_document(text: str, path: Path) -> Any:
    """YAML or JSON (JSON is YAML), through the bounded loader: no anchors or aliases, no deep
    nesting, no duplicate keys; the safe loader builds no objects. A value that carries a
    credential is refused (:func:`refuse_credentials`)."""
    from trainstack.base.files import FileProblem, load_yaml

    try:
        document = load_yaml(text)
    except FileProblem as problem:
        text = str(problem)
        if text.startswith("not valid YAML: "):
            text = f"neither YAML nor JSON ({text.removeprefix('not valid YAML: ')})"
        raise ImportProblem(f"{path}: {text}") from None
    refuse_credentials(document, path)
    return document


def read_document(path: Path) -> Any:
    return parse_document(read_text(path), path)


def credential_problem(where: str, value: str, source: str) -> str | None:
    """Why ``value`` (found at ``where``) may not be imported, or None: a value that carries a
    credential, whatever the name it came under, would be written into the stack file and the
    machines' metadata. The value itself is never quoted."""
    from trainstack.base.credentials import credential_kind

    kind = credential_kind(value)
    if kind is None:
        return None
    return (
        f"{where} holds what looks like a credential ({kind}): an import would write it into the stack file and "
        "the machines' metadata; set it as a secret with `pulumi config set --path --secret "
        f"'trainstack:secrets.NAME' VALUE` (the job's code reads $NAME from its environment) and drop it from "
        f"{source}; a value that is no secret (a commit hash) can be written into the stack file after the import"
    )


def refuse_credentials(document: Any, path: Path) -> None:
    """ImportProblem naming every string of ``document`` that carries a credential."""
    problems: list[str] = []
    pending: list[tuple[str, Any]] = [("", document)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, dict):
            pending += [(f"{where}.{key}" if where else str(key), inner) for key, inner in value.items()]
        elif isinstance(value, list):
            pending += [(f"{where}[{index}]", inner) for index, inner in enumerate(value)]
        elif isinstance(value, str) and (problem := credential_problem(where or "the file", value, "the file")):
            problems.append(problem)
    if problems:
        raise ImportProblem(f"{path}: " + "; ".join(sorted(problems)))


def choose_zone(
    region: str, gpus: set[str], tpu: tuple[str, int] | None, machine_types: Iterable[str] = ()
) -> str | None:
    """The first zone of ``region`` (by name) that offers every GPU type, every machine type
    with built-in GPUs among ``machine_types`` (each in its own zones: a2-megagpu-16g is in
    fewer than the A100's other machines) and the TPU slice, per the catalog."""
    from trainstack.catalog import load_catalog

    catalog = load_catalog()
    known = {zone for zones in catalog.gpu_zones.values() for zone in zones}
    known |= {zone for zones in catalog.tpu_zones.values() for zone in zones}
    candidates = {zone for zone in known if zone.rsplit("-", 1)[0] == region}
    for gpu in gpus:
        candidates &= catalog.gpu_zones.get(gpu, frozenset())
    for machine_type in machine_types:
        machine = catalog.machine_types.get(machine_type)
        if machine is not None and machine.builtin_gpu:
            candidates &= catalog.machine_zones(machine_type)
    if tpu is not None:
        candidates &= set(catalog.tpu_zones_for(*tpu))
    return min(candidates) if candidates else None


def without_job_dir(args: list[str], notices: list[str]) -> list[str]:
    """The job's arguments less ``--job-dir``: a stack gives its job a directory in its own bucket."""
    kept: list[str] = []
    dropped: str | None = None
    position = 0
    while position < len(args):
        arg = args[position]
        if arg == "--job-dir" and position + 1 < len(args):
            dropped = args[position + 1]
            position += 2
            continue
        if arg.startswith("--job-dir="):
            dropped = arg.partition("=")[2]
        else:
            kept.append(arg)
        position += 1
    if dropped is not None:
        notices.append(f"--job-dir {dropped} is left out of the job's args: the stack passes its own job directory")
    return kept


# A protobuf Duration in JSON, as AI Platform's scheduling.maxRunningTime and Vertex AI's
# scheduling.timeout are written: seconds with up to nine fractional digits, then "s".
DURATION = re.compile(r"(?P<seconds>[0-9]{1,12})(?:\.(?P<fraction>[0-9]{1,9}))?s")


def run_hours(value: Any, key: str, notices: list[str]) -> float:
    """A job file's run-time cap as a stack's max_run_hours: hours, rounded up to the key's
    step (0.01 h), and within its bounds (Compute Engine's); each change said in a notice."""
    from trainstack.stackmodel.schema import MAX_RUN_HOURS, MIN_RUN_HOURS

    match = DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ImportProblem(f"{key} {shorten(value)} is not a duration: seconds followed by s, such as 7200s")
    seconds = int(match["seconds"]) + (1 if int(match["fraction"] or 0) else 0)
    step = round(MIN_RUN_HOURS * 3600)
    hours: float = math.ceil(seconds / step) * step / 3600
    if seconds % step:
        notices.append(f"{key} {value} rounded up to {hours} h: max_run_hours counts hundredths of an hour")
    if hours < MIN_RUN_HOURS:
        hours = MIN_RUN_HOURS
        notices.append(f"{key} {value} is below Compute Engine's shortest run-time cap: max_run_hours {hours}")
    if hours > MAX_RUN_HOURS:
        hours = MAX_RUN_HOURS
        notices.append(f"{key} {value} is past Compute Engine's longest run-time cap (120 days): max_run_hours {hours}")
    return int(hours) if hours == int(hours) else round(hours, 2)

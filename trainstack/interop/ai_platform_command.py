"""``gcloud ai-platform jobs submit training`` command lines read as the jobs they submitted.

The command's flags are laid over its ``--config`` file as gcloud lays them, and the result is
read as any ``trainingInput`` is (:mod:`trainstack.interop.ai_platform`). Shell variables and
credentials in the command are refused, never expanded or carried into a stack.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.interop.ai_platform import TrainingShape, shape_of
from trainstack.interop.jobfile_reading import (
    ImportProblem,
    credential_problem,
    get,
    job_name_of_stack,
    whole_number,
    without_job_dir,
)
from trainstack_contract.names import JOB_NAME

COMMAND = ("gcloud", "ai-platform", "jobs", "submit", "training")
# Flags that set a trainingInput field directly (gcloud's flag -> the field).
FIELD_FLAGS = {
    "--scale-tier": "scaleTier",
    "--master-machine-type": "masterType",
    "--worker-machine-type": "workerType",
    "--worker-count": "workerCount",
    "--parameter-server-machine-type": "parameterServerType",
    "--parameter-server-count": "parameterServerCount",
    "--region": "region",
    "--job-dir": "jobDir",
    "--runtime-version": "runtimeVersion",
    "--module-name": "pythonModule",
}
ACCELERATOR_FLAGS = {
    "--master-accelerator": "masterConfig",
    "--worker-accelerator": "workerConfig",
    "--parameter-server-accelerator": "parameterServerConfig",
}
IMAGE_FLAGS = {"--master-image-uri": "masterConfig", "--worker-image-uri": "workerConfig"}
OTHER_FLAGS = {"--config", "--package-path", "--packages", "--staging-bucket", "--python-version", "--labels"}
SWITCHES = {"--stream-logs", "--async", "--use-chief-in-tf-config", "--enable-web-access"}
VALUE_FLAGS = {*FIELD_FLAGS, *ACCELERATOR_FLAGS, *IMAGE_FLAGS, *OTHER_FLAGS}
# What a shell would expand in a word: $NAME, ${...}, $1, $@ and the other special parameters.
SHELL_VARIABLE = re.compile(r"\$(?:\{[^}]*\}?|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])")


@dataclass
class CommandLine:
    job_name: str | None
    flags: dict[str, str]
    switches: set[str]
    args: list[str]


def is_command_line(text: str) -> bool:
    """True when the first line that is not a comment starts the gcloud command."""
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return tuple(line.split()[: len(COMMAND)]) == COMMAND
    return False


def parse_command_line(text: str) -> CommandLine:
    """The words of a saved ``gcloud ai-platform jobs submit training`` command, as a shell reads them."""
    # A submit command is a few hundred characters; shlex reads about 50 KB a second.
    if len(text) > MAX_COMMAND_LINE_CHARS:
        raise ImportProblem(f"a saved command line of {len(text)} characters (at most {MAX_COMMAND_LINE_CHARS})")
    # An import reads the command; it never runs any part of it.
    if "$(" in text or "`" in text:
        raise ImportProblem("the command holds a command substitution ($(...) or `...`): an import runs nothing; "
                            "write the value it gave")  # fmt: skip
    # A command saved from a script continues its lines with a backslash; comments start with #.
    try:
        words = shlex.split(re.sub(r"\\\r?\n", " ", text), comments=True)
    except ValueError as error:
        raise ImportProblem(f"the command line does not parse as a shell would read it: {error}") from None
    if tuple(words[: len(COMMAND)]) != COMMAND:
        raise ImportProblem(f"expected a `{' '.join(COMMAND)}` command")
    words = words[len(COMMAND) :]
    if "--" in words:
        split = words.index("--")
        words, args = words[:split], words[split + 1 :]
    else:
        args = []
    job_name: str | None = None
    flags: dict[str, str] = {}
    switches: set[str] = set()
    position = 0
    while position < len(words):
        word = words[position]
        flag, equals, value = word.partition("=")
        if flag in SWITCHES:
            switches.add(flag)
        elif flag in VALUE_FLAGS:
            if not equals:
                position += 1
                if position == len(words):
                    raise ImportProblem(f"{flag} needs a value")
                value = words[position]
            flags[flag] = value
        elif word.startswith("-"):
            raise ImportProblem(
                f"{flag}: not a flag of `gcloud ai-platform jobs submit training` that an import understands; "
                f"known: {', '.join(sorted(VALUE_FLAGS | SWITCHES))}"
            )
        elif job_name is None:
            job_name = word
        else:
            raise ImportProblem(f"{word!r}: a second job name; the job's own arguments go after --")
        position += 1
    return CommandLine(job_name, flags, switches, args)


def _accelerator_flag(flag: str, value: str) -> dict[str, Any]:
    """``count=4,type=nvidia-tesla-t4`` as an acceleratorConfig."""
    parts = dict(part.partition("=")[::2] for part in value.split(","))
    if set(parts) != {"count", "type"} or whole_number(parts["count"]) is None:
        raise ImportProblem(f"{flag} {value!r}: expected count=N,type=GPU (e.g. count=4,type=nvidia-tesla-t4)")
    return {"acceleratorConfig": {"count": int(parts["count"]), "type": parts["type"]}}


# Variable names that hold secrets (WANDB_API_KEY, HF_TOKEN, PULUMI_CONFIG_PASSPHRASE, ...): named
# in the refusal, with the command that sets each as a secret.
SECRET_VARIABLE = re.compile(
    r"(?i).*(PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|APIKEY|(^|_)(API_)?KEYS?(_|$)|(^|_)(AUTH|PAT|PWD|CERT)(_|$)).*"
)
# The most characters a saved command line may hold.
MAX_COMMAND_LINE_CHARS = 64 * 1024


def _words(command: CommandLine) -> list[tuple[str, str]]:
    """(where, value) of every word of the command an import could copy into the stack."""
    words = [("the job name", command.job_name)] if command.job_name else []
    words += [(flag, value) for flag, value in command.flags.items()]
    words += [(f"the job's argument {index} (after --)", arg) for index, arg in enumerate(command.args, start=1)]
    return words


def refuse_variables_and_credentials(command: CommandLine) -> None:
    """ImportProblem naming every shell variable and every credential-bearing value of the command.

    An import takes no value from the environment it runs in: whatever a variable held (a
    database URL with its password, a proxy's) would be written into the stack file and the
    machines' metadata, whatever its name. Each value is written into the command, or the stack,
    by hand; a secret goes into trainstack:secrets. Every problem is reported at once."""
    named = sorted({match.group(0) for _, value in _words(command) for match in SHELL_VARIABLE.finditer(value)})
    problems: list[str] = []
    if named:
        problems.append(
            f"the command uses shell variables ({', '.join(named)}): an import takes no value from this environment "
            "(one could hold a password); write each value into the command, or into the stack file after the "
            "import, and a secret with `pulumi config set --path --secret 'trainstack:secrets.NAME' VALUE`"
        )
    for variable in named:
        name = variable.strip("${}")
        if SECRET_VARIABLE.fullmatch(name):
            problems.append(
                f"{variable} looks like a secret: pass it with `pulumi config set --path --secret "
                f"'trainstack:secrets.{name}' \"${name}\"` (the job's code then reads ${name} from its environment) "
                "and drop it from the command"
            )
    problems += [
        problem
        for where, value in _words(command)
        if (problem := credential_problem(where, value, "the command")) is not None
    ]
    if problems:
        raise ImportProblem("; ".join(problems))


def training_input_of(command: CommandLine, base: Path, notices: list[str]) -> dict[str, Any]:
    """The trainingInput a command line submitted: its --config file, then its flags over it (as gcloud does)."""
    training_input: dict[str, Any] = {}
    if "--config" in command.flags:
        from trainstack.interop.jobfile_reading import read_document

        config_path = base / command.flags["--config"]
        document = read_document(config_path)
        inner = get(document, "trainingInput", "training_input")
        if not isinstance(inner, dict):
            raise ImportProblem(f"--config {command.flags['--config']}: no trainingInput mapping in it")
        training_input.update(inner)
    for flag, key in FIELD_FLAGS.items():
        if flag in command.flags:
            value: Any = command.flags[flag]
            count = whole_number(value) if key.endswith("Count") else None
            training_input[key] = value if count is None else count
    for flag, key in ACCELERATOR_FLAGS.items():
        if flag in command.flags:
            training_input[key] = {**(training_input.get(key) or {}), **_accelerator_flag(flag, command.flags[flag])}
    for flag, key in IMAGE_FLAGS.items():
        if flag in command.flags:
            training_input[key] = {**(training_input.get(key) or {}), "imageUri": command.flags[flag]}
    if command.args:
        training_input["args"] = command.args
    return training_input


def _package_job(command: CommandLine, base: Path, name: str, notices: list[str]) -> dict[str, Any] | None:
    package_path, module = command.flags.get("--package-path"), command.flags.get("--module-name")
    if package_path is None:
        return None
    if module is None:
        raise ImportProblem("--package-path without --module-name: name the module to run (e.g. trainer.task)")
    from trainstack.base.project import PROJECT_ROOT
    from trainstack.jobcode.package import is_project

    directory = (base / package_path).resolve()
    # From the project root, as every path of a stack file: the same on every clone that keeps
    # the team's repository where this one does (beside it, inside it).
    job: dict[str, Any] = {"name": name, "package": os.path.relpath(directory, PROJECT_ROOT), "module": module}
    beside = directory.parent / "requirements.txt"
    if is_project(directory.parent) and beside.is_file() and not beside.is_symlink():
        job["requirements"] = os.path.relpath(beside, PROJECT_ROOT)
        notices.append(
            f"job.requirements: {beside.name} beside the package's {_project_file(directory.parent)} (the nodes "
            "install it before the package; one that pins nothing, trainstack hash-locks)"
        )
    if command.args and (kept := without_job_dir(command.args, notices)):
        job["args"] = kept
    if "--packages" in command.flags:
        notices.append(
            f"--packages {command.flags['--packages']} is not imported: list a package's own requirements in "
            "trainstack:job.requirements"
        )
    return job


def _project_file(directory: Path) -> str:
    from trainstack.jobcode.package import PROJECT_FILES

    return next(name for name in PROJECT_FILES if (directory / name).is_file())


def shape_of_command_line(text: str, base: Path, stack: str, notices: list[str]) -> TrainingShape:
    command = parse_command_line(text)
    if command.job_name and SHELL_VARIABLE.search(command.job_name):
        # A job name built at run time (taxifare_$(date ...), $JOB_NAME): nothing of it is
        # copied, so it takes no value from anywhere; the job is named after the stack.
        notices.append(f"the job name {command.job_name} is not a value: the job is named after the stack")
        command.job_name = None
    refuse_variables_and_credentials(command)
    job_name = command.job_name if command.job_name and JOB_NAME.fullmatch(command.job_name) else None
    if command.job_name and job_name is None:
        notices.append(
            f"the job name {command.job_name!r} is not a valid job name here; the job is named after the stack"
        )
    name = job_name or job_name_of_stack(stack)
    training_input = training_input_of(command, base, notices)
    package_job = _package_job(command, base, name, notices)
    if package_job is not None:
        if get(get(training_input, "masterConfig"), "imageUri"):
            raise ImportProblem("--package-path and --master-image-uri together: a job runs a package or an image")
        training_input.pop("args", None)  # they travel with the package job
    # Without a package or an image the command named no code: the notice above said why.
    shape = shape_of({"trainingInput": training_input}, name, notices, job=package_job, no_code="")
    if shape.job is None and command.args:
        notices.append(f"the job's arguments wait for its code: {shlex.join(command.args)}")
    for flag in ("--python-version", "--staging-bucket", "--labels"):
        if flag in command.flags:
            notices.append(f"{flag} {command.flags[flag]} is not imported: a stack sets its own")
    return shape

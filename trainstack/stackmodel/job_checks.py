"""Checks of a stack's job: which code it runs (the built-in trainer, a team's package or an
image) and that the code is there, the flags the stack sets itself, where the job reads and
writes, and its requirements against what the nodes pin."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.base.errors import Problem
from trainstack.catalog import Catalog
from trainstack.jobcode.node_environment import Pin, cluster_pins, project_conflicts, requirements_file_conflicts
from trainstack.jobcode.package import (
    PROJECT_LAYOUT,
    CodeError,
    CodePackage,
    ExtraRequirements,
    Wheelhouse,
    load_package,
    load_requirements,
    load_wheelhouse,
    misplaced_module,
    missing_package,
    package_layout,
    project_path,
)
from trainstack.stackmodel.naming import NAMESPACE
from trainstack.stackmodel.places import job_places
from trainstack.stackmodel.schema import (
    Job,
    StackConfig,
)
from trainstack.stackmodel.siblings import stack_buckets
from trainstack_contract import (
    EXTERNAL_JOB_DIR,
    LAYOUT,
)


def _check_job_args(job: Job) -> list[Problem]:
    """Flags the stack sets itself may not come again through job.args: for the built-in
    trainer every flag a job key sets, for a team's code only the job directory."""
    reserved = job.reserved_flags
    problems = []
    for index, arg in enumerate(job.args):
        flag = arg.split("=", 1)[0]
        # argparse takes an unambiguous prefix for the whole flag (--job-d for --job-dir),
        # unless the parser forbids it; a team's parser may not, so every prefix is refused.
        meant = [name for name in reserved if flag.startswith("--") and len(flag) > 2 and name.startswith(flag)]
        if meant:
            shown = flag if flag in reserved else f"{flag} (a prefix of {', '.join(meant)}, which argparse expands)"
            problems.append(
                Problem(
                    f"{NAMESPACE}:job.args[{index}]",
                    f"{shown} is set by the stack, not by job.args; use {'; '.join(reserved[name] for name in meant)}",
                )
            )
    return problems


def _check_job(cfg: StackConfig) -> tuple[list[Problem], CodePackage | None, ExtraRequirements | None]:
    """Which code the job runs, and that it is there (before any VM exists, not at boot): the
    job's problems, and the team's package and requirements as read for the check."""
    job = cfg.settings.job
    package: CodePackage | None = None
    requirements: ExtraRequirements | None = None
    if job is None:
        return [], package, requirements
    key = f"{NAMESPACE}:job"
    problems = _check_job_args(job)
    if job.package is not None and job.image is not None:
        return (
            [
                *problems,
                Problem(f"{key}.image", "a job runs either job.package (with job.module) or job.image, not both"),
            ],
            package,
            requirements,
        )
    if not job.builtin:
        own_code = "job.image" if job.image is not None else "job.package"
        problems += [
            Problem(
                f"{key}.{setting}",
                f"configures the built-in trainer, which this job does not run; {own_code} takes its own flags in job.args",
            )
            for setting in job.builtin_settings_set
        ]
    if job.module is not None and job.package is None:
        problems.append(Problem(f"{key}.package", "job.module needs job.package, the directory that holds it"))
    if job.requirements is not None and job.package is None:
        hint = "an image brings its own" if job.image is not None else "they are installed for job.package"
        problems.append(Problem(f"{key}.requirements", f"extra requirements go with job.package; {hint}"))
    if job.package is not None:
        if job.module is None:
            problems.append(
                Problem(f"{key}.module", "required with job.package: the module to run as `python -m MODULE`")
            )
        else:
            source = project_path(job.package)
            if not source.is_dir():
                problems.append(Problem(f"{key}.package", missing_package(source, job.module)))
            elif package_layout(source, job.module) is None:
                wrong, message = misplaced_module(source, job.module)
                problems.append(Problem(f"{key}.{wrong}", message))
            else:
                try:
                    package = load_package(source, job.module)
                except CodeError as error:
                    problems.append(Problem(f"{key}.package", str(error)))
    if job.requirements is not None and job.package is not None:
        try:
            requirements = load_requirements(project_path(job.requirements), project_path(job.package))
        except CodeError as error:
            problems.append(Problem(f"{key}.requirements", str(error)))
    return problems, package, requirements


def check_job_dir(cfg: StackConfig) -> list[Problem]:
    """A job directory (job.job_dir) in a bucket of the team's own: never another stack's bucket
    (what its machines run and its jobs live there), and in the stack's own bucket under jobs/
    alone (beside what its machines run and its notebook's area). The schema already refused
    trainstack/ in any bucket."""
    job = cfg.settings.job
    match = EXTERNAL_JOB_DIR.fullmatch(job.job_dir) if job is not None and job.job_dir is not None else None
    if match is None:
        return []
    key, bucket, prefix = f"{NAMESPACE}:job.job_dir", match["bucket"], match["prefix"]
    own = cfg.bucket_name
    others = {b: stack for b, stack in stack_buckets().items() if stack != cfg.stack and b != own}
    if bucket in others:
        return [
            Problem(
                key,
                f"{match[0]} is in {bucket}, the bucket of the project's stack {others[bucket]}: what its machines "
                "run is there; use a folder of a bucket of the team's own that no stack deploys, or leave "
                f"job.job_dir out for {LAYOUT.jobs}/<name> in this stack's bucket",
            )
        ]
    if bucket == own and not prefix.startswith(f"{LAYOUT.jobs}/"):
        return [
            Problem(
                key,
                f"{match[0]} is in this stack's own bucket outside {LAYOUT.jobs}/ (what its machines run and its "
                f"notebook's area are there); use gs://{own}/{LAYOUT.jobs}/FOLDER, or leave job.job_dir out for "
                f"{LAYOUT.jobs}/<name>",
            )
        ]
    return []


def check_job_places(cfg: StackConfig) -> list[Problem]:
    """What the job reads and writes in Cloud Storage, each place known to be one or the other
    (trainstack.stackmodel.places)."""
    job = cfg.settings.job
    if job is None:
        return []
    job_dir = job.job_dir or LAYOUT.job_dir(f"gs://{cfg.bucket_name}", job.name)
    return job_places(job, job_dir, cfg.bucket_name)[1]


def check_requirements_against_nodes(
    cfg: StackConfig, catalog: Catalog, package: CodePackage | None, requirements: ExtraRequirements | None
) -> list[Problem]:
    """The job's requirements (its file, its project's dependencies) that exclude a version the
    nodes pin: pip would replace TensorFlow on every node, or fail, at boot."""
    pins: list[Pin] = list(cluster_pins()) if cfg.settings.cluster is not None else []
    tpu = cfg.settings.tpu
    runtime = catalog.tpu_runtimes.get(tpu.runtime_version) if tpu is not None else None
    if runtime is not None and runtime.tensorflow_version:
        pins.append(Pin("tensorflow", runtime.tensorflow_version, f"the TPU runtime {runtime.version}"))
    if not pins:
        return []
    key = f"{NAMESPACE}:job"
    problems = []
    if requirements is not None:
        found = requirements_file_conflicts(requirements.path, pins)
        problems += [Problem(f"{key}.requirements", c.message()) for c in found]
    if package is not None and package.layout == PROJECT_LAYOUT:
        problems += [Problem(f"{key}.package", c.message()) for c in project_conflicts(package.source, pins)]
    return problems


def _check_wheelhouse(cfg: StackConfig) -> tuple[list[Problem], Wheelhouse | None]:
    wheelhouse = cfg.settings.storage.wheelhouse
    if wheelhouse is None:
        return [], None
    if cfg.settings.cluster is None and cfg.settings.tpu is None:
        return [
            Problem(f"{NAMESPACE}:storage.wheelhouse", "only a cluster or a TPU VM installs from a wheelhouse")
        ], None
    try:
        return [], load_wheelhouse(project_path(wheelhouse))
    except CodeError as error:
        return [Problem(f"{NAMESPACE}:storage.wheelhouse", str(error))], None


@dataclass(frozen=True)
class JobCodeCheck:
    """The job's problems, and what was read to check them: the team's package (read and
    hashed), its extra requirements, the wheelhouse."""

    problems: list[Problem]
    package: CodePackage | None
    requirements: ExtraRequirements | None
    wheelhouse: Wheelhouse | None


def check_job_code(cfg: StackConfig, catalog: Catalog) -> JobCodeCheck:
    """Which code the job runs and that it is there, where it reads and writes, and that its
    requirements fit what the nodes have installed (before any VM exists, not at boot)."""
    problems, package, requirements = _check_job(cfg)
    problems += check_job_dir(cfg)
    problems += check_job_places(cfg)
    problems += check_requirements_against_nodes(cfg, catalog, package, requirements)
    wheelhouse_problems, wheelhouse = _check_wheelhouse(cfg)
    return JobCodeCheck(problems + wheelhouse_problems, package, requirements, wheelhouse)

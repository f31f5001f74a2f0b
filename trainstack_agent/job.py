"""The command that runs the job's code: ``python -m MODULE`` or the job's image.

Every kind of job gets the same contract: ``--job-dir`` and the stack's arguments, TF_CONFIG
for its role (multi-machine strategies; every tuning trial, with its number in ``task.trial``), the directories Vertex AI names in ``AIP_*``
variables, its own file for cloudml-hypertune's reports (``CLOUD_ML_HP_METRIC_FILE``), its
secrets and the stack's ``job.env`` in the environment. Arguments are a list
handed to the kernel as they are: no shell parses any of them.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainstack_agent.jobuser import JobUser
from trainstack_agent.settings import NodeSettings
from trainstack_contract import (
    FLAGS,
    HYPERTUNE_METRIC_FILE_ENV,
    LAYOUT,
    TPU_NODE_KIND,
    TRIAL_ID_ENV,
    VERTEX_CHECKPOINT_DIR_ENV,
    VERTEX_MODEL_DIR_ENV,
    VERTEX_TENSORBOARD_DIR_ENV,
)
from trainstack_contract.tf_config import trial_tf_config

# A trial's number as `trainstack tune` sets it (1, 2, ...).
TRIAL_NUMBER = re.compile(r"[1-9][0-9]{0,5}")


@dataclass(frozen=True)
class JobCommand:
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    # The container's name for an image job: ending the job removes it too.
    container: str | None = None
    # The unprivileged user it runs as (None: the agent's own user).
    user: JobUser | None = None
    # The sha256 of the code archive it runs (None: no archive): a warm interpreter that
    # rehearsed with one job's code takes only a job of the same code (trainstack_agent.warm).
    code_digest: str | None = None


def vertex_directories(job_dir: str) -> dict[str, str]:
    return {
        VERTEX_MODEL_DIR_ENV: f"{job_dir}/{LAYOUT.model_dir}",
        VERTEX_CHECKPOINT_DIR_ENV: f"{job_dir}/{LAYOUT.checkpoint_dir}",
        VERTEX_TENSORBOARD_DIR_ENV: f"{job_dir}/{LAYOUT.log_dir}",
    }


def free_loopback_port() -> int:
    """A TCP port free on this node's loopback now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def job_tf_config(settings: NodeSettings) -> str | None:
    """The job's TF_CONFIG: the node's in a multi-machine cluster; for a tuning trial (its
    number in the job's CLOUD_ML_TRIAL_ID) with ``task.trial``, a trial on one machine in a
    cluster of that one chief, as AI Platform set it for a master alone."""
    job = settings.job
    assert job is not None
    trial = dict(job.env).get(TRIAL_ID_ENV)
    if trial is None or TRIAL_NUMBER.fullmatch(trial) is None:
        return settings.tf_config
    return trial_tf_config(settings.tf_config, trial, f"localhost:{free_loopback_port()}")


def job_command(
    settings: NodeSettings,
    base_environment: Mapping[str, str],
    python: Path,
    code_dir: Path | None,
    state_dir: Path,
    secrets: Mapping[str, str],
    user: JobUser | None = None,
    metric_file: Path | None = None,
    credentials: Mapping[str, str] | None = None,
) -> JobCommand:
    """``metric_file``: this job's own file for cloudml-hypertune's reports, on this node
    (``CLOUD_ML_HP_METRIC_FILE``; the agent copies it to the job directory); ``credentials``:
    the variables that point its client libraries at its own token (trainstack_agent.jobtoken)."""
    job = settings.job
    assert job is not None
    env = dict(base_environment)
    if job.module is not None:
        # The stack's job.env first: what trainstack sets below wins over it.
        env.update(job.env)
    env.update(vertex_directories(job.job_dir))
    env.pop("TF_CONFIG", None)
    tf_config = job_tf_config(settings)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    # Which node this is (chief, worker-0, ps-1, tpu): the name in status objects and logs.
    env["NODE_NAME"] = settings.node
    env.pop(HYPERTUNE_METRIC_FILE_ENV, None)
    if metric_file is not None:
        env[HYPERTUNE_METRIC_FILE_ENV] = str(metric_file)
    env.update(secrets)
    # After job.env: the job's own credentials, never the node's, whatever it sets.
    credential_names = tuple(credentials or {})
    env.update(credentials or {})
    if job.module is not None:
        # An installed project is importable from the environment; other code from its tree.
        # Nothing else comes before them: a PYTHONPATH the agent inherited (a local run from a
        # checkout) could name trainstack's own `trainer`, which would shadow a team's package
        # of that name, the name every AI Platform sample uses.
        env.pop("PYTHONPATH", None)
        if code_dir is not None:
            env["PYTHONPATH"] = str(code_dir)
        # From the state directory, so nothing in the boot directory shadows the job's code.
        argv = (str(python), "-m", job.module, FLAGS.job_dir, job.job_dir, *job.trainer_args)
        digest = job.code.sha256 if job.code is not None else None
        if user is None:
            return JobCommand(argv, env, state_dir, code_digest=digest)
        # Its own HOME and working directory: nothing of root's (HOME=/root) is named to it.
        env.update(HOME=str(user.home), USER=user.name, LOGNAME=user.name)
        return JobCommand(argv, env, user.workdir, user=user, code_digest=digest)
    assert job.image is not None
    container = f"trainstack-{settings.node}"
    options = ["--rm", "--init", "--name", container, "--network", "host"]
    # --env NAME passes the value from docker's own environment: names only on the command line.
    for name in (
        *vertex_directories(job.job_dir),
        "NODE_NAME",
        *(["TF_CONFIG"] if tf_config is not None else []),
        *([HYPERTUNE_METRIC_FILE_ENV] if metric_file is not None else []),
        *secrets,
        *credential_names,
    ):
        options += ["--env", name]
    # job.env by value, so that none of it changes how the docker client itself runs (it
    # names no GCE_METADATA_* variable: those are reserved, trainstack_contract.jobenv).
    for name, value in job.env:
        options += ["--env", f"{name}={value}"]
    if settings.gpu_count > 0:
        options += ["--gpus", "all"]
    if settings.kind == TPU_NODE_KIND:
        # The TPU devices reach a container only privileged
        # (https://cloud.google.com/tpu/docs/run-in-container: docker run --net=host --privileged).
        options.append("--privileged")
    # A local job directory (trainstack local) is mounted at its own path; a gs:// one the
    # container reaches with the node's credentials, over the host network.
    if not job.job_dir.startswith("gs://"):
        options += ["--volume", f"{job.job_dir}:{job.job_dir}"]
    # The hypertune report's directory (this job's alone) at its own path, so that the variable
    # names the same file inside the container as outside, where the agent copies it from.
    if metric_file is not None:
        options += ["--volume", f"{metric_file.parent}:{metric_file.parent}"]
    if user is not None:
        # The container's code runs as the job's unprivileged user too, with no capability and
        # no way to gain one: reaching its process (the gRPC port on the host network) gives
        # no root. HOME: the image's own (often /root) is not that user's to write.
        options += ["--user", f"{user.uid}:{user.gid}", "--cap-drop", "ALL"]
        options += ["--security-opt", "no-new-privileges", "--env", "HOME=/tmp"]
    argv = ("docker", "run", *options, job.image, FLAGS.job_dir, job.job_dir, *job.trainer_args)
    return JobCommand(argv, env, state_dir, container)

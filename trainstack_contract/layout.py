"""The bucket and the job directory: where the program puts what nodes run, and where jobs write.

Standard library only, Python 3.10.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Final

from trainstack_contract.names import UNDOTTED_BUCKET_NAME

# What trainstack executes from, in its own bucket and in any other: the agent, the job's code
# and requirements, the wheelhouse, the notebook's post-startup script. No job directory and no
# machine's write grant may reach it, in any bucket.
EXECUTED_DIR: Final = "trainstack"
EXECUTED_PREFIX: Final = f"{EXECUTED_DIR}/"


def under_prefix(name: str, prefix: str) -> bool:
    """True when the object name or folder ``name`` is ``prefix`` (a folder, "a/") or lies
    under it: ``trainstack`` and ``trainstack/code`` are under ``trainstack/``, ``trainstackx`` is not."""
    return name == prefix.removesuffix("/") or name.startswith(prefix)


@dataclass(frozen=True)
class BucketLayout:
    """Object names in the stack's bucket, and paths inside a job directory.

    Job directory (a gs:// URI on the cloud, a local path in ``trainstack local``):

        status/job.json      the job's state, written by the chief's boot script (its heartbeat)
        status/<node>.json   each node's state and exit code
        status/settings.json what the job was first started with (module or image, arguments, env)
        backup/              BackupAndRestore state, removed by Keras when training ends
        checkpoints/         weights after every epoch
        logs/                TensorBoard event files
        model/               the exported SavedModel
        progress.json        epochs completed so far
        metrics.json         final metrics; its presence marks the job finished
        tmp/<node>/          scratch paths of non-chief workers
        hypertune/<node>.metrics  the node's cloudml-hypertune reports, copied by its agent
    """

    # In the bucket. Under trainstack/ (EXECUTED_DIR) is what nodes run: only `pulumi up` writes
    # it (a machine's account writes its job directory or its notebook area alone, and every
    # write grant excludes trainstack/ by name), every object is named by its content, and
    # each node checks its sha256, pinned in metadata, before use.
    # The job's code (the built-in trainer or a team's package) and its extra requirements:
    # a code change is a new object, so no node runs stale code.
    code_dir: str = f"{EXECUTED_DIR}/code"
    # The node agent's archive (trainstack_agent, run by every node's boot script).
    agent_dir: str = f"{EXECUTED_DIR}/agent"
    # Wheels a stack ships for nodes to install from instead of a package index
    # (storage.wheelhouse), listed with their digests in a manifest.
    wheelhouse: str = f"{EXECUTED_DIR}/wheelhouse"
    # The hash-locked requirements of the nodes' Python environment (locks/ in the repository).
    python_dir: str = f"{EXECUTED_DIR}/python"
    notebook_dir: str = f"{EXECUTED_DIR}/notebook"
    # Job directories: jobs/<name>, written by the machines that run that job alone.
    jobs: str = "jobs"
    # The notebook's own area: what its account may write (it reads the rest, results included).
    notebooks: str = "notebooks"
    # In a job directory:
    status_dir: str = "status"
    backup_dir: str = "backup"
    checkpoint_dir: str = "checkpoints"
    log_dir: str = "logs"
    model_dir: str = "model"
    tmp_dir: str = "tmp"
    progress: str = "progress.json"
    # What the job was first started with (module or image, arguments, env), written by the chief's
    # agent: a job started again under its name with other settings is refused.
    job_settings: str = "status/settings.json"
    # The finished marker: a job whose metrics file has status FINISHED is not trained again.
    metrics: str = "metrics.json"
    # Each node's copy of the file its job's code wrote through cloudml-hypertune
    # (HYPERTUNE_METRIC_FILE_ENV): hypertune/<node>.metrics, its last whole lines.
    hypertune_dir: str = "hypertune"

    @property
    def job_status(self) -> str:
        """The job's own status object, beside its nodes'."""
        return self.node_status("job")

    def job_dir(self, bucket: str, job_name: str) -> str:
        """``bucket`` is a gs:// URI or, locally, a directory path."""
        return posixpath.join(bucket, self.jobs, job_name)

    def notebook_job_dir(self, bucket: str) -> str:
        """Where the notebook's own runs write: in its area, never a cluster's job directory."""
        return posixpath.join(bucket, self.notebooks, "runs")

    def node_status(self, node: str) -> str:
        return posixpath.join(self.status_dir, f"{node}.json")

    def hypertune_metrics(self, node: str) -> str:
        """Where ``node``'s agent copies its job's hypertune report in the job directory."""
        return posixpath.join(self.hypertune_dir, f"{node}.metrics")

    def code_archive(self, package: str, digest: str) -> str:
        return posixpath.join(self.code_dir, f"{package}-{digest}.zip")

    def code_requirements(self, digest: str) -> str:
        return posixpath.join(self.code_dir, f"requirements-{digest}.txt")

    def agent_archive(self, digest: str) -> str:
        return posixpath.join(self.agent_dir, f"trainstack-agent-{digest}.pyz")

    def wheelhouse_manifest(self, digest: str) -> str:
        return posixpath.join(self.wheelhouse, f"manifest-{digest}.json")

    def python_lock(self, digest: str) -> str:
        return posixpath.join(self.python_dir, f"lock-{digest}.txt")

    def wheel(self, filename: str) -> str:
        return posixpath.join(self.wheelhouse, filename)

    def notebook_script(self, digest: str) -> str:
        return posixpath.join(self.notebook_dir, f"post-startup-{digest}.sh")


LAYOUT: Final = BucketLayout()
# A job directory a stack names itself (job.job_dir, AI Platform's --job-dir) in place of
# jobs/<name> in its own bucket: gs://BUCKET/PREFIX, PREFIX one or more folder names of
# letters, digits and "._=-" (never "." or ".." alone); the nodes get write access under it alone.
EXTERNAL_JOB_DIR: Final = re.compile(
    rf"gs://(?P<bucket>{UNDOTTED_BUCKET_NAME})"
    r"/(?P<prefix>(?!\.{1,2}(?:/|$))[A-Za-z0-9_.=-]{1,200}(?:/(?!\.{1,2}(?:/|$))[A-Za-z0-9_.=-]{1,200}){0,15})"
)
# The ``status`` of a finished job's metrics file.
FINISHED: Final = "finished"

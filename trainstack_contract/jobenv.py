"""The job's environment: the variables trainstack and cloudml-hypertune set for a job, and
what a stack's job.env may add beside them.

Standard library only, Python 3.10.
"""

from __future__ import annotations

import re
from typing import Final

# AI Platform's cloudml-hypertune package (hypertune/hypertune.py in cloudml-hypertune
# 0.1.0.dev6 on PyPI, https://github.com/GoogleCloudPlatform/cloudml-hypertune) writes the
# metric a tuning trial reports to the file this variable names (/tmp/hypertune/output.metrics
# when unset): each report_hyperparameter_tuning_metric() rewrites the whole file with the last
# 100 reports, one JSON object per line (sorted keys: "checkpoint_path", "global_step",
# "timestamp", "trial", and the metric's tag; every value but the timestamp as text). The node
# agent sets it to a file of its own for each job and copies that file to
# LAYOUT.hypertune_metrics(node) in the job directory, at most its last
# MAX_HYPERTUNE_METRICS_BYTES in whole lines.
HYPERTUNE_METRIC_FILE_ENV: Final = "CLOUD_ML_HP_METRIC_FILE"
# What every cloudml-hypertune record holds besides the metric it reports (hypertune.py's
# report_hyperparameter_tuning_metric): the metric is the one other key.
HYPERTUNE_RECORD_KEYS: Final = frozenset({"global_step", "timestamp", "trial", "checkpoint_path"})
# The trial a job is, in hyperparameter tuning (1, 2, ...), as AI Platform and Vertex AI set it
# and cloudml-hypertune reads it ("trial" in its records): `trainstack tune` puts it in each
# trial's job.env; TensorFlow never reads it.
TRIAL_ID_ENV: Final = "CLOUD_ML_TRIAL_ID"
MAX_HYPERTUNE_METRICS_BYTES: Final = 1 << 20


# --- The job's own environment variables (job.env) ---------------------------------------------
# What a stack sets in its job's environment (Vertex AI's container ``env``), beside what
# trainstack sets itself. Names as shells take them; never one that trainstack, Vertex AI or
# TensorFlow's cluster set (TF_CONFIG, NODE_NAME, AIP_*, CLUSTER_SPEC), nor one that changes
# where programs and libraries load from (PATH, PYTHONPATH, LD_*). Not for secrets: those are
# trainstack:secrets, kept in Secret Manager.
JOB_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_JOB_ENV: Final = 64
MAX_JOB_ENV_VALUE_CHARS: Final = 4096
# The whole mapping as instance metadata (JSON), far below Compute Engine's 256 KB per value.
MAX_JOB_ENV_CHARS: Final = 32 * 1024
RESERVED_JOB_ENV_NAMES: Final = frozenset(
    {
        "TF_CONFIG",
        "CLUSTER_SPEC",
        "NODE_NAME",
        HYPERTUNE_METRIC_FILE_ENV,
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "IFS",
        "PS4",
        "BASH_ENV",
        "ENV",
    }
)
# GCE_METADATA_*: where the job's client libraries find its own token (trainstack_agent.jobtoken).
RESERVED_JOB_ENV_PREFIXES: Final = ("AIP_", "TRAINSTACK_", "CLOUDSDK_", "GCE_METADATA_", "LD_", "NVIDIA_", "PYTHON")
# PYTHON* variables that change only how Python reports and buffers, never what it loads.
ALLOWED_PYTHON_ENV: Final = frozenset(
    {
        "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING", "PYTHONUTF8",
    }
)  # fmt: skip


def job_env_problem(name: object, value: object) -> str | None:
    """Why ``name=value`` cannot be in a job's environment, or None. The name is quoted only
    once it matched the pattern; the value never is."""
    if not isinstance(name, str) or JOB_ENV_NAME.fullmatch(name) is None:
        return "a name is letters, digits and '_', not starting with a digit, at most 128 characters"
    if name in RESERVED_JOB_ENV_NAMES or (
        name.startswith(RESERVED_JOB_ENV_PREFIXES) and name not in ALLOWED_PYTHON_ENV
    ):
        return (
            f"{name} is set by trainstack, Vertex AI or the system, or changes what programs load "
            f"(reserved: {', '.join(sorted(RESERVED_JOB_ENV_NAMES))}, and names starting "
            f"{', '.join(RESERVED_JOB_ENV_PREFIXES)} but {', '.join(sorted(ALLOWED_PYTHON_ENV))})"
        )
    if not isinstance(value, str):
        return f"{name}: a value is text"
    if len(value) > MAX_JOB_ENV_VALUE_CHARS or not value.isprintable():
        return f"{name}: a value is printable text of at most {MAX_JOB_ENV_VALUE_CHARS} characters, on one line"
    return None

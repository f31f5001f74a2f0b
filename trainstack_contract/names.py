"""Names the program gives and the nodes read back, each pattern written once.

Every pattern is applied with ``re.fullmatch``: with ``re.match`` and "$" a trailing newline
passes ("j1\\n"), and a name that reaches a path, a shell or a resource name must not.

Standard library only, Python 3.10: it ships to the nodes inside the agent's archive.
"""

from __future__ import annotations

import re
from typing import Final, Literal, get_args

# Job names as AI Platform Training named jobs: letters, digits and underscores, starting with
# a letter, at most 128 characters (https://cloud.google.com/ai-platform/training/docs/managing-models-jobs).
# The stack's job.name, an imported job's name, and the last folder of jobs/<name> a node reads.
JOB_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
# A dotted Python module name, as `python -m` takes it: at most ten identifiers of 100 characters.
MODULE_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}")

# A node's name (chief, worker-0, ps-1, tpu) in status objects, metadata and VM names:
# a lowercase RFC 1035 label.
_NODE: Final = r"[a-z][a-z0-9-]{0,62}"
NODE_NAME: Final = re.compile(_NODE)
# A cluster has at most this many nodes (the stack's bound on workers, parameter servers and a chief).
MAX_NODES: Final = 4096
# Every node of a cluster, "chief worker-0 ...", as a node's metadata lists its peers.
NODE_LIST: Final = re.compile(rf"{_NODE}( {_NODE}){{0,{MAX_NODES - 1}}}")
# "NODE=INSTANCE ...": the chief's Spot peers and their VM names.
NODE_INSTANCE_LIST: Final = re.compile(rf"{_NODE}={_NODE}( {_NODE}={_NODE}){{0,{MAX_NODES - 1}}}")

# Cloud Storage bucket names (https://cloud.google.com/storage/docs/buckets#naming): lowercase
# letters, digits, "-", "_" and ".", a letter or digit at each end; 3-63 characters, or up to
# 222 in dot-separated parts. Each is the text of a pattern (a Python regex and a bash ERE
# alike), for the patterns that hold it.
# Any bucket a user may name (data, a place a job reads or writes), dotted ones included.
ANY_BUCKET_NAME: Final = r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]"
# A bucket of at most 63 characters, as a gs:// URI in a boot script or a node's metadata
# carries the stack's bucket.
GCS_BUCKET_NAME: Final = r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]"
# Without dots: a stack's own bucket, and a job directory it names elsewhere (a dotted name is
# a domain-named bucket, which needs domain verification).
UNDOTTED_BUCKET_NAME: Final = r"[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]"

# A Google Cloud project id: 6 to 30 lowercase letters, digits and hyphens, a letter first.
PROJECT_ID: Final = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]")

# A sha256 in lowercase hex, as the program pins every object a node runs or installs.
SHA256: Final = re.compile(r"[0-9a-f]{64}")

# A wheelhouse holds wheel files only (pip runs no code to install a wheel), named as wheels
# are: the program takes no other file into one, and a node installs no other.
WHEEL_FILE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,200}\.whl")
MAX_WHEELS: Final = 2000


# The roles of a cluster's members: TF_CONFIG's task types.
Role = Literal["chief", "worker", "ps"]
CHIEF: Final = "chief"
WORKER: Final = "worker"
PS: Final = "ps"
ROLES: Final[tuple[str, ...]] = get_args(Role)
# A TF_CONFIG task type that is not a cluster member (the trainer's side-car evaluator).
EVALUATOR: Final = "evaluator"
# Node names of the machines that are not cluster members.
TPU_NODE: Final = "tpu"
NOTEBOOK_NODE: Final = "notebook"


def node_name(role: str, index: int) -> str:
    """A node's name in status objects, logs, local directories and VM names:
    chief (there is one), worker-0, ps-1."""
    return CHIEF if role == CHIEF else f"{role}-{index}"


def vm_name(prefix: str, node: str) -> str:
    """The Compute Engine or TPU name of a node of the stack named ``prefix``."""
    return f"{prefix}-{node}"

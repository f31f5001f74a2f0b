"""The keys the policies check, from trainstack's contract rather than copies of its strings.

The pack ships inside the trainstack checkout and runs in its own environment (its protobuf
pin cannot share the project's). ``trainstack_contract`` is standard-library Python, so the
pack reads it from the checkout it lives in.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
if not (CHECKOUT / "trainstack_contract" / "__init__.py").is_file():
    raise ImportError(f"trainstack_policies: no trainstack_contract in {CHECKOUT}; run the pack from its checkout")
if str(CHECKOUT) not in sys.path:
    sys.path.append(str(CHECKOUT))

from trainstack_contract import EXECUTED_PREFIX, METADATA_KEYS, STACK_LABEL  # noqa: E402
from trainstack_contract.grants import (  # noqa: E402
    MEMBER_KINDS,
    is_submit_grant,
    narrower_than_jobs_area,
    spares_executed,
)
from trainstack_contract.iam import PRIMITIVE_ROLES, STORAGE_WRITE_ROLES  # noqa: E402
from trainstack_contract.policy import PolicyFinding  # noqa: E402

MAX_RUN_SECONDS_KEY = METADATA_KEYS.max_run_seconds

__all__ = [
    "EXECUTED_PREFIX",
    "MAX_RUN_SECONDS_KEY",
    "MEMBER_KINDS",
    "PRIMITIVE_ROLES",
    "STACK_LABEL",
    "STORAGE_WRITE_ROLES",
    "PolicyFinding",
    "is_submit_grant",
    "narrower_than_jobs_area",
    "spares_executed",
]

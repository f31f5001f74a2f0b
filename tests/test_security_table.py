"""docs/security.md's table of who may read and write what in a stack's bucket is what the
program grants (`plan --json`'s bucket_access) and what a job's own token carries."""

from __future__ import annotations

import re
from pathlib import Path

from stack_helpers import base_config, plan_of, write_stack
from trainstack.base.project import PROJECT_ROOT
from trainstack_contract.jobaccess import JobAccess

SECURITY = PROJECT_ROOT / "docs" / "security.md"
MEMBERS = ["user:ana@example.com", "group:ml-team@example.com"]
TEAMMATE = "a `trainstack:access` member"
JOB_CODE = "a job's code (its own token)"
_ACCOUNT = re.compile(r"serviceAccount:(?P<stack>[a-z0-9-]+?)-(?P<kind>train|tpu|nb)@.*")
_UNDER = re.compile(r'(!?)resource\.name\.startsWith\("projects/_/buckets/[^/]+/objects/(?P<prefix>[^"]*)"\)')

Row = tuple[str, str, str]


def documented() -> set[Row]:
    text = SECURITY.read_text()
    table = text[text.index("<!-- bucket-access-table -->") : text.index("<!-- /bucket-access-table -->")]
    rows: set[Row] = set()
    for line in table.splitlines()[3:]:
        who, role, objects = (cell.strip() for cell in line.strip("|").split("|"))
        account = re.match(r"`(<name>-[a-z]+)`", who)
        rows.add((account[1] if account else who, role.strip("`"), objects.strip("`")))
    return rows


def who(member: str) -> str:
    account = _ACCOUNT.fullmatch(member)
    if account is not None:
        return f"<name>-{account['kind']}"
    assert member in MEMBERS, member
    return TEAMMATE


def planned(path: Path) -> set[Row]:
    access = plan_of(path).bucket_access()
    return {(who(g["member"]), g["role"], g["objects"]) for g in access["grants"]}


def token_rows() -> set[Row]:
    rows: set[Row] = set()
    for rule in JobAccess("gs://b/jobs/<job>").rules():
        [permissions] = rule["availablePermissions"]
        terms = [m for m in _UNDER.finditer(rule["availabilityCondition"]["expression"])]
        own = next(m["prefix"] for m in terms if not m[1])
        excluded = [f"{m['prefix']}*" for m in terms if m[1]]
        objects = f"{own}*" + (f" except {', '.join(excluded)}" if excluded else "")
        rows.add((JOB_CODE, permissions.removeprefix("inRole:"), objects))
    return rows


def test_the_security_pages_table_is_what_the_plan_grants_and_the_jobs_token_carries(tmp_path: Path) -> None:
    config = base_config()
    config["trainstack:notebook"] = {"machine_type": "n1-standard-8"}
    config["trainstack:access"] = {"members": MEMBERS}
    grants = planned(write_stack(tmp_path, config)) | planned(PROJECT_ROOT / "stacks" / "Pulumi.tpu.yaml")
    assert documented() == grants | token_rows()

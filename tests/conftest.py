"""Fixtures for the project's tests; the helpers they use live in stack_helpers.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from stack_helpers import SHIPPED_STACKS, plan_for
from trainstack.cloud.planning import Plan
from trainstack_contract.timescale import TIME_SCALE_VARIABLE

# The node agent's waits are sized for Compute Engine (a 20 s settle window after a failed
# step, 10 s between looks at Spot peers, 30 s before a second start call). The local runs
# here talk to stand-ins that answer at once, so they run the same agent with every wait at a
# quarter; tests/agent checks the waits themselves at their real values, against a fake clock.
AGENT_TIME_SCALE = "0.25"

# The tests hold to the shipped catalog: an overlay a `trainstack catalog refresh` left in the
# checkout must not change what they see (tests/test_catalog_refresh.py points it elsewhere).
os.environ["TRAINSTACK_CATALOG"] = "shipped"


@pytest.fixture(autouse=True)
def quicker_agent_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIME_SCALE_VARIABLE, AGENT_TIME_SCALE)


@pytest.fixture(autouse=True)
def wheel_index(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reaches a package index or writes the checkout's .trainstack/: a requirements
    file trainstack locks (trainstack.jobcode.requirements_lock) is resolved offline against
    this test's own folder of wheels (empty unless the test fills it, tests/wheel_index.py),
    and its lock kept in the test's own folder."""
    from trainstack.jobcode import requirements_lock

    # Beside the test's tmp_path, not in it: tests list what they wrote there.
    own = tmp_path_factory.mktemp("locking")
    folder = own / "wheel-index"
    folder.mkdir()
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(folder))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    # The variable too: trainstack commands a test starts read it.
    monkeypatch.setenv(requirements_lock.LOCKS_VARIABLE, str(own / "requirement-locks"))
    monkeypatch.setattr(requirements_lock, "LOCK_DIR", own / "requirement-locks")
    return folder


@pytest.fixture(params=SHIPPED_STACKS)
def shipped_plan(request: pytest.FixtureRequest) -> Plan:
    return plan_for(request.param)


@pytest.fixture(autouse=True)
def job_user_may_enter_tmp_path(request: pytest.FixtureRequest) -> None:
    """Run as root (as CI runs), a local run starts the job's code as an unprivileged user,
    which must pass through the directories above its work directory; pytest makes each
    tmp_path and its parents 0700. They are opened to passing through (o+x), not to listing."""
    if os.geteuid() != 0 or "tmp_path" not in request.fixturenames:
        return
    tmp_path: Path = request.getfixturevalue("tmp_path")
    for directory in (tmp_path, *tmp_path.parents):
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            directory.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)

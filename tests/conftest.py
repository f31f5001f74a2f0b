"""Fixtures for the project's tests; the helpers they use live in stack_helpers.py."""

from __future__ import annotations

import pytest

from stack_helpers import SHIPPED_STACKS, plan_for
from trainstack.plan import Plan


@pytest.fixture(params=SHIPPED_STACKS)
def shipped_plan(request: pytest.FixtureRequest) -> Plan:
    return plan_for(request.param)

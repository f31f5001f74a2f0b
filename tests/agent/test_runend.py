"""When a flex-start node ends its work: its run counted from the machine's first boot, kept
on its disk across guest reboots, and nothing for a node of any other capacity."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agent_fakes import settings
from trainstack_agent.runend import STARTED_FILE, flex_start_end, machine_started

FIRST_BOOT = 1_790_000_000.0
DAY = 86400


def test_the_run_counts_from_the_first_boot_across_reboots(tmp_path: Path) -> None:
    node = replace(settings(node="worker-0"), capacity="flex_start", max_run_seconds=DAY)
    first = flex_start_end(node, tmp_path, FIRST_BOOT, 50.0, 300.0)
    assert first is not None
    assert first.at == 50.0 + DAY - 300.0
    assert "ends at 2026-09-22T14:13:20Z" in first.reason
    assert "24 h after it started" in first.reason
    # A guest reboot an hour later: a new monotonic clock, the same end.
    again = flex_start_end(node, tmp_path, FIRST_BOOT + 3600, 7.0, 300.0)
    assert again is not None
    assert again.at == 7.0 + DAY - 3600 - 300.0


def test_a_damaged_or_future_record_counts_from_now_never_earlier(tmp_path: Path) -> None:
    for text in ("not a time", str(int(FIRST_BOOT) + 10**6), "1" * 40):
        (tmp_path / STARTED_FILE).write_text(text, encoding="ascii")
        assert machine_started(tmp_path, FIRST_BOOT) == FIRST_BOOT
    assert (tmp_path / STARTED_FILE).read_text(encoding="ascii") == str(int(FIRST_BOOT))


def test_only_a_flex_start_node_has_a_run_end(tmp_path: Path) -> None:
    for capacity in (None, "spot", "reservation", "on_demand"):
        node = replace(settings(), capacity=capacity)
        assert flex_start_end(node, tmp_path, FIRST_BOOT, 0.0, 300.0) is None
    assert not (tmp_path / STARTED_FILE).exists()

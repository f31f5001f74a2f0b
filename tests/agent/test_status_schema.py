"""The status objects' schema: what nodes write, peers and `trainstack status` read."""

from __future__ import annotations

import json

import pytest

from trainstack_contract import STATUS_HISTORY_LIMIT
from trainstack_contract.status import (
    CLUSTER_PORT_WARNING,
    MAX_WARNINGS,
    StatusDocument,
    StatusFormatError,
    first_status,
    with_warning,
)

T0 = "2026-11-23T10:00:00.000000Z"
T1 = "2026-11-23T10:00:05.000000Z"


def test_a_status_round_trips_with_its_history() -> None:
    first = first_status("worker-0", "RUNNING", time=T0, incarnation="ab12", attempt=1)
    later = first.then("PREEMPTED", time=T1, incarnation="ab12", attempt=1, reason="SIGTERM")
    again = StatusDocument.from_json(later.to_json())
    assert again == later
    assert [(e.state, e.reason) for e in again.history] == [("RUNNING", None), ("PREEMPTED", "SIGTERM")]


def test_a_repeated_state_adds_no_history_but_a_new_incarnation_does() -> None:
    document = first_status("chief", "RUNNING", time=T0, incarnation="aa")
    document = document.then("RUNNING", time=T1, incarnation="aa", attempt=1)
    assert len(document.history) == 1
    assert document.time == T1
    document = document.then("RUNNING", time=T1, incarnation="bb", attempt=1)
    assert [e.incarnation for e in document.history] == ["aa", "bb"]


def test_the_history_keeps_the_newest_entries_up_to_the_limit() -> None:
    document = first_status("chief", "RUNNING", time=T0, incarnation="aa")
    for number in range(STATUS_HISTORY_LIMIT + 10):
        document = document.then("RUNNING", time=T0, incarnation="aa", attempt=number, reason=f"r{number}")
    assert len(document.history) == STATUS_HISTORY_LIMIT
    assert document.history[-1].reason == f"r{STATUS_HISTORY_LIMIT + 9}"


def test_an_object_written_before_the_node_agent_still_reads() -> None:
    """The boot scripts' shell wrote nanoseconds and no incarnation or attempt."""
    old = {
        "history": [{"state": "RUNNING", "time": "2026-11-20T10:00:00.123456789Z"}],
        "state": "SUCCEEDED",
        "node": "chief",
        "exit_code": 0,
        "time": "2026-11-20T11:00:00.123456789Z",
    }
    document = StatusDocument.from_json(json.dumps(old))
    assert (document.state, document.incarnation, document.attempt) == ("SUCCEEDED", "", 0)
    assert document.moment.microsecond == 123456


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"state": "DONE"}, "state"),
        ({"node": "../x"}, "node"),
        ({"time": "yesterday"}, "time"),
        ({"time": "2026-11-23T10:00:00Z\n"}, "time"),
        ({"exit_code": "0"}, "exit_code"),
        ({"exit_code": True}, "exit_code"),
        ({"attempt": -1}, "attempt"),
        ({"incarnation": "XYZ"}, "incarnation"),
        ({"reason": "x" * 501}, "reason"),
        ({"history": [{"state": "RUNNING"}]}, "time"),
        ({"history": "RUNNING"}, "history"),
        ({"warnings": ["x"]}, "warnings"),
        ({"warnings": {f"w{n}": "x" for n in range(MAX_WARNINGS + 1)}}, "warnings"),
        ({"warnings": {"Bad Name": "x"}}, "warnings"),
        ({"warnings": {"tf_config_ignored": 3}}, "warnings.tf_config_ignored"),
        ({"warnings": {"tf_config_ignored": "x" * 501}}, "warnings.tf_config_ignored"),
    ],
)
def test_a_malformed_field_is_refused_by_name(change: dict[str, object], field: str) -> None:
    document = json.loads(first_status("chief", "RUNNING", time=T0, incarnation="aa").to_json())
    document.update(change)
    with pytest.raises(StatusFormatError, match=field):
        StatusDocument.from_json(json.dumps(document))


@pytest.mark.parametrize("text", ["", "[]", "null", "{", '"RUNNING"'])
def test_what_is_not_an_object_is_refused(text: str) -> None:
    with pytest.raises(StatusFormatError):
        StatusDocument.from_json(text)


def test_a_warning_round_trips_is_carried_through_later_states_and_can_be_withdrawn() -> None:
    document = first_status("worker-0", "RUNNING", time=T0, incarnation="ab12", attempt=1)
    warned = with_warning(document, CLUSTER_PORT_WARNING, "never listened on its TF_CONFIG port")
    assert StatusDocument.from_json(warned.to_json()) == warned
    later = warned.then("SUCCEEDED", time=T1, incarnation="ab12", attempt=1, exit_code=0)
    assert dict(later.warnings) == {CLUSTER_PORT_WARNING: "never listened on its TF_CONFIG port"}
    withdrawn = with_warning(later, CLUSTER_PORT_WARNING, None)
    assert withdrawn.warnings == ()
    assert "warnings" not in json.loads(withdrawn.to_json())


def test_a_warning_is_cut_to_the_bound_and_the_count_is_bounded() -> None:
    document = first_status("chief", "RUNNING", time=T0, incarnation="aa")
    assert len(dict(with_warning(document, "long", "x" * 2000).warnings)["long"]) == 500
    for number in range(MAX_WARNINGS):
        document = with_warning(document, f"w{number}", "x")
    with pytest.raises(ValueError, match="at most"):
        with_warning(document, "one_more", "x")


def test_a_status_without_warnings_reads_as_before_and_old_readers_see_only_a_new_key() -> None:
    """Backwards compatible: objects written before warnings existed read with none, and a
    status with a warning holds every field an earlier reader looks for, unchanged."""
    plain = first_status("chief", "RUNNING", time=T0, incarnation="aa")
    assert StatusDocument.from_json(plain.to_json()).warnings == ()
    warned = json.loads(with_warning(plain, CLUSTER_PORT_WARNING, "x").to_json())
    assert {key: value for key, value in warned.items() if key != "warnings"} == json.loads(plain.to_json())

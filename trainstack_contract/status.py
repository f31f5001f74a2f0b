"""The status objects of a job, as one typed schema.

Every node's agent writes ``status/<node>.json`` in the job directory; the chief's also writes
``status/job.json``, the job's own state, whose ``time`` it refreshes while the job runs (its
heartbeat). The agents read their peers' objects to tell a lost peer from a failed one;
``trainstack status`` and ``trainstack local`` read them to report. All of them go through
:class:`StatusDocument`, so a field is named, typed and bounded in one place.

Objects written by an earlier trainstack (the boot scripts' shell, before the node agent) have
no ``incarnation`` or ``attempt``; they read as incarnation ``""`` and attempt 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Final

from trainstack_contract import STATUS_HISTORY_LIMIT
from trainstack_contract.lifecycle import REPORTED_JOB_STATES
from trainstack_contract.names import MAX_NODES, NODE_NAME

# What a status object may hold: its states (REPORTED_JOB_STATES), a node name or "job", bounded free text.
_INCARNATION_PATTERN: Final = re.compile(r"[0-9a-f]{0,32}")
# 2026-11-23T10:00:05.123456Z; the shell wrote nanoseconds, which read as microseconds.
_TIME_PATTERN: Final = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?Z")
MAX_REASON_CHARS: Final = 500
# A cluster has at most this many nodes (the stack's bound on workers, parameter servers and a chief).
MAX_PEERS: Final = MAX_NODES
# A status object is a few kilobytes at most (50 history entries of bounded size).
MAX_STATUS_BYTES: Final = 256 * 1024
# A node's warnings: what it saw that did not fail the job but should be said (``warnings``,
# by name). Each name is short; at most this many.
MAX_WARNINGS: Final = 8
_WARNING_NAME: Final = re.compile(r"[a-z][a-z0-9_]{0,39}")
# The warning a node records when the job's code never listened on its TF_CONFIG port: it
# ignored TF_CONFIG and trained alone, one copy per node. What a trainer must do instead:
CLUSTER_PORT_WARNING: Final = "tf_config_ignored"
TF_CONFIG_DOCS: Final = "docs/own-code.md#what-a-trainer-must-do"


class StatusFormatError(ValueError):
    """Bytes that are not a status object trainstack writes; the message says which field."""


def _warnings(document: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    value = document.get("warnings") or {}
    if not isinstance(value, dict) or len(value) > MAX_WARNINGS:
        raise StatusFormatError(f"warnings must be an object of at most {MAX_WARNINGS} entries")
    for name, text in value.items():
        if not _WARNING_NAME.fullmatch(name):
            raise StatusFormatError(f"warnings: {name[:40]!r} is not a warning name (a-z, 0-9, _; at most 40)")
        if not isinstance(text, str) or len(text) > MAX_REASON_CHARS:
            raise StatusFormatError(f"warnings.{name} must be text of at most {MAX_REASON_CHARS} characters")
    return tuple(sorted(value.items()))


def utc_now() -> str:
    """The current time as status objects write it."""
    return format_time(datetime.now(timezone.utc))


def format_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """A status time as an aware datetime; StatusFormatError for anything else."""
    match = _TIME_PATTERN.fullmatch(text)
    if match is None:
        raise StatusFormatError(f"time {text[:40]!r} is not a UTC time like 2026-11-23T10:00:05.000000Z")
    fraction = (match[2] or "0")[:6].ljust(6, "0")
    try:
        return datetime.strptime(f"{match[1]}.{fraction}", "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)
    except ValueError as error:
        raise StatusFormatError(f"time {text!r} is not a valid date: {error}") from None


def _text(document: dict[str, Any], key: str, required: bool = True) -> str | None:
    value = document.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise StatusFormatError(f"{key} must be text")
    if len(value) > MAX_REASON_CHARS:
        raise StatusFormatError(f"{key} is longer than {MAX_REASON_CHARS} characters")
    return value


def _state(document: dict[str, Any]) -> str:
    state = _text(document, "state")
    if state not in REPORTED_JOB_STATES:
        raise StatusFormatError(f"state {state!r} is not one of {', '.join(sorted(REPORTED_JOB_STATES))}")
    return state


def _incarnation(document: dict[str, Any]) -> str:
    incarnation = _text(document, "incarnation", required=False) or ""
    if not _INCARNATION_PATTERN.fullmatch(incarnation):
        raise StatusFormatError("incarnation must be up to 32 lowercase hex characters")
    return incarnation


def _peers_down(document: dict[str, Any]) -> tuple[str, ...]:
    peers_down = document.get("peers_down") or []
    if (
        not isinstance(peers_down, list)
        or len(peers_down) > MAX_PEERS
        or not all(isinstance(peer, str) and NODE_NAME.fullmatch(peer) for peer in peers_down)
    ):
        raise StatusFormatError(f"peers_down must be a list of at most {MAX_PEERS} node names")
    return tuple(peers_down)


@dataclass(frozen=True)
class HistoryEntry:
    """One state a node went through: the oldest first in :attr:`StatusDocument.history`."""

    state: str
    time: str
    reason: str | None = None
    incarnation: str = ""

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"state": self.state, "time": self.time}
        if self.reason:
            entry["reason"] = self.reason
        if self.incarnation:
            entry["incarnation"] = self.incarnation
        return entry

    @classmethod
    def from_dict(cls, value: Any) -> HistoryEntry:
        if not isinstance(value, dict):
            raise StatusFormatError("a history entry must be an object")
        time = _text(value, "time")
        assert time is not None
        parse_time(time)
        return cls(_state(value), time, _text(value, "reason", required=False), _incarnation(value))


@dataclass(frozen=True)
class StatusDocument:
    """A node's (or the job's) state, when it was written, by which run of which node's agent.

    ``incarnation`` names one run of a node's agent (a boot): a peer whose incarnation changed
    has rebooted. ``attempt`` counts the trainer starts of that incarnation: a peer whose
    attempt changed has restarted its trainer. Either means this node's collectives broke."""

    state: str
    node: str
    time: str
    incarnation: str = ""
    attempt: int = 0
    exit_code: int | None = None
    reason: str | None = None
    history: tuple[HistoryEntry, ...] = field(default=())
    # The job's status only: the nodes the chief sees down (PREEMPTED or INTERRUPTED, not
    # booted again yet). In a synchronous cluster every node then ends its trainer at once
    # instead of waiting for TensorFlow to notice the lost peer.
    peers_down: tuple[str, ...] = ()
    # What this node saw that the job's state does not say, by name (CLUSTER_PORT_WARNING ...):
    # carried from one status to the next until the node withdraws it. Objects written before
    # it existed have none; readers that predate it ignore it.
    warnings: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "state": self.state,
            "node": self.node,
            "time": self.time,
            "incarnation": self.incarnation,
            "attempt": self.attempt,
            "exit_code": self.exit_code,
        }
        if self.reason:
            document["reason"] = self.reason
        if self.history:
            document["history"] = [entry.to_dict() for entry in self.history]
        if self.peers_down:
            document["peers_down"] = list(self.peers_down)
        if self.warnings:
            document["warnings"] = dict(self.warnings)
        return json.dumps(document)

    @classmethod
    def from_json(cls, data: bytes | str) -> StatusDocument:
        """Parses and checks every field; StatusFormatError names the first bad one."""
        if len(data) > MAX_STATUS_BYTES:
            raise StatusFormatError(f"larger than {MAX_STATUS_BYTES} bytes")
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError) as error:
            raise StatusFormatError(f"not JSON ({error})") from None
        if not isinstance(document, dict):
            raise StatusFormatError("not a JSON object")
        node = _text(document, "node")
        assert node is not None
        if not NODE_NAME.fullmatch(node):
            raise StatusFormatError(f"node {node[:40]!r} is not a node name")
        time = _text(document, "time")
        assert time is not None
        parse_time(time)
        attempt = document.get("attempt", 0)
        exit_code = document.get("exit_code")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or not 0 <= attempt <= 1_000_000:
            raise StatusFormatError("attempt must be a whole number from 0")
        if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
            raise StatusFormatError("exit_code must be a whole number or null")
        history = document.get("history") or []
        if not isinstance(history, list) or len(history) > STATUS_HISTORY_LIMIT:
            raise StatusFormatError(f"history must be a list of at most {STATUS_HISTORY_LIMIT} entries")
        peers_down = _peers_down(document)
        return cls(
            state=_state(document),
            node=node,
            time=time,
            incarnation=_incarnation(document),
            attempt=attempt,
            exit_code=exit_code,
            reason=_text(document, "reason", required=False),
            history=tuple(HistoryEntry.from_dict(entry) for entry in history),
            peers_down=peers_down,
            warnings=_warnings(document),
        )

    @property
    def moment(self) -> datetime:
        return parse_time(self.time)

    def then(
        self,
        state: str,
        *,
        time: str,
        incarnation: str,
        attempt: int,
        exit_code: int | None = None,
        reason: str | None = None,
        peers_down: tuple[str, ...] = (),
    ) -> StatusDocument:
        """The node's next status: this one's history (and warnings) carried on, the new state
        added when it differs (state, reason or incarnation) from the last entry, the oldest
        dropped past :data:`STATUS_HISTORY_LIMIT`."""
        entry = HistoryEntry(state, time, reason, incarnation)
        history = self.history
        last = history[-1] if history else None
        if last is None or (last.state, last.reason, last.incarnation) != (state, reason, incarnation):
            history = (*history, entry)
        return replace(
            self,
            state=state,
            time=time,
            incarnation=incarnation,
            attempt=attempt,
            exit_code=exit_code,
            reason=reason,
            history=history[-STATUS_HISTORY_LIMIT:],
            peers_down=peers_down,
        )


def first_status(
    node: str,
    state: str,
    *,
    time: str,
    incarnation: str,
    attempt: int = 0,
    exit_code: int | None = None,
    reason: str | None = None,
) -> StatusDocument:
    """A node's status with no earlier one: its history starts here."""
    return StatusDocument(state, node, time, incarnation, attempt, exit_code, reason, ()).then(
        state, time=time, incarnation=incarnation, attempt=attempt, exit_code=exit_code, reason=reason
    )


def with_warning(document: StatusDocument, name: str, text: str | None) -> StatusDocument:
    """``document`` with the warning ``name`` set to ``text`` (cut to the bound), or withdrawn
    when ``text`` is None."""
    if not _WARNING_NAME.fullmatch(name):
        raise ValueError(f"warning name {name!r} is not a short lowercase name")
    warnings = dict(document.warnings)
    if text is None:
        warnings.pop(name, None)
    else:
        warnings[name] = text[:MAX_REASON_CHARS]
        if len(warnings) > MAX_WARNINGS:
            raise ValueError(f"a status holds at most {MAX_WARNINGS} warnings")
    return replace(document, warnings=tuple(sorted(warnings.items())))


def recorded_since(document: StatusDocument, state: str, started_at: datetime) -> bool:
    """Whether ``document`` says ``state`` and was written after ``started_at``: what a node
    acts on, where an earlier attempt of the job may have left the same state."""
    return document.state == state and document.moment > started_at

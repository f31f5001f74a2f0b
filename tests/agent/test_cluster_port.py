"""Code that ignores TF_CONFIG: on a node of a multi-node cluster, the agent watches whether the
job's code listens on the node's TF_CONFIG port, and warns (log and status) when it never does.

The decisions run on the fakes (clock, bucket, children) at Compute Engine's timings; the
reading of /proc/net runs against real sockets of real processes."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent_fakes import JOB_DIR, World, settings, world
from trainstack_agent.clusterport import MAX_TABLE_BYTES, own_port, port_listening
from trainstack_agent.settings import NodeSettings
from trainstack_agent.timings import Timings
from trainstack_contract import tf_cluster, tf_config
from trainstack_contract.lifecycle import JobState
from trainstack_contract.status import (
    CLUSTER_PORT_WARNING,
    TF_CONFIG_DOCS,
    StatusDocument,
    first_status,
    with_warning,
)

PORT = 2222
TIMINGS = Timings()
SYNC = ("chief", "worker-0", "worker-1")
ASYNC = ("chief", "worker-0", "ps-0")


class Probe:
    """This node's sockets as the agent reads them: the port listens from ``listens_at``
    (monotonic seconds of the fake clock) on; every read is counted."""

    def __init__(self, listens_at: float | None = None) -> None:
        self.world: World | None = None
        self.listens_at = listens_at
        self.reads: list[float] = []

    def __call__(self, port: int) -> bool | None:
        assert self.world is not None
        assert port == PORT
        now = self.world.clock.now
        self.reads.append(now)
        return self.listens_at is not None and self.listens_at <= now


def watched(
    node_settings: NodeSettings, runs: list[tuple[float, int]], listens_at: float | None = None
) -> tuple[World, Probe]:
    reader = Probe(listens_at=listens_at)
    w = world(node_settings, runs, listening=reader)
    w.peers_running(node_settings)
    reader.world = w
    return w, reader


def warning(document: StatusDocument | None) -> str | None:
    return None if document is None else dict(document.warnings).get(CLUSTER_PORT_WARNING)


def warning_lines(w: World) -> list[str]:
    return [line for line in w.log if line.startswith("WARNING:")]


# --- What TF_CONFIG gives the node ----------------------------------------------------------------
def test_the_port_is_the_one_tf_config_gives_this_nodes_task() -> None:
    cluster = tf_cluster([("chief", "chief.internal:2222"), ("worker", "w0:2223"), ("worker", "w1:2224")])
    assert own_port(tf_config(cluster, "chief", 0)) == 2222
    assert own_port(tf_config(cluster, "worker", 1)) == 2224


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        '{"cluster": {}, "task": {"type": "chief", "index": 0}}',
        '{"cluster": {"worker": ["w0:2222"]}, "task": {"type": "worker", "index": 3}}',
        '{"cluster": {"chief": ["c:99999"]}, "task": {"type": "chief", "index": 0}}',
        '{"cluster": {"chief": ["c:http"]}, "task": {"type": "chief", "index": 0}}',
        '{"cluster": {"chief": [7]}, "task": {"type": "chief", "index": 0}}',
    ],
)
def test_a_tf_config_that_names_no_port_for_this_node_names_none(text: str) -> None:
    assert own_port(text) is None


# --- The decision, on the fakes -----------------------------------------------------------------
@pytest.mark.parametrize("peers", [SYNC, ASYNC])
def test_code_that_listens_on_its_port_joined_the_cluster_and_is_not_warned_about(peers: tuple[str, ...]) -> None:
    w, probe = watched(settings(peers=peers, tf_port=PORT), [(600.0, 0)], listens_at=12.0)
    assert w.agent.run() == 0
    chief = w.status("chief")
    assert chief is not None
    assert chief.state == JobState.SUCCEEDED
    assert warning(chief) is None
    assert warning_lines(w) == []
    assert any("listens on this node's TF_CONFIG port 2222: it joined the cluster" in line for line in w.log)
    # Once it listened, /proc is read no more: about one read a second until then.
    assert max(probe.reads) < 14.0
    assert len(probe.reads) <= 15


@pytest.mark.parametrize("peers", [SYNC, ASYNC])
def test_code_that_never_listens_is_warned_about_after_the_window_while_it_runs(peers: tuple[str, ...]) -> None:
    """The issue's sample: a package that builds no strategy trains alone on every node."""
    w, _ = watched(settings(peers=peers, tf_port=PORT), [(1800.0, 0)])
    seen: dict[str, StatusDocument | None] = {}
    # What `trainstack status` reads just before and just after the window.
    w.clock.at(TIMINGS.cluster_port_window - 2, lambda: seen.update(before=w.status("chief")))
    w.clock.at(TIMINGS.cluster_port_window + 2, lambda: seen.update(after=w.status("chief")))
    assert w.agent.run() == 0
    assert warning(seen["before"]) is None
    during = seen["after"]
    assert during is not None
    assert during.state == JobState.RUNNING
    text = warning(during)
    assert text is not None
    assert "without listening on its TF_CONFIG port 2222" in text
    assert TF_CONFIG_DOCS in text
    assert "each of the 3 nodes trains a model of its own" in text
    # One log line says it, with the pointer; the job still succeeds (a warning, not a refusal).
    [line] = warning_lines(w)
    assert "ignores TF_CONFIG" in line
    assert TF_CONFIG_DOCS in line
    assert "build its strategy from TF_CONFIG" in line
    final = w.status("chief")
    assert final is not None
    assert final.state == JobState.SUCCEEDED
    assert warning(final) == text


def test_reads_of_proc_are_bounded_once_the_code_was_warned_about() -> None:
    w, probe = watched(settings(tf_port=PORT), [(3600.0, 0)])
    w.agent.run()
    window, late = TIMINGS.cluster_port_window, TIMINGS.cluster_port_late_poll
    early_reads = [t for t in probe.reads if t <= window]
    late_reads = [t for t in probe.reads if t > window]
    assert len(early_reads) <= window / TIMINGS.cluster_port_poll + 2
    assert len(late_reads) <= (3600.0 - window) / late + 2


def test_code_that_ends_well_without_ever_listening_is_warned_about_at_its_end() -> None:
    w, _ = watched(settings(node="worker-0", tf_port=PORT), [(50.0, 0)])
    w.put_job_status(JobState.RUNNING)
    w.clock.at(30.0, lambda: w.put_job_status(JobState.RUNNING))
    assert w.agent.run() == 0
    node = w.status("worker-0")
    text = warning(node)
    assert node is not None
    assert node.state == JobState.SUCCEEDED
    assert text is not None
    assert "ended (exit 0) after 50 s on worker-0 without ever listening" in text
    assert "on its TF_CONFIG port 2222" in text
    assert TF_CONFIG_DOCS in text
    assert len(warning_lines(w)) == 1


def test_a_short_job_that_ends_well_without_listening_is_warned_about_too() -> None:
    """An AI Platform sample that builds no strategy trained 40 epochs on three local nodes in
    about 40 s, and went unreported while the shortest judged run was 60 s."""
    w, _ = watched(settings(tf_port=PORT), [(40.0, 0)])
    w.put_status("worker-0", JobState.RUNNING)
    assert w.agent.run() == 0
    text = warning(w.status("chief"))
    assert text is not None
    assert "ended (exit 0) after 40 s on chief without ever listening" in text


def builtin_trainer(node: NodeSettings) -> NodeSettings:
    assert node.job is not None
    return dataclasses.replace(node, job=dataclasses.replace(node.job, warm_start=True))


def test_the_built_in_trainer_ending_within_its_shortest_judged_run_is_not_judged() -> None:
    """The built-in trainer on a finished job exits before it builds a strategy (a few seconds
    in with a gs:// job directory): that is no sign of ignoring TF_CONFIG."""
    w, _ = watched(builtin_trainer(settings(tf_port=PORT)), [(TIMINGS.cluster_port_min_run - 2, 0)])
    assert w.agent.run() == 0
    assert warning(w.status("chief")) is None
    assert warning_lines(w) == []


def test_code_that_fails_without_ever_listening_is_warned_about_too() -> None:
    """An AI Platform sample that ignores TF_CONFIG FAILED once on three nodes (they raced on
    deleting and writing one output directory) with no warning, and SUCCEEDED once with it."""
    w, _ = watched(settings(tf_port=PORT), [(40.0, 1)])
    w.put_status("worker-0", JobState.RUNNING)
    assert w.agent.run() == 1
    chief = w.status("chief")
    assert chief is not None
    assert chief.state == JobState.FAILED
    text = warning(chief)
    assert text is not None
    assert "ended (exit 1) after 40 s on chief without ever listening on its TF_CONFIG port 2222" in text
    assert "if it builds no strategy from TF_CONFIG, each of the 2 nodes ran the job alone, racing" in text
    assert len(warning_lines(w)) == 1


def test_a_teams_sample_that_trains_a_few_seconds_without_listening_is_warned_about() -> None:
    """An AI Platform sample of 8 epochs ran 7 s here, TensorFlow's import included: judged."""
    w, _ = watched(settings(tf_port=PORT), [(7.0, 0)])
    w.put_status("worker-0", JobState.RUNNING)
    assert w.agent.run() == 0
    text = warning(w.status("chief"))
    assert text is not None
    assert "ended (exit 0) after 7 s on chief without ever listening" in text


def test_code_that_fails_within_the_shortest_judged_run_is_not_judged() -> None:
    """A failure at start (an import error, a bad flag) says more than a port never opened."""
    w, _ = watched(settings(tf_port=PORT), [(TIMINGS.cluster_port_min_run_own_code - 1, 1)])
    w.put_status("worker-0", JobState.RUNNING)
    assert w.agent.run() == 1
    assert warning(w.status("chief")) is None
    assert warning_lines(w) == []


def test_a_single_node_needs_no_cluster_and_proc_is_never_read() -> None:
    w, probe = watched(settings(peers=(), tf_port=PORT), [(1800.0, 0)])
    assert w.agent.run() == 0
    assert probe.reads == []
    assert warning(w.status("chief")) is None
    assert warning_lines(w) == []


def test_a_port_taken_before_the_code_starts_tells_nothing_and_says_so() -> None:
    w, probe = watched(settings(tf_port=PORT), [(1800.0, 0)], listens_at=0.0)
    assert w.agent.run() == 0
    assert warning(w.status("chief")) is None
    assert warning_lines(w) == []
    assert probe.reads == [0.0]
    assert any("is not checked: something on this node already listens on it" in line for line in w.log)


def test_no_proc_to_read_tells_nothing_and_says_so() -> None:
    node_settings = settings(tf_port=PORT)
    w = world(node_settings, [(1800.0, 0)], listening=lambda port: None)
    w.peers_running(node_settings)
    assert w.agent.run() == 0
    assert warning(w.status("chief")) is None
    assert warning_lines(w) == []
    assert any("is not checked: this machine has no /proc/net/tcp" in line for line in w.log)


def test_code_that_listens_after_the_window_has_its_warning_withdrawn() -> None:
    late = TIMINGS.cluster_port_window + 100
    w, _ = watched(settings(tf_port=PORT), [(1800.0, 0)], listens_at=late)
    seen: dict[str, StatusDocument | None] = {}
    w.clock.at(late - 10, lambda: seen.update(warned=w.status("chief")))
    assert w.agent.run() == 0
    assert warning(seen["warned"]) is not None
    final = w.status("chief")
    assert final is not None
    assert warning(final) is None
    assert any("joined the cluster (the warning is withdrawn)" in line for line in w.log)


def test_a_warning_from_an_earlier_boot_is_withdrawn_when_this_boots_code_joins_the_cluster() -> None:
    w, _ = watched(settings(tf_port=PORT), [(600.0, 0)], listens_at=10.0)
    earlier = first_status("chief", JobState.PREEMPTED, time=w.clock.utc_text(), incarnation="0000")
    earlier = with_warning(earlier, CLUSTER_PORT_WARNING, "the job's code ended ... (see docs)")
    w.storage.objects[f"{JOB_DIR}/status/chief.json"] = earlier.to_json().encode()
    assert w.agent.run() == 0
    final = w.status("chief")
    assert final is not None
    assert final.state == JobState.SUCCEEDED
    assert warning(final) is None


def test_a_warning_that_cannot_be_written_is_logged_and_the_job_goes_on() -> None:
    w, _ = watched(settings(tf_port=PORT), [(1800.0, 0)])

    def outage() -> None:
        w.storage.fail_writes = True

    def back() -> None:
        w.storage.fail_writes = False

    w.clock.at(TIMINGS.cluster_port_window - 1, outage)
    w.clock.at(TIMINGS.cluster_port_window + 5, back)
    assert w.agent.run() == 0
    assert len(warning_lines(w)) == 1
    assert any("could not record the warning" in line for line in w.log)


# --- /proc/net, read for real ------------------------------------------------------------------
LISTENER = textwrap.dedent(
    """
    import socket, sys
    family = socket.AF_INET6 if sys.argv[1] == "ipv6" else socket.AF_INET
    server = socket.socket(family)
    server.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
    if sys.argv[2] == "listen":
        server.listen()
    print(server.getsockname()[1], flush=True)
    sys.stdin.read()  # holds the socket until the test ends it
    """
)


@pytest.fixture
def process_with_a_socket() -> Iterator[Callable[[str, str], int]]:
    """A real process that binds a port (and listens on it, or not); returns the port."""
    started: list[subprocess.Popen[str]] = []

    def start(family: str, mode: str) -> int:
        child = subprocess.Popen(
            [sys.executable, "-c", LISTENER, family, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        started.append(child)
        assert child.stdout is not None
        return int(child.stdout.readline())

    yield start
    for child in started:
        child.kill()
        child.wait()


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
@pytest.mark.parametrize(("mode", "listening"), [("listen", True), ("bind", False)])
def test_a_process_that_listens_on_the_port_is_seen_in_proc_and_one_that_only_binds_it_is_not(
    process_with_a_socket: Callable[[str, str], int], family: str, mode: str, listening: bool
) -> None:
    """TensorFlow's gRPC server listens on every interface: IPv6's table holds it as often."""
    port = process_with_a_socket(family, mode)
    assert port_listening(port) is listening


def test_a_connection_from_the_port_is_not_a_listener(process_with_a_socket: Callable[[str, str], int]) -> None:
    server_port = process_with_a_socket("ipv4", "listen")
    with socket.create_connection(("127.0.0.1", server_port)) as connection:
        client_port = connection.getsockname()[1]
        assert port_listening(client_port) is False
        assert port_listening(server_port) is True


def test_a_port_nothing_uses_is_not_listening() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert port_listening(port) is False


def test_without_proc_tables_nothing_can_be_told(tmp_path: Path) -> None:
    assert port_listening(2222, net=tmp_path) is None


def test_a_table_is_read_to_its_bound_where_the_kernel_has_listed_every_listener(tmp_path: Path) -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    listen = "   0: 00000000:08AE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
    other = "   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
    lines = MAX_TABLE_BYTES // len(other) + 10
    (tmp_path / "tcp").write_text(header + listen + other * lines)
    assert port_listening(0x08AE, net=tmp_path) is True
    # A listener the bound does not reach (the kernel lists listeners first, so none is there).
    (tmp_path / "tcp").write_text(header + other * lines + listen)
    assert port_listening(0x08AE, net=tmp_path) is False
    assert port_listening(0x1F90, net=tmp_path) is False
    # Cut short by the bound in its port or its state, a listener's line reads as none.
    for cut in (listen.index(":08AE") + 3, listen.index(" 0A ") + 2):
        filler = "x" * (MAX_TABLE_BYTES - len(header) - cut - 1) + "\n"
        (tmp_path / "tcp").write_text(header + filler + listen[:cut] + "\n" + listen)
        assert port_listening(0x08AE, net=tmp_path) is False


def test_the_status_keeps_the_warning_as_json_the_report_reads() -> None:
    document = with_warning(
        first_status("chief", JobState.RUNNING, time="2026-11-23T10:00:00.000000Z", incarnation="ab"),
        CLUSTER_PORT_WARNING,
        "x",
    )
    assert json.loads(document.to_json())["warnings"] == {CLUSTER_PORT_WARNING: "x"}

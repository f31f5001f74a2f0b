"""Whether the job's code joined its cluster: something listens on this node's TF_CONFIG port.

Code that builds its strategy from TF_CONFIG starts TensorFlow's gRPC server on the address
TF_CONFIG gives this node as it builds it, at the start of the program, and keeps it until it
exits: MultiWorkerMirroredStrategy on the chief and every worker, ParameterServerStrategy on
its coordinator (the chief), and ``tf.distribute.Server`` on its workers and parameter servers.
Code that ignores TF_CONFIG never listens there: each node then trains a model of its own,
and every copy writes the one job directory. AI Platform ran such code the same way, so the
node does too; it says so, in its log and in its status (:data:`CLUSTER_PORT_WARNING`), and
`trainstack status` and `trainstack local` repeat it.

What is read: this network namespace's TCP sockets in LISTEN state, from ``/proc/net/tcp`` and
``/proc/net/tcp6`` (TensorFlow listens on every interface, IPv6's included). The namespace is
the job's: on a VM the host's, which an image job's container shares (``--network host``); in
`trainstack local` the run's, where every node has a port of its own. Any listener on the port
counts, whoever owns it: a container's processes are not the agent's children, and nothing of
trainstack listens there. A port already taken when the code starts leaves nothing to tell,
and the node says so. Each read is bounded; the kernel lists listening sockets first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Final

from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError
from trainstack_agent.settings import NodeSettings
from trainstack_agent.timings import Timings
from trainstack_contract.status import CLUSTER_PORT_WARNING, TF_CONFIG_DOCS
from trainstack_contract.tf_config import TfConfigError, parse_tf_config

# This process's network namespace (/proc/net is a link to /proc/self/net).
PROC_NET: Final = Path("/proc/self/net")
# At most this much of each table is read: about 7,000 sockets of 150 bytes. The kernel lists
# the listening ones before any other, so a busy machine's connections never hide them.
MAX_TABLE_BYTES: Final = 1 << 20
# st in /proc/net/tcp: TCP_LISTEN (include/net/tcp_states.h).
_LISTEN: Final = "0A"
_PORT: Final = re.compile(r"[0-9]{1,5}")
_HEX_PORT: Final = re.compile(r"[0-9A-Fa-f]{4}")


def own_port(tf_config: str) -> int | None:
    """The port TF_CONFIG gives this node's task (``host:port``), or None when it names none."""
    try:
        address = parse_tf_config(tf_config).own_address
    except TfConfigError:
        return None
    if address is None:
        return None
    port = address.rpartition(":")[2]
    if _PORT.fullmatch(port) is None or not 1 <= int(port) <= 65535:
        return None
    return int(port)


def _table(path: Path) -> bytes | None:
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_TABLE_BYTES)
    except OSError:
        return None


def port_listening(port: int, net: Path = PROC_NET) -> bool | None:
    """Whether a TCP socket of this network namespace listens on ``port`` (IPv4 or IPv6);
    None when neither table can be read (no /proc here)."""
    tables = [_table(net / name) for name in ("tcp", "tcp6")]
    if all(table is None for table in tables):
        return None
    for table in tables:
        if table is None:
            continue
        for line in table.decode("ascii", "replace").split("\n"):
            # "  0: 00000000:08AE 00000000:0000 0A ...": slot, local address, remote, state. A
            # line the bound cuts short reads as no listener: its port or state is incomplete.
            fields = line.split()
            if len(fields) < 4 or not fields[0].endswith(":"):
                continue
            local_port = fields[1].rpartition(":")[2]
            if fields[3] == _LISTEN and _HEX_PORT.fullmatch(local_port) and int(local_port, 16) == port:
                return True
    return False


# What a watch has found: still looking, the code listened, it was warned about, or nothing can be told.
WATCHING, LISTENED, WARNED, BLIND = "watching", "listened", "warned", "blind"


class ClusterPortWatch:
    """One start of the job's code on a node of a multi-node cluster: does it listen on the
    node's TF_CONFIG port? It warns (log and status) when the code has run
    :attr:`Timings.cluster_port_window` without listening, or ends, well or not, after at least
    :attr:`Timings.cluster_port_min_run_own_code` (the built-in trainer's:
    :attr:`Timings.cluster_port_min_run`) without having listened (nodes that each run the job
    alone race on what they share, so such a job fails as often as not, and the warning says
    why); a code that listens withdraws an earlier warning. Code that ends sooner, or that the
    node ends itself, is not judged: its failure or the lost peer says more."""

    def __init__(
        self,
        port: int,
        settings: NodeSettings,
        board: Board,
        probe: Callable[[int], bool | None],
        timings: Timings,
        log: Callable[[str], None],
    ) -> None:
        self.port = port
        self.node = settings.node
        self.nodes = len(settings.peers)
        self.board = board
        self.probe = probe
        self.timings = timings
        self.log = log
        self.state = WATCHING
        # The built-in trainer on a finished job exits before it builds its strategy, a few
        # seconds in with a gs:// job directory; a team's code that trains anything runs longer.
        builtin = settings.job is not None and settings.job.builtin
        self.min_run = timings.cluster_port_min_run if builtin else timings.cluster_port_min_run_own_code
        self.started = 0.0
        self.next_look = 0.0

    def start(self, now: float) -> None:
        """Just before the code starts: the port must be free for a listener to mean the code."""
        self.started = self.next_look = now
        busy = self.probe(self.port)
        if busy is None:
            self._blind("this machine has no /proc/net/tcp to read")
        elif busy:
            self._blind(
                "something on this node already listens on it before the job's code starts (on a standing "
                "node, the warm interpreter that made the built-in trainer's strategy before the job came)"
            )

    def look(self, now: float) -> None:
        """Every tick while the code runs; reads /proc at most every poll interval."""
        if self.state in (LISTENED, BLIND) or now < self.next_look:
            return
        seen = self.probe(self.port)
        if seen is None:
            self._blind("/proc/net/tcp could not be read")
            return
        if seen:
            self.log(
                f"the job's code listens on this node's TF_CONFIG port {self.port}: it joined the cluster"
                + (" (the warning is withdrawn)" if self.state == WARNED else "")
            )
            self.state = LISTENED
            self._record(None)
            return
        if self.state == WATCHING and now - self.started >= self.timings.cluster_port_window:
            self._warn(
                f"the job's code has run {now - self.started:.0f} s on {self.node} without listening on its "
                f"TF_CONFIG port {self.port}: it ignores TF_CONFIG, so each of the {self.nodes} nodes trains "
                "a model of its own instead of one model together"
            )
        late = self.state == WARNED
        self.next_look = now + (self.timings.cluster_port_late_poll if late else self.timings.cluster_port_poll)

    def end(self, now: float, exit_code: int) -> None:
        """The code exited by itself with ``exit_code``."""
        ran = now - self.started
        if self.state != WATCHING or ran < self.min_run:
            return
        said = f"the job's code ended (exit {exit_code}) after {ran:.0f} s on {self.node} without ever listening on "
        if exit_code == 0:
            self._warn(
                f"{said}its TF_CONFIG port {self.port}: it ignored TF_CONFIG, so each of the {self.nodes} nodes "
                "trained a model of its own instead of one model together"
            )
            return
        self._warn(
            f"{said}its TF_CONFIG port {self.port}: if it builds no strategy from TF_CONFIG, each of the "
            f"{self.nodes} nodes ran the job alone, racing the others on whatever they share (an output directory "
            "each deletes and writes), which may be why it failed"
        )

    def _blind(self, why: str) -> None:
        self.state = BLIND
        self.log(f"whether the job's code joins the cluster on TF_CONFIG port {self.port} is not checked: {why}")

    def _warn(self, text: str) -> None:
        self.state = WARNED
        self.log(f"WARNING: {text}; the code must build its strategy from TF_CONFIG (see {TF_CONFIG_DOCS})")
        self._record(f"{text} (see {TF_CONFIG_DOCS})")

    def _record(self, text: str | None) -> None:
        try:
            self.board.set_warning(CLUSTER_PORT_WARNING, text)
        except CloudError as error:
            self.log(f"could not record the warning in {self.board.node_uri(self.node)}: {error}")


def cluster_port_watch(
    settings: NodeSettings,
    board: Board,
    probe: Callable[[int], bool | None],
    timings: Timings,
    log: Callable[[str], None],
) -> ClusterPortWatch | None:
    """A watch for one start of the job's code, on a node of a multi-node TF_CONFIG cluster
    only: one machine needs no cluster."""
    if len(settings.peers) < 2 or settings.tf_config is None:
        return None
    port = own_port(settings.tf_config)
    if port is None:
        return None
    return ClusterPortWatch(port, settings, board, probe, timings, log)

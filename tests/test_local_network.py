"""Where `trainstack local` cannot give its nodes a network namespace of their own, TensorFlow's
gRPC servers (which listen on every interface, whatever TF_CONFIG says) would be reachable from
this machine's network: the run is refused unless told to go on so, and nothing of it listens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# A hang guard, not a measure: without the refusal, the nodes' trainers listen within it.
HANG_SECONDS = 300
# st in /proc/net/tcp: TCP_LISTEN.
LISTEN = "0A"


def is_loopback(address: str) -> bool:
    """A /proc/net/tcp{,6} local address (hex, in the kernel's byte order) on loopback."""
    if len(address) == 8:
        return address[6:8] == "7F"
    ipv4_mapped = address[:24] == "0000000000000000FFFF0000"
    return address == "00000000000000000000000001000000" or (ipv4_mapped and address[30:32] == "7F")


def listeners_beyond_loopback(pid: int) -> list[str]:
    """The sockets process ``pid`` holds that listen on an address other than loopback, read
    from its own network namespace's tables (/proc/PID/net/tcp and tcp6)."""
    proc = Path("/proc") / str(pid)
    try:
        held = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        tables = [(proc / "net" / name).read_text().splitlines()[1:] for name in ("tcp", "tcp6")]
    except OSError:
        return []
    found = []
    for row in (line.split() for table in tables for line in table):
        address, state, inode = row[1].split(":")[0], row[3], row[9]
        if state == LISTEN and f"socket:[{inode}]" in held and not is_loopback(address):
            found.append(row[1])
    return found


def run_processes(workdir: Path) -> list[int]:
    """The processes whose environment names the run's work directory: its nodes' boot
    scripts, agents and trainers."""
    marker = str(workdir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_run_without_a_namespace_of_its_own_is_refused_and_nothing_of_it_listens_beyond_loopback(
    tmp_path: Path,
) -> None:
    """Root without CAP_SYS_ADMIN (as in a default container), where `unshare --net` fails as it
    does for a user who is not root. Defect: the run went on in this machine's network, its
    trainers' gRPC servers listening on every interface, with one note."""
    workdir = tmp_path / "work"
    command = ["setpriv", "--bounding-set", "-sys_admin", "--", sys.executable, "-m", "trainstack", "local"]
    command += ["--stack", "multiworker", "--workdir", str(workdir), "--epochs", "1", "--steps-per-epoch", "5"]
    command += ["--image-size", "32", "--timeout", "120"]
    cli = subprocess.Popen(
        command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    seen: list[str] = []
    deadline = time.monotonic() + HANG_SECONDS
    while cli.poll() is None and not seen and time.monotonic() < deadline:
        seen = [f"{pid}: {address}" for pid in run_processes(workdir) for address in listeners_beyond_loopback(pid)]
        time.sleep(0.2)
    if cli.poll() is None:
        # Not left running by a failing test.
        cli.send_signal(signal.SIGTERM)
    out, err = (text.decode(errors="replace") for text in cli.communicate(timeout=HANG_SECONDS))
    assert seen == [], "the run's processes listen beyond loopback"
    assert cli.returncode == 1, out[-3000:] + err[-3000:]
    assert "listen on every interface" in err, err
    assert "--allow-shared-network" in err, err
    assert "as root" in err, err
    assert run_processes(workdir) == []


def test_a_stand_in_server_never_takes_a_port_tf_config_gave_a_node() -> None:
    """The nodes' TF ports are picked before the stand-ins bind port 0: a stand-in the kernel
    put on one of them is made again, else that node's TensorFlow server could not listen."""
    from trainstack.localrun.spot import clear_of

    class Bound:
        def __init__(self, port: int) -> None:
            self.server_address = ("127.0.0.1", port)
            self.closed = False

        def server_close(self) -> None:
            self.closed = True

    given = iter([42671, 42672, 51000])
    made: list[Bound] = []

    def make() -> Bound:
        made.append(Bound(next(given)))
        return made[-1]

    server = clear_of((42671, 42672), make)  # type: ignore[type-var]
    assert server.server_address[1] == 51000
    assert [bound.closed for bound in made] == [True, True, False]

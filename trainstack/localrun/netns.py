"""A network namespace with nothing but loopback, for the processes of one local run.

TensorFlow's gRPC servers listen on every interface (``0.0.0.0:PORT``, hard-coded in TensorFlow's
``grpc_server_lib``), whatever address TF_CONFIG gives; an unauthenticated TensorFlow worker
service runs whatever graph it is sent. A local run's nodes therefore run in a namespace of
their own whose only interface is loopback: there, every interface is loopback. The run's
stand-ins (the metadata server and the Compute Engine API) open their sockets inside it too,
from a thread that joins the namespace for that moment, so the nodes reach them and nothing
outside does.

Making one takes root (``unshare --net`` and ``setns``); without it the run is refused, unless
told to go on in this machine's own network (:func:`trainstack.localrun.run.loopback_network`).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from trainstack_contract.sessions import ends_with_parent

T = TypeVar("T")
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
# How long the namespace's holder process may take to be in its namespace.
_READY_SECONDS = 5.0


class NamespaceUnavailable(Exception):
    """No namespace can be made here; the message says why."""


class LoopbackNetwork:
    """A namespace held open by a sleeping process; closing it ends the holder (and with the
    last process in it, the namespace)."""

    def __init__(self, holder: subprocess.Popen[bytes]) -> None:
        self.holder = holder
        self.path = f"/proc/{holder.pid}/ns/net"
        # Also when the run is dropped without being closed, and at exit: no holder outlives it.
        self._finalizer = weakref.finalize(self, _end, holder)

    @property
    def proc_net(self) -> Path:
        """The kernel's socket tables of this namespace (``tcp``, ``tcp6``): who owns each connection."""
        return Path(f"/proc/{self.holder.pid}/net")

    @classmethod
    def create(cls) -> LoopbackNetwork:
        if os.geteuid() != 0:
            raise NamespaceUnavailable("a network namespace needs root")
        unshare = shutil.which("unshare")
        if unshare is None or shutil.which("nsenter") is None:
            raise NamespaceUnavailable("unshare and nsenter (util-linux) are not installed")
        # Bound to this process (a `trainstack local` killed outright leaves no holder behind)
        # and holding none of its output: whoever reads the run's output sees it end.
        holder = subprocess.Popen(
            [unshare, "--net", "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=ends_with_parent(os.getpid()),  # noqa: PLW1509 - the prctl must run in the child
        )
        network = cls(holder)
        deadline = time.monotonic() + _READY_SECONDS
        while True:
            try:
                if os.readlink(network.path) != os.readlink("/proc/self/ns/net"):
                    break
            except OSError:
                pass
            if holder.poll() is not None or time.monotonic() > deadline:
                network.close()
                raise NamespaceUnavailable("unshare --net could not make a namespace")
            time.sleep(0.01)
        try:
            network.run_inside(_bring_loopback_up)
        except OSError as error:
            network.close()
            raise NamespaceUnavailable(f"cannot enter the namespace ({error})") from None
        return network

    def run_inside(self, action: Callable[[], T]) -> T:
        """``action()`` in a thread that has joined the namespace: sockets it opens live there."""
        result: list[T] = []
        failure: list[BaseException] = []

        def inside() -> None:
            try:
                descriptor = os.open(self.path, os.O_RDONLY)
                try:
                    libc = ctypes.CDLL(None, use_errno=True)
                    if libc.setns(descriptor, _CLONE_NEWNET) != 0:
                        error = ctypes.get_errno()
                        raise OSError(error, os.strerror(error))
                finally:
                    os.close(descriptor)
                result.append(action())
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                failure.append(error)

        thread = threading.Thread(target=inside, name="netns")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return result[0]

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def close(self) -> None:
        self._finalizer()


def _end(holder: subprocess.Popen[bytes]) -> None:
    if holder.poll() is None:
        holder.kill()
    holder.wait()


def _bring_loopback_up() -> None:
    """A new namespace's loopback interface is down: bring it up (SIOCSIFFLAGS, IFF_UP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        request = struct.pack("16sH14s", b"lo", 0, bytes(14))
        flags = struct.unpack("16sH14s", fcntl.ioctl(handle, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(handle, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, bytes(14)))

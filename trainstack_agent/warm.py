"""A warm interpreter for the built-in trainer's next job on a standing node.

Between a standing cluster's jobs the node has nothing to do; a new trainer process then
spends most of its start importing TensorFlow (5 s of the 14 s from `trainstack local` to the
first step on this project's 2-core machines). So, as soon as a built-in trainer's job has
started (and again once it has ended, if that one is gone), the agent starts the job user's
Python importing TensorFlow at the lowest priority, then waiting on a socket; the next
job of the built-in trainer that would start with the same interpreter, user, working
directory and environment (but for the variables its code reads only once it runs: TF_CONFIG,
NODE_NAME, the ``AIP_*`` directories, the hypertune report file, the code's path) is handed to
it whole through that socket and runs as ``python -m`` would run it. Anything else (a team's code, which may set variables
before it imports TensorFlow; a job with its own env or secrets; a restart) starts a new
interpreter as before. The warm interpreter is a child of the agent like the job's code: it
ends with the agent, and a termination signal or an idle stop ends it.

It is started from the agent's main thread: its PR_SET_PDEATHSIG ends it when the thread
that started it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from trainstack_agent.job import JobCommand
from trainstack_agent.jobscope import JobScope
from trainstack_agent.processes import JobChild, JobLauncher
from trainstack_agent.zygote import BIRTH_SECONDS, LOW_PRIORITY, ForkedChild, Forks
from trainstack_contract import (
    BUILTIN_MODULE,
    HYPERTUNE_METRIC_FILE_ENV,
    ONEDNN_SWITCH,
    REHEARSAL_MODULE,
    REHEARSAL_STRATEGY_MADE,
    TRIAL_ID_ENV,
    VERTEX_CHECKPOINT_DIR_ENV,
    VERTEX_MODEL_DIR_ENV,
    VERTEX_TENSORBOARD_DIR_ENV,
)
from trainstack_contract.tf_config import cluster_key

# What the built-in trainer imports: loaded before the job is known.
PRELOAD = ("tensorflow", "tf_keras")
# Variables a job's code reads once it runs, never while TensorFlow loads: they may differ
# between the warm interpreter's start and its job.
LATE_VARIABLES = frozenset(
    {
        "TF_CONFIG",
        "NODE_NAME",
        "PYTHONPATH",
        # Each job's own hypertune report file (trainstack_agent.hypertune), read at a report.
        HYPERTUNE_METRIC_FILE_ENV,
        # A tuning trial's number: each trial of a study has its own.
        TRIAL_ID_ENV,
        # Where the job's own token is served (trainstack_agent.jobtoken): each job has its
        # own, and TensorFlow and google-auth read them at each call, never at import.
        "GCE_METADATA_HOST",
        "GCE_METADATA_IP",
        VERTEX_MODEL_DIR_ENV,
        VERTEX_CHECKPOINT_DIR_ENV,
        VERTEX_TENSORBOARD_DIR_ENV,
    }
)
# A Unix socket's buffer holds over 200 KiB on Linux: a rehearsal and a job that fit in it
# together are handed over without waiting for the reader (written without blocking).
MAX_HANDOFF_BYTES = 30 * 1024
# How long a job that came while the rehearsal still runs waits for its strategy, then for the
# rest, before it starts in a new process. A strategy is made in seconds once every node takes
# part (a rehearsal that waits for a peer that never comes must not hold the job); the imports
# before it and the model and its traced step after it depend on this node alone, and take
# longer on a loaded machine.
REHEARSAL_WAIT_SECONDS = 20.0
REHEARSAL_REST_SECONDS = 120.0
# What a warm interpreter tells the agent of its rehearsal, a line each: its imports done (the
# rehearsal starts), then (trainer.rehearsal) its strategy made, then how it ended: REHEARSED,
# or "failed: WHY".
IMPORTED = "imported"
REHEARSED = "rehearsed"

# The warm interpreter: imports PRELOAD at the lowest priority (a standing node prepares it
# while a job runs, and the job must not feel it), then reads messages, one JSON line each,
# from the socket named by its first argument. The lowest priority is the importing thread's and
# its process group's (trainstack_agent.zygote.LOW_PRIORITY). The group takes the usual
# priority back as soon as the imports are done: an idle interpreter slows no one, and the job
# then starts without asking for it (asked for when the job came, it held the job's start by
# 0.03 to 0.4 s on a cluster's nodes on one machine: a group at nice 19 waits behind every other
# one for the CPU, and Linux takes one such change in 0.1 s).
#
# A job: it waits for the imports and runs the job as `python -m MODULE ARGS` would. A
# rehearsal first (a job like the one that ended, the trainer's REHEARSAL_MODULE to call): once
# the imports are done it runs the rehearsal in a thread, with the ended job's environment, at
# the usual priority (it runs once this node's job has ended, and the next job waits for it),
# and writes back on the socket IMPORTED, then REHEARSAL_STRATEGY_MADE once its strategy is
# made, then REHEARSED, or "failed: WHY". The agent hands a job to a rehearsed interpreter only
# once it has read REHEARSED, and ends the interpreter otherwise: the wait for the rehearsal is
# the agent's, because TensorFlow holds Python's lock while its strategy waits for the cluster's
# other nodes, and no thread of the interpreter could then keep time. After a rehearsal, the
# modules it imported from the ended job's code are dropped: the job imports its own, which the
# agent checked against its digest. An empty read (the agent ended it without a job) ends it
# quietly.
RUNNER = (
    """\
import importlib, json, os, runpy, sys, threading, time
channel, wait_seconds, preload = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
lock, group = threading.Lock(), {"niced": False, "job": False}
"""
    + LOW_PRIORITY
    + f"IMPORTED, REHEARSED = {IMPORTED!r}, {REHEARSED!r}\n"
    + """\
def load():
    lower_this_thread()
    with lock:
        if not group["job"]:
            group["niced"] = group_nice(19)
    import_all(preload)
    restore_group()
def restore_group():
    with lock:
        if group["niced"]:
            group["niced"] = not group_nice(0)
loader = threading.Thread(target=load, name="trainstack-preload", daemon=True)
loader.start()
source = os.fdopen(channel, "rb")
base_path = list(sys.path)
def next_message():
    line = source.readline()
    return json.loads(line) if line.strip() else None
def enter(message):
    os.environ.clear()
    os.environ.update(message["env"])
    sys.path[:] = base_path
    sys.path[0] = os.getcwd()
    sys.path[1:1] = message["path"]
def say(line):
    print("trainstack warm interpreter: " + line, file=sys.stderr, flush=True)
def tell(line):
    try:
        os.write(channel, (line.replace("\\n", " ") + "\\n").encode())
    except OSError:
        pass
message = next_message()
if message is None:
    os._exit(0)
def to_the_foreground():
    with lock:
        group["job"] = True
    restore_group()
rehearsal, outcome = None, {}
if message.get("rehearse"):
    rehearsal = message
    to_the_foreground()
    loader.join()
    tell(IMPORTED)
    enter(rehearsal)
    def rehearse():
        try:
            outcome["said"] = importlib.import_module(rehearsal["module"]).rehearse(rehearsal["args"], tell)
            say("rehearsed: " + str(outcome["said"]))
        except BaseException as error:
            outcome["error"] = type(error).__name__ + ": " + str(error)[:300]
            say("the rehearsal failed: " + outcome["error"])
        tell("failed: " + outcome["error"] if "error" in outcome else REHEARSED)
    worker = threading.Thread(target=rehearse, name="trainstack-rehearsal", daemon=True)
    worker.start()
    message = next_message()
    if message is None:
        os._exit(0)
to_the_foreground()
loader.join()
if rehearsal is not None:
    # Told it ended well before the job was sent: a moment's wait. Otherwise (an agent that
    # sent it anyway) TensorFlow's state is no job's to inherit: a new interpreter.
    worker.join(wait_seconds)
    if worker.is_alive() or "error" in outcome:
        say("the rehearsal " + ("failed: " + outcome["error"] if "error" in outcome else "did not end in time")
            + "; the job starts in a new interpreter")
        os.execve(sys.executable, [sys.executable, "-m", message["module"], *message["args"]], message["env"])
    roots = tuple(os.path.join(os.path.abspath(entry), "") for entry in rehearsal["path"])
    for name, module in list(sys.modules.items()):
        if roots and (getattr(module, "__file__", None) or "").startswith(roots):
            del sys.modules[name]
    importlib.invalidate_caches()
enter(message)
sys.argv = [message["module"], *message["args"]]
runpy.run_module(message["module"], run_name="__main__", alter_sys=True)
"""
)


def warm_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What a job's environment must equal, late variables aside, to run in a warm interpreter
    started with this one: the built-in trainer's own oneDNN default included, which it sets
    before TensorFlow loads (trainer.kernels)."""
    warm = {name: value for name, value in env.items() if name not in LATE_VARIABLES}
    warm.setdefault(ONEDNN_SWITCH, "1")
    return warm


def builtin_module(command: JobCommand) -> str | None:
    """The module of a `python -m` command of the built-in trainer; None for anything else."""
    argv = command.argv
    if command.container is not None or len(argv) < 3 or argv[1] != "-m" or argv[2] != BUILTIN_MODULE:
        return None
    return argv[2]


@dataclass(frozen=True)
class Rehearsal:
    """What a warm interpreter rehearsed with: the cluster its strategy is bound to (empty: none)
    and the code it imported. Only a job of the same cluster and code may take it."""

    cluster: str
    code_digest: str


@dataclass
class RehearsalReports:
    """What a warm interpreter says of its rehearsal on its socket (``channel``), a line each:
    its imports done, its strategy made, then how it ended."""

    channel: int
    said: list[str] = field(default_factory=list)

    def ending(self) -> str | None:
        return next((line for line in self.said if line not in (IMPORTED, REHEARSAL_STRATEGY_MADE)), None)

    def listen(self, seconds: float) -> None:
        """Reads what the interpreter says in ``seconds`` at most."""
        if self.ending() is None and select.select([self.channel], [], [], seconds)[0]:
            try:
                lines = os.read(self.channel, 4096).decode(errors="replace").splitlines()
            except OSError as error:
                lines = [f"failed: {error}"]
            self.said += [line.strip() for line in lines if line.strip()] or ["failed: the interpreter ended"]

    def heard(self, said: str | None) -> bool:
        """Whether it has said ``said`` (None: how its rehearsal ended), or ended it."""
        return self.ending() is not None or (said is not None and said in self.said)

    def until(self, said: str | None, seconds: float) -> bool:
        """Whether the interpreter says ``said`` (as :meth:`heard`) within ``seconds``; with 0,
        from what it has said so far."""
        deadline = time.monotonic() + seconds
        while not self.heard(said):
            left = max(0.0, deadline - time.monotonic())
            self.listen(left)
            if left == 0.0:
                return self.heard(said)
        return True

    def problem(self, wait: float, rest: float = 0.0) -> str | None:
        """None once the rehearsal has ended well; what went wrong if it failed, or did not end
        in time (its interpreter is then no job's to take): ``rest`` seconds for each part that
        depends on this node alone (its imports; the model and its traced step), ``wait`` for
        the strategy, which waits for every node."""
        if not self.until(IMPORTED, rest):
            return f"its imports did not end in {rest:g} s"
        if not self.until(REHEARSAL_STRATEGY_MADE, wait):
            return f"its rehearsal made no strategy in {wait:g} s: a node did not take part"
        if not self.until(None, rest):
            return f"its rehearsal did not end in {rest:g} s after its strategy was made"
        ending = self.ending()
        return None if ending == REHEARSED else f"its rehearsal {ending}"

    def failed(self) -> bool:
        """Whether it has said its rehearsal failed."""
        return self.until(None, 0) and self.ending() != REHEARSED


@dataclass
class _Warm:
    child: JobChild
    # The agent's end of the socket the interpreter reads its messages from and writes what
    # became of its rehearsal to.
    channel: int
    python: str
    cwd: str
    user: object
    env: dict[str, str]
    rehearsal: Rehearsal | None = None
    reports: RehearsalReports = field(init=False)

    def __post_init__(self) -> None:
        self.reports = RehearsalReports(self.channel)

    def matches(self, command: JobCommand) -> bool:
        if self.rehearsal is not None and (
            command.code_digest != self.rehearsal.code_digest
            or cluster_key(command.env.get("TF_CONFIG")) != self.rehearsal.cluster
        ):
            return False
        return (
            command.argv[0] == self.python
            and str(command.cwd) == self.cwd
            and command.user == self.user
            and warm_environment(command.env) == self.env
        )

    def alive(self) -> bool:
        return self.child.poll() is None

    def end(self) -> None:
        """Ends the interpreter. One whose rehearsal did not end well may be stuck in TensorFlow
        (which may keep SIGTERM for itself) and hold the cluster's port the job's new process
        needs: at once."""
        stuck = self.rehearsal is not None and self.alive() and self.reports.problem(0, 0) is not None
        with contextlib.suppress(OSError):  # closed already
            os.close(self.channel)
        self.child.stop(grace=0 if stuck else None)

    def send(self, message: dict[str, object]) -> str | None:
        """Writes one message; what went wrong, or None. Never blocks: a reader that does not
        read leaves the job to a new interpreter."""
        payload = json.dumps(message).encode() + b"\n"
        if len(payload) > MAX_HANDOFF_BYTES:
            return f"{len(payload)} bytes of settings, over {MAX_HANDOFF_BYTES}"
        try:
            os.set_blocking(self.channel, False)
            written = os.write(self.channel, payload)
        except OSError as error:
            return str(error)
        return None if written == len(payload) else "the socket's buffer is full"

    def take(self, module: str, command: JobCommand, scope: JobScope) -> str | None:
        """Hands ``command`` over; what went wrong. The interpreter joins the job's cgroup
        while it still waits: whatever it starts is the job's."""
        forked = self.child.child
        if isinstance(forked, ForkedChild) and not forked.born(BIRTH_SECONDS):
            scope.end()
            return "the zygote did not fork it in time"
        scope.adopt(forked.pid)
        self.child.scope = scope
        problem = self.send(_message(module, command, {**command.env, **scope.env}))
        if problem is None:
            with contextlib.suppress(OSError):
                os.close(self.channel)
        return problem

    def rehearse(self, last: JobCommand, code_digest: str) -> str | None:
        """Hands over the ended job's command to rehearse (trainer.rehearsal); what went wrong."""
        problem = self.send({"rehearse": True, **_message(REHEARSAL_MODULE, last, last.env)})
        if problem is None:
            self.rehearsal = Rehearsal(cluster_key(last.env.get("TF_CONFIG")), code_digest)
        return problem

    def holds_cluster_apart_from(self, command: JobCommand) -> bool:
        """Rehearsed for a cluster whose port ``command``, a job of this node alone, leaves free:
        it may wait for the cluster's next job while that one runs."""
        return (
            self.alive()
            and self.rehearsal is not None
            and bool(self.rehearsal.cluster)
            and not cluster_key(command.env.get("TF_CONFIG"))
        )


def _message(module: str, command: JobCommand, env: Mapping[str, str]) -> dict[str, object]:
    code_path = [entry for entry in command.env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    return {"module": module, "args": list(command.argv[3:]), "env": dict(env), "path": code_path}


def runner_arguments(preload: Sequence[str], rehearsal_wait: float = REHEARSAL_WAIT_SECONDS) -> tuple[str, ...]:
    """RUNNER's arguments after its channel."""
    return (f"{rehearsal_wait:g}", *preload)


def _new_warm(forks: Forks, template: JobCommand, stop_grace: float) -> _Warm:
    """A warm interpreter for jobs like ``template``, and the agent's end of its socket."""
    env = warm_environment(template.env)
    ours, theirs = socket.socketpair()
    try:
        child = forks.interpreter(template.argv[0], template.cwd, template.user, env, theirs.fileno())
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return _Warm(
        JobChild(child, None, stop_grace), ours.detach(), template.argv[0], str(template.cwd), template.user, env
    )


class WarmStarts:
    """The job launcher of a standing node: a warm interpreter for the built-in trainer's next
    job when one matches, a new process otherwise (the launcher's own start)."""

    def __init__(
        self,
        launcher: JobLauncher,
        log: Callable[[str], None],
        preload: tuple[str, ...] = PRELOAD,
        rehearsal_wait: float = REHEARSAL_WAIT_SECONDS,
        keep_apart: bool = True,
        rehearsal_rest: float = REHEARSAL_REST_SECONDS,
    ) -> None:
        self.launcher = launcher
        self.log = log
        self.preload = preload
        self.rehearsal_wait = rehearsal_wait
        self.rehearsal_rest = rehearsal_rest
        # Whether a rehearsed interpreter may wait while a job of this node alone runs: not on
        # a GPU node, where its TensorFlow holds the GPU's memory.
        self.keep_apart = keep_apart
        self._warm: _Warm | None = None
        # Where the warm interpreters come from (trainstack_agent.zygote).
        self.forks = Forks(launcher.processes, RUNNER, preload, runner_arguments(preload, rehearsal_wait))
        # The warm starts so far, and of those the rehearsed: figures for the log and the tests.
        self.handed = 0
        self.rehearsed = 0
        # The last command started: what the next job's is likely to be.
        self.last: JobCommand | None = None

    def prepare(self, template: JobCommand, allowed: bool) -> None:
        """Starts a warm interpreter for jobs like ``template`` (the job that just ended), if
        ``allowed`` (the built-in trainer's job) and none is waiting for such a job already. A
        rehearsed one is kept: it waits for the next job of its cluster."""
        if not allowed or builtin_module(template) is None:
            return
        if self._warm is not None:
            warm = self._warm
            failed = warm.rehearsal is not None and warm.reports.failed()
            if warm.alive() and not failed and (warm.rehearsal is not None or warm.matches(template)):
                return
            self.discard()
        self._warm = _new_warm(self.forks, template, self.launcher.processes.stop_grace)
        self.log("a warm interpreter with TensorFlow loaded waits for the built-in trainer's next job")

    def prepare_next(self, allowed: bool) -> None:
        """After a job's end: a warm interpreter for a job like the last one started, if
        ``allowed`` (it was the built-in trainer's), which rehearses that job (its strategy,
        with every node of the cluster, and its model: trainer.rehearsal) while it waits.
        Called from the agent's main thread."""
        last = self.last
        if last is None:
            return
        self.prepare(last, allowed)
        warm = self._warm
        if not allowed or warm is None or warm.rehearsal is not None or last.code_digest is None:
            return
        if TRIAL_ID_ENV in last.env:
            # A study's next trial is submitted as soon as this one's metric is read: a rehearsal
            # would lie on its path. Every node knows it from the same job, so every node
            # rehearses, or none does (their collectives must be the same).
            return
        if warm.matches(last):
            problem = warm.rehearse(last, last.code_digest)
            if problem is not None:
                self.log(f"the warm interpreter did not take the rehearsal ({problem})")
                self.discard()
                return
            self.log("the warm interpreter rehearses the next job like the last: its strategy and its model")

    def start(self, command: JobCommand) -> JobChild:
        self.last = command
        warm, self._warm = self._warm, None
        module = builtin_module(command)
        if warm is not None and module is not None and warm.alive() and warm.matches(command):
            problem = None
            if warm.rehearsal is not None:
                problem = warm.reports.problem(self.rehearsal_wait, self.rehearsal_rest)
            if problem is None:
                problem = warm.take(module, command, self.launcher.scope(command.user))
            if problem is None:
                self.handed += 1
                self.rehearsed += warm.rehearsal is not None
                self.log(f"the job's code starts in the{' rehearsed' if warm.rehearsal else ''} warm interpreter")
                return warm.child
            self.log(f"the warm interpreter did not take the job ({problem}); starting a new one")
        elif self.keep_apart and warm is not None and warm.holds_cluster_apart_from(command):
            self._warm = warm
            return self.launcher.start(command)
        if warm is not None:
            warm.end()
        return self.launcher.start(command)

    def discard(self) -> None:
        """Ends a waiting warm interpreter (before an idle stop, or when jobs change)."""
        warm, self._warm = self._warm, None
        if warm is not None:
            warm.end()

    def stop_all(self, close: bool = True) -> None:
        """Every child of the boot; between jobs (not ``close``) the zygote and the warm
        interpreter waiting for the next job are left to wait."""
        if close:
            self.discard()
            self.launcher.stop_all(close)
            self.forks.close()
            return
        # Between jobs the zygote stays, and so does a warm interpreter that waits.
        keep = self.forks.kept()
        if self._warm is None or not self._warm.alive():
            self.discard()
        else:
            keep.append(self._warm.child.child)
        self.launcher.stop_all(close, keep=keep)

    def for_job(self, allowed: bool) -> JobStarts:
        """The launcher of one job: ``allowed``, its code is the built-in trainer's."""
        return JobStarts(self, allowed)


class JobStarts:
    """The launcher one job of a standing node uses: its code started (in the warm interpreter
    when one matches), then at once a warm interpreter prepared for the next job like it, while
    this one runs: its imports, at the lowest priority, take what CPU the job leaves, so that the
    queue's next job (a tuning study's next trial) finds TensorFlow loaded when this one ends."""

    def __init__(self, warm: WarmStarts, allowed: bool) -> None:
        self.warm = warm
        self.allowed = allowed

    def start(self, command: JobCommand) -> JobChild:
        child = self.warm.start(command)
        self.warm.prepare(command, self.allowed)
        return child

    def stop_all(self, close: bool = True) -> None:
        self.warm.stop_all(close)

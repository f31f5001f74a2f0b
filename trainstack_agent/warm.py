"""A warm interpreter for the built-in trainer's next job on a standing node.

Between a standing cluster's jobs the node has nothing to do; a new trainer process then
spends most of its start importing TensorFlow (5 s of the 14 s from `trainstack local` to the
first step on this project's 2-core machines). So, as soon as a built-in trainer's job has
started (and again once it has ended, if that one is gone), the agent starts the job user's
Python importing TensorFlow at the lowest priority, then waiting on a pipe; the next
job of the built-in trainer that would start with the same interpreter, user, working
directory and environment (but for the variables its code reads only once it runs: TF_CONFIG,
NODE_NAME, the ``AIP_*`` directories, the hypertune report file, the code's path) is handed to
it whole through that pipe and runs as ``python -m`` would run it. Anything else (a team's code, which may set variables
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trainstack_agent.job import JobCommand
from trainstack_agent.processes import JobChild, JobLauncher
from trainstack_agent.zygote import BIRTH_SECONDS, ForkedChild, Forks
from trainstack_contract import (
    BUILTIN_MODULE,
    HYPERTUNE_METRIC_FILE_ENV,
    ONEDNN_SWITCH,
    TRIAL_ID_ENV,
    VERTEX_CHECKPOINT_DIR_ENV,
    VERTEX_MODEL_DIR_ENV,
    VERTEX_TENSORBOARD_DIR_ENV,
)

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
# A pipe holds 64 KiB on Linux: a job that fits is handed over without waiting for the reader.
MAX_HANDOFF_BYTES = 60 * 1024

# The warm interpreter: imports PRELOAD at the lowest priority (a standing node prepares it
# while a job runs, and the job must not feel it), reads one job from the pipe named by its
# first argument, takes back a job's own priority, waits for the imports and runs the job as
# `python -m MODULE ARGS` would. The lowest priority is nice 19 for the importing thread and,
# where Linux groups processes by session (autogroup: the agent starts each child in a session
# of its own, and nice then only weighs threads within their group), for the process's group
# too, which any process may set back to 0. Linux takes one such change in 0.1 s from all the
# processes without CAP_SYS_ADMIN together (EAGAIN otherwise: a cluster's nodes on one machine
# ask at once), so each is tried again, a bounded number of times. An empty pipe (the agent
# ended it without a job) ends it quietly.
RUNNER = """\
import json, os, runpy, sys, threading, time
pipe, preload = int(sys.argv[1]), sys.argv[2:]
lock, group = threading.Lock(), {"niced": False, "job": False}
def group_nice(value):
    for attempt in range(40):
        try:
            with open("/proc/self/autogroup", "w") as handle:
                handle.write(str(value))
            return True
        except BlockingIOError:
            time.sleep(0.03 + 0.05 * (attempt % 3))
        except OSError:
            return False
    return False
def load():
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass
    with lock:
        if not group["job"]:
            group["niced"] = group_nice(19)
    for name in preload:
        try:
            __import__(name)
        except ImportError:
            pass
loader = threading.Thread(target=load, name="trainstack-preload", daemon=True)
loader.start()
with os.fdopen(pipe, "rb") as source:
    data = source.read()
if not data:
    os._exit(0)
with lock:
    group["job"] = True
    if group["niced"]:
        group_nice(0)
loader.join()
job = json.loads(data)
os.environ.clear()
os.environ.update(job["env"])
sys.path[0] = os.getcwd()
sys.path[1:1] = job["path"]
sys.argv = [job["module"], *job["args"]]
runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
"""


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


@dataclass
class _Warm:
    child: JobChild
    pipe: int
    python: str
    cwd: str
    user: object
    env: dict[str, str]

    def matches(self, command: JobCommand) -> bool:
        return (
            command.argv[0] == self.python
            and str(command.cwd) == self.cwd
            and command.user == self.user
            and warm_environment(command.env) == self.env
        )


class WarmStarts:
    """The job launcher of a standing node: a warm interpreter for the built-in trainer's next
    job when one matches, a new process otherwise (the launcher's own start)."""

    def __init__(self, launcher: JobLauncher, log: Callable[[str], None], preload: tuple[str, ...] = PRELOAD) -> None:
        self.launcher = launcher
        self.log = log
        self.preload = preload
        self._warm: _Warm | None = None
        # Where the warm interpreters come from (trainstack_agent.zygote).
        self.forks = Forks(launcher.processes, RUNNER, preload, preload)
        # The warm starts so far: a figure for the log and the tests.
        self.handed = 0
        # The last command started: what the next job's is likely to be.
        self.last: JobCommand | None = None

    def prepare(self, template: JobCommand, allowed: bool) -> None:
        """Starts a warm interpreter for jobs like ``template`` (the job that just ended), if
        ``allowed`` (the built-in trainer's job) and none is waiting for such a job already."""
        if not allowed or builtin_module(template) is None:
            return
        if self._warm is not None:
            if self._warm.child.poll() is None and self._warm.matches(template):
                return
            self.discard()
        env = warm_environment(template.env)
        read, write = os.pipe()
        try:
            child = self.forks.interpreter(template.argv[0], template.cwd, template.user, env, read)
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        processes = self.launcher.processes
        user = template.user
        self._warm = _Warm(
            JobChild(child, None, processes.stop_grace), write, template.argv[0], str(template.cwd), user, env
        )
        self.log("a warm interpreter with TensorFlow loaded waits for the built-in trainer's next job")

    def prepare_next(self, allowed: bool) -> None:
        """After a job's end: a warm interpreter for a job like the last one started, if
        ``allowed`` (it was the built-in trainer's). Called from the agent's main thread."""
        if self.last is not None:
            self.prepare(self.last, allowed)

    def start(self, command: JobCommand) -> JobChild:
        self.last = command
        warm, self._warm = self._warm, None
        module = builtin_module(command)
        if warm is not None and module is not None and warm.child.poll() is None and warm.matches(command):
            code_path = [entry for entry in command.env.get("PYTHONPATH", "").split(os.pathsep) if entry]
            # The job's scope: the warm interpreter joins the job's cgroup as it takes the job.
            scope = self.launcher.scope(command.user)
            env = {**command.env, **scope.env}
            payload = json.dumps(
                {"module": module, "args": list(command.argv[3:]), "env": env, "path": code_path}
            ).encode()
            forked = warm.child.child
            if isinstance(forked, ForkedChild) and not forked.born(BIRTH_SECONDS):
                self.log("the zygote did not fork the warm interpreter in time; starting a new one")
                scope.end()
            elif len(payload) <= MAX_HANDOFF_BYTES:
                # Into the job's cgroup while it still waits: whatever it starts is the job's.
                scope.adopt(forked.pid)
                warm.child.scope = scope
                try:
                    os.write(warm.pipe, payload)
                    os.close(warm.pipe)
                except OSError as error:
                    self.log(f"the warm interpreter did not take the job ({error}); starting a new one")
                else:
                    self.handed += 1
                    self.log("the job's code starts in the warm interpreter")
                    return warm.child
            else:
                scope.end()  # an empty cgroup, removed
        if warm is not None:
            self._end(warm)
        return self.launcher.start(command)

    def discard(self) -> None:
        """Ends a waiting warm interpreter (before an idle stop, or when jobs change)."""
        warm, self._warm = self._warm, None
        if warm is not None:
            self._end(warm)

    def _end(self, warm: _Warm) -> None:
        with contextlib.suppress(OSError):  # closed already
            os.close(warm.pipe)
        warm.child.stop()

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
        if self._warm is None or self._warm.child.poll() is not None:
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

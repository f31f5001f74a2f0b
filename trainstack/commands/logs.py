"""``trainstack logs``: the trainer's output from the stack's VMs, or from a `trainstack local` run.

On a VM the node agent sends its own lines to the journal as ``systemd-cat -t trainstack``
and the trainer's output as ``systemd-cat -t trainstack-trainer``
(``trainstack_agent/processes.py``). Cloud Logging holds journal entries
when the VM runs Google's Ops Agent with a ``systemd_journald`` receiver: the agent's Fluent
Bit ``systemd`` input keeps every journal field as a field of the entry's ``jsonPayload``
(``jsonPayload.SYSLOG_IDENTIFIER``, ``jsonPayload.MESSAGE``, ``jsonPayload._HOSTNAME``), names
the log after the receiver, and labels each entry with the instance name,
``labels."compute.googleapis.com/resource_name"``. Sources: the Ops Agent's generated
configuration for such a receiver,
https://github.com/GoogleCloudPlatform/ops-agent/tree/master/confgenerator/testdata/valid/linux/logging-receiver_systemd
(``fluent_bit_main.conf``: ``Name systemd``, filters on the journal's own ``PRIORITY`` and
``CODE_FILE`` fields; the Lua filter sets ``compute.googleapis.com/resource_name`` and the
log name), the receiver's documentation,
https://cloud.google.com/logging/docs/agent/ops-agent/configuration, and the
query language, https://cloud.google.com/logging/docs/view/logging-query-language
(``field = ("a" OR "b")``). Not verified against a live project: the resource type and
``resource.labels.node_id`` of a TPU VM's entries (``tpu_worker``), and that the images the
stacks boot run the Ops Agent with that receiver (see README, "After `pulumi up`").

The command prints that query and, when ``gcloud`` is installed, runs ``gcloud logging read``
(or ``gcloud beta logging tail`` with ``--follow``:
https://cloud.google.com/sdk/gcloud/reference/logging/read,
https://cloud.google.com/sdk/gcloud/reference/beta/logging/tail).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from trainstack.commands.parsers import number_argument, pattern_argument
from trainstack.commands.stackargs import add_stack_arguments, load_resolved
from trainstack.jobstate.report import default_workdir
from trainstack.localrun.nodelogs import RUN_HEADING, is_runtime_noise, node_log

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack

# The journal identifiers the boot scripts log under (systemd-cat -t ...).
TRAINER_IDENTIFIER = "trainstack-trainer"
SCRIPT_IDENTIFIER = "trainstack"
IDENTIFIERS = (TRAINER_IDENTIFIER, SCRIPT_IDENTIFIER)
# Resource types and the label that names the machine.
GCE_RESOURCE = "gce_instance"
GCE_NAME_LABEL = 'labels."compute.googleapis.com/resource_name"'
TPU_RESOURCE = "tpu_worker"
TPU_NAME_LABEL = "resource.labels.node_id"
# One line per entry: when, which machine (the journal's _HOSTNAME), which tag, the line.
GCLOUD_FORMAT = "value(timestamp,jsonPayload._HOSTNAME,jsonPayload.SYSLOG_IDENTIFIER,jsonPayload.MESSAGE)"
DEFAULT_FRESHNESS = "1d"
DEFAULT_LIMIT = 1000
LOGS_EXPLORER = "https://console.cloud.google.com/logs/query"
FOLLOW_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class LogSource:
    """A machine whose boot script logs: its node name, its VM name, its resource type."""

    node: str
    vm_name: str
    resource_type: str


def log_sources(stack: ResolvedStack) -> list[LogSource]:
    sources = [LogSource(n.name, n.vm_name, GCE_RESOURCE) for n in stack.cluster.nodes] if stack.cluster else []
    if stack.tpu is not None:
        sources.append(LogSource(stack.tpu.name, stack.tpu.vm_name, TPU_RESOURCE))
    return sources


class NodeError(Exception):
    """``--node`` names no machine of the stack (or none that this mode can read)."""


def select(sources: list[LogSource], node: str | None) -> list[LogSource]:
    if node is None:
        return sources
    chosen = [s for s in sources if s.node == node]
    if not chosen:
        valid = ", ".join(s.node for s in sources) or "none"
        raise NodeError(f"--node {node!r} is not a node of this stack; valid: {valid}")
    return chosen


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _any_of(values: list[str]) -> str:
    return _quote(values[0]) if len(values) == 1 else "(" + " OR ".join(_quote(v) for v in values) + ")"


def log_query(sources: list[LogSource]) -> str:
    """The Cloud Logging query for the boot script's and trainer's journal lines on ``sources``.

    Lines are ANDed; machines of two resource types (a cluster and a TPU VM) are ORed in one line.
    """
    groups = []
    for resource_type, label in ((GCE_RESOURCE, GCE_NAME_LABEL), (TPU_RESOURCE, TPU_NAME_LABEL)):
        names = [s.vm_name for s in sources if s.resource_type == resource_type]
        if names:
            groups.append((f"resource.type={_quote(resource_type)}", f"{label}={_any_of(names)}"))
    # One kind of source: its two conditions as two lines, which Logging ANDs; both: an OR of pairs.
    lines = list(groups[0]) if len(groups) == 1 else [" OR ".join(f"({kind} AND {names})" for kind, names in groups)]
    lines.append(f"jsonPayload.SYSLOG_IDENTIFIER={_any_of(list(IDENTIFIERS))}")
    return "\n".join(lines)


def gcloud_argv(query: str, project: str, follow: bool, freshness: str, limit: int) -> list[str]:
    if follow:
        return ["gcloud", "beta", "logging", "tail", query, f"--project={project}", f"--format={GCLOUD_FORMAT}"]
    return [
        "gcloud",
        "logging",
        "read",
        query,
        f"--project={project}",
        f"--freshness={freshness}",
        f"--limit={limit}",
        f"--format={GCLOUD_FORMAT}",
    ]


# --- trainstack local ------------------------------------------------------------------------------
def _shown_lines(data: bytes, verbose: bool) -> list[str]:
    lines = [line.decode("utf-8", errors="replace") for line in data.splitlines()]
    return lines if verbose else [line for line in lines if not is_runtime_noise(line)]


def _runs(lines: list[str]) -> list[tuple[str, list[str]]]:
    """A node log's lines by run: (heading, lines), in order; lines before any heading (a
    work directory of an earlier version) form a run of their own."""
    runs: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith(RUN_HEADING):
            runs.append((line, []))
        elif runs:
            runs[-1][1].append(line)
        else:
            runs.append(("=== trainstack local run (an earlier one) ===", [line]))
    return runs


def print_local_logs(
    workdir: Path, nodes: list[str], follow: bool, verbose: bool = False, out: IO[str] | None = None
) -> None:
    """Every run's output in the work directory, one heading per run and then each node's
    lines, node after node, without TensorFlow's native start-up chatter unless ``verbose``
    (as `local` shows a run); with ``follow``, then every new line as it is written."""
    out = out or sys.stdout
    offsets: dict[str, int] = {}
    by_node: dict[str, list[tuple[str, list[str]]]] = {}
    for node in nodes:
        path = node_log(workdir, node)
        data = path.read_bytes() if path.exists() else b""
        # Complete lines only when following: the rest is printed once it is whole.
        end = data.rfind(b"\n") + 1 if follow else len(data)
        offsets[node] = end
        by_node[node] = _runs(_shown_lines(data[:end], verbose))
        if not path.exists():
            print(f"[{node}] no log yet ({path})", file=out)
    headings = list(dict.fromkeys(heading for runs in by_node.values() for heading, _ in runs))
    for heading in headings:
        print(heading, file=out)
        for node in nodes:
            for run_heading, lines in by_node[node]:
                if run_heading == heading:
                    for line in lines:
                        print(f"[{node}] {line}", file=out)
    out.flush()
    shown_headings = set(headings)
    while follow:
        time.sleep(FOLLOW_POLL_SECONDS)
        for node in nodes:
            path = node_log(workdir, node)
            try:
                with path.open("rb") as handle:
                    handle.seek(offsets[node])
                    data = handle.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1
            offsets[node] += end
            for line in _shown_lines(data[:end], verbose):
                if line.startswith(RUN_HEADING):
                    if line not in shown_headings:
                        shown_headings.add(line)
                        print(line, file=out)
                else:
                    print(f"[{node}] {line}", file=out)
            out.flush()


# --- The command -----------------------------------------------------------------------------------
_FRESHNESS = re.compile(r"[1-9][0-9]{0,5}[smhd]")


def freshness(text: str) -> str:
    """gcloud's --freshness: a whole number of seconds, minutes, hours or days (``1d``)."""
    return pattern_argument(text, _FRESHNESS, f"{text!r} is not a duration like 30m, 6h or 2d")


def limit(text: str) -> int:
    value = number_argument(text, int, f"{text!r} is not a whole number")
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 1000000")
    return value


def cmd_logs(args: argparse.Namespace) -> int:
    if args.workdir is not None and not args.local:
        print("trainstack: --workdir is the work directory of a local run: use it with --local", file=sys.stderr)
        return 2

    stack = load_resolved(args)
    sources = log_sources(stack)
    if not sources:
        print(f"trainstack: stack {stack.stack} has no cluster or TPU VM whose boot script logs", file=sys.stderr)
        return 1
    try:
        chosen = select(sources, args.node)
    except NodeError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        return 2
    if args.local:
        workdir = args.workdir or default_workdir(stack.stack)
        if not (workdir / "nodes").is_dir():
            print(
                f"trainstack: no local run of stack {stack.stack} in {workdir}; "
                f"run `trainstack local --stack {stack.stack}` first",
                file=sys.stderr,
            )
            return 1
        # Ctrl-C ends a --follow: the normal way out, not an error.
        with contextlib.suppress(KeyboardInterrupt):
            print_local_logs(workdir, [s.node for s in chosen], args.follow, args.verbose)
        return 0
    query = log_query(chosen)
    if args.print_query:
        print(query)
        return 0
    if shutil.which("gcloud") is None:
        print(
            "trainstack: reading Cloud Logging from here needs the Google Cloud CLI (`gcloud`), which is not on the "
            f"PATH. Install it, or paste this query into the Logs Explorer ({LOGS_EXPLORER}?project={stack.project}):",
            file=sys.stderr,
        )
        print(query)
        return 1
    argv = gcloud_argv(query, stack.project, args.follow, args.freshness, args.limit)
    order = "as they arrive" if args.follow else f"newest first, the last {args.freshness}, at most {args.limit}"
    print(f"Cloud Logging query (project {stack.project}; {order}):\n{query}\n", file=sys.stderr)
    try:
        return subprocess.run(argv, check=False).returncode
    except KeyboardInterrupt:
        return 0


def register(subparsers: Any) -> None:
    """Adds ``logs`` to the ``trainstack`` command line (``subparsers`` from ``add_subparsers``)."""
    parser = subparsers.add_parser(
        "logs", help="the trainer's and boot script's log lines from the stack's VMs (Cloud Logging) or a local run"
    )
    add_stack_arguments(parser)
    parser.add_argument("--node", help="only this node (chief, worker-0, ps-0, tpu)")
    parser.add_argument("--follow", action="store_true", help="keep printing new lines (gcloud beta logging tail)")
    parser.add_argument("--print-query", action="store_true", help="print the Cloud Logging query and run nothing")
    parser.add_argument("--freshness", type=freshness, default=DEFAULT_FRESHNESS, help="how far back (default 1d)")
    parser.add_argument("--limit", type=limit, default=DEFAULT_LIMIT, help="at most this many lines (default 1000)")
    parser.add_argument("--local", action="store_true", help="the node logs of a `trainstack local` run")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="with --local: TensorFlow's native start-up messages too, as `local --verbose`",
    )
    parser.add_argument(
        "--workdir", type=Path, help="with --local: the run's work directory (default .trainstack-local/<stack>)"
    )
    parser.set_defaults(func=cmd_logs)

"""Hostile and careless stack files: each is refused in one line per problem, in bounded CPU
time and memory.

Every case runs the command a user types (`trainstack validate --stack-file F`) in its own
process, under a CPU-time limit (RLIMIT_CPU: work, not the wall clock of a shared machine),
and checks the exit status, the peak memory and that the message names what is wrong. The
cases fork from one parent that imported the command line once (tests/cli_forkserver.py);
a few canaries start `python -m trainstack` afresh, as a user's shell does.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_forkserver import REPO, CliForkServer, CliResult

# What the bound catches is unbounded work (a billion-laughs file expands for minutes);
# parsing a 1 MiB list takes about 3 CPU seconds. The kernel ends a process past its CPU
# limit (SIGXCPU), however busy the machine is.
MAX_CPU_SECONDS = 15
MAX_RSS_MB = 200
# Only a guard against a process that waits for ever without using the CPU (a FIFO would).
HANG_SECONDS = 120

BASE = """config:
  gcp:project: test-project-123
  gcp:region: us-central1
  trainstack:zone: us-central1-a
  trainstack:notebook: {machine_type: n1-standard-8}
"""
CLUSTER = """  trainstack:cluster:
    chief: {machine_type: n1-standard-8, accelerator: {type: nvidia-tesla-t4, count: 1}}
"""


def with_base(extra: str, base: str = BASE) -> str:
    return base + extra


def replacing(key: str, value: str) -> str:
    """The base stack with one top-level line's value replaced (no duplicate key)."""
    lines = [line for line in BASE.splitlines() if not line.startswith(f"  {key}:")]
    return "\n".join(lines) + f"\n  {key}: {value}\n"


def billion_laughs(under: str) -> str:
    levels = ['  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        levels.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return BASE + "\n".join(f"  x:{line.strip()}" for line in levels) + f"\n  {under}: *a8\n"


METACHARACTERS = ["$(touch /tmp/pwned)", "`id`", "a;reboot", "x' y", 'x" y', "a|b", "a&&b", "${HOME}", "a>b"]

# (case id, file text, words the output must contain)
CASES: list[tuple[str, str, str]] = [
    # Aliases and anchors (billion laughs): refused before expansion.
    ("billion_laughs_in_labels", billion_laughs("trainstack:labels"), "anchors and aliases"),
    ("billion_laughs_in_other_namespace", billion_laughs("other:thing"), "anchors and aliases"),
    ("plain_alias", with_base("  trainstack:labels: &l {team: a}\n  x:y: *l\n"), "anchors and aliases"),
    (
        "merge_key",
        with_base("  x:base: &b {count: 1}\n  x:other: {<<: *b}\n"),
        "YAML merge keys (<<:) are not supported",
    ),
    ("python_tag", with_base("  x:other: !!python/object/apply:os.system [id]\n"), "the tag '!!python/object/apply"),
    # Size.
    ("two_megabytes", with_base("  x:pad: '" + "a" * (2 * 1024 * 1024) + "'\n"), "at most 1048576"),
    (
        "many_args",
        with_base("  trainstack:job:\n    args: [" + ", ".join(["--x"] * 100_000) + "]\n"),
        "trainstack:job.args",
    ),
    ("huge_job_name", with_base(f"  trainstack:job: {{name: j{'a' * 500_000}}}\n"), "trainstack:job.name"),
    ("long_arg", with_base(f"  trainstack:job: {{args: ['--note={'x' * 5000}']}}\n"), "at most 4096 characters"),
    (
        "args_total_too_long",
        with_base("  trainstack:job:\n    args: [" + ", ".join([f"'--n={'x' * 4000}'"] * 10) + "]\n"),
        "add up to more than",
    ),
    (
        "two_hundred_labels",
        with_base("  trainstack:labels: {" + ", ".join(f"k{i}: v" for i in range(200)) + "}\n"),
        "at most 62",
    ),
    ("huge_integer", with_base(f"  trainstack:job: {{epochs: {10**300}}}\n"), "trainstack:job.epochs"),
    ("many_unknown_keys", with_base("".join(f"  trainstack:k{i}: 1\n" for i in range(5000))), "unknown key"),
    # Depth.
    ("deep_flow_sequence", with_base("  x:deep: " + "[" * 50_000 + "\n"), "nesting deeper than"),
    ("deep_flow_mapping", with_base("  x:deep: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n"), "nesting deeper than"),
    (
        "deep_block_mapping",
        with_base("  x:deep:\n" + "".join("  " * (i + 2) + f"k{i}:\n" for i in range(100)) + "  " * 102 + "v: 1\n"),
        "nesting deeper than",
    ),
    # Duplicate keys.
    (
        "duplicate_on_finish",
        with_base(CLUSTER + "    on_finish: stop\n    on_finish: keep\n"),
        "duplicate key 'on_finish' (line 8 column 5, and line 9 column 5)",
    ),
    # Two keys on one line are two keys too (the first check compared lines only).
    (
        "duplicate_on_one_line_in_a_flow_mapping",
        with_base("  trainstack:cluster: {chief: {machine_type: n1-standard-8}, on_finish: stop, on_finish: keep}\n"),
        "duplicate key 'on_finish' (line 6 column 62, and line 6 column 79)",
    ),
    (
        "duplicate_run_hours_on_one_line",
        with_base(
            "  trainstack:cluster: {chief: {machine_type: n1-standard-8}, max_run_hours: 1, max_run_hours: 2000}\n"
        ),
        "duplicate key 'max_run_hours'",
    ),
    ("duplicate_top_level", BASE + "  gcp:project: other-project-1\n", "duplicate key 'gcp:project'"),
    ("duplicate_label", with_base("  trainstack:labels:\n    team: a\n    team: b\n"), "duplicate key 'team'"),
    ("duplicate_config", BASE + "config: {}\n", "duplicate key 'config'"),
    # Trailing newlines (a bare "$" in a pattern lets them through).
    ("job_name_newline", with_base('  trainstack:job: {name: "j1\\n"}\n'), "trainstack:job.name"),
    ("project_newline", replacing("gcp:project", '"test-project-123\\n"'), "gcp:project"),
    ("region_newline", replacing("gcp:region", '"us-central1\\n"'), "gcp:region"),
    ("zone_newline", replacing("trainstack:zone", '"us-central1-a\\n"'), "trainstack:zone"),
    ("label_value_newline", with_base('  trainstack:labels: {team: "vision\\n"}\n'), "trainstack:labels"),
    ("label_key_newline", with_base('  trainstack:labels: {"team\\n": vision}\n'), "trainstack:labels"),
    (
        "billing_account_newline",
        with_base('  trainstack:budget: {billing_account: "012345-6789AB-CDEF01\\n", monthly_usd: 10}\n'),
        "trainstack:budget.billing_account",
    ),
    (
        "service_agent_role_newline",
        with_base(
            '  trainstack:tpu: {accelerator_type: v2-8, runtime_version: tpu-vm-tf-2.17.0-pjrt, service_agent_role: "roles/owner\\n"}\n'
        ),
        "trainstack:tpu.service_agent_role",
    ),
    ("resource_name_newline", with_base('  trainstack:name: "team-a\\n"\n'), "trainstack:name"),
    ("data_newline", with_base('  trainstack:job: {data: "gs://bucket-a/x\\n"}\n'), "trainstack:job.data"),
    # Control characters.
    ("escape_in_label", with_base('  trainstack:labels: {team: "a\\x1b[31m"}\n'), "trainstack:labels"),
    ("nul_in_arg", with_base('  trainstack:job: {args: ["--a=\\0"]}\n'), "trainstack:job.args"),
    ("tab_in_zone", replacing("trainstack:zone", '"us-central1\\t-a"'), "trainstack:zone"),
    ("not_utf8", BASE + "  x:bytes: '\udcff'\n", "not UTF-8"),
    # Numbers that are not numbers, and values no cloud accepts.
    (
        "infinite_budget",
        with_base("  trainstack:budget: {billing_account: 012345-6789AB-CDEF01, monthly_usd: .inf}\n"),
        "finite number",
    ),
    ("nan_run_hours", with_base(CLUSTER + "    max_run_hours: .nan\n"), "trainstack:cluster.max_run_hours"),
    ("mwms_without_workers", with_base(CLUSTER + "    strategy: multi_worker_mirrored\n"), "at least 1 worker"),
    (
        "args_override_job_dir",
        with_base("  trainstack:job: {args: [--job-dir, 'gs://someone-elses-bucket/x']}\n"),
        "--job-dir is set by the stack",
    ),
    ("args_override_data", with_base("  trainstack:job: {args: ['--data=/etc']}\n"), "use trainstack:job.data"),
    # argparse expands an unambiguous prefix: --job-d would be --job-dir in a team's parser.
    (
        "args_abbreviate_job_dir",
        with_base("  trainstack:job: {args: [--job-d, 'gs://other-teams-bucket/x']}\n"),
        "--job-d (a prefix of --job-dir, which argparse expands) is set by the stack",
    ),
    ("args_abbreviate_epochs", with_base("  trainstack:job: {args: ['--epoch=100000']}\n"), "a prefix of --epochs"),
    ("args_override_epochs", with_base("  trainstack:job: {args: [--epochs, '500']}\n"), "use trainstack:job.epochs"),
    (
        "primitive_service_agent_role",
        with_base(
            "  trainstack:tpu: {accelerator_type: v2-8, runtime_version: tpu-vm-tf-2.17.0-pjrt, service_agent_role: roles/owner}\n"
        ),
        "only a service-agent role",
    ),
    (
        "any_role_for_the_tpu_agent",
        with_base(
            "  trainstack:tpu: {accelerator_type: v2-8, runtime_version: tpu-vm-tf-2.17.0-pjrt, service_agent_role: roles/storage.admin}\n"
        ),
        "only a service-agent role",
    ),
    ("reserved_label", with_base("  trainstack:labels: {trainstack-stack: other}\n"), "set by trainstack"),
    ("unknown_region", replacing("gcp:region", "us-moon1") + "", "unknown region us-moon1"),
    # A CPU-only stack's zone is checked too (a GPU's zone was the only one checked).
    ("zone_that_does_not_exist", replacing("trainstack:zone", "us-central1-z"), "no zone us-central1-z in us-central1"),
    # Found by a hostile suite kept outside the project: each was a traceback or a silent acceptance.
    (
        "integer_of_5000_digits",
        with_base(f"  trainstack:job: {{name: j1, epochs: {'9' * 5000}}}\n"),
        "trainstack:job.epochs: a number of 5000",
    ),
    (
        "hex_integer_too_long_to_show",
        with_base(f"  trainstack:job: {{name: j1, epochs: 0x{'f' * 4000}}}\n"),
        "trainstack:job.epochs: a number of",
    ),
    (
        "base_60_number",
        with_base("  trainstack:job: {name: j1, epochs: 1:30}\n"),
        "trainstack:job.epochs: 1:30 is a base-60 number",
    ),
    (
        "key_after_a_line_separator_in_a_comment",
        with_base("  # reviewed\u2028  trainstack:access: {members: ['user:m@example.com']}\n"),
        "U+2028, a line break to YAML",
    ),
    ("nul_byte_in_a_value", with_base("  trainstack:labels: {team: vis\x00ion}\n"), "control character U+0000"),
    ("misspelt_namespace", with_base("  trainstck:budget: {monthly_usd: 50}\n"), "did you mean trainstack:budget?"),
    ("look_alike_namespace", with_base("  tr\u0430instack:budget: {monthly_usd: 50}\n"), "a look-alike letter"),
]
# Shell metacharacters in every text field a user writes.
for i, meta in enumerate(METACHARACTERS):
    quoted = "'" + meta.replace("'", "''") + "'"
    CASES += [
        (f"meta{i}_zone", replacing("trainstack:zone", quoted), "trainstack:zone"),
        (f"meta{i}_name", with_base(f"  trainstack:name: {quoted}\n"), "trainstack:name"),
        (f"meta{i}_job_name", with_base(f"  trainstack:job: {{name: {quoted}}}\n"), "trainstack:job.name"),
        (f"meta{i}_data", with_base(f"  trainstack:job: {{data: {quoted}}}\n"), "trainstack:job.data"),
        (
            f"meta{i}_machine_type",
            replacing("trainstack:notebook", f"{{machine_type: {quoted}}}"),
            "trainstack:notebook.machine_type",
        ),
        (f"meta{i}_project", replacing("gcp:project", quoted), "gcp:project"),
        (f"meta{i}_label", with_base(f"  trainstack:labels: {{team: {quoted}}}\n"), "trainstack:labels"),
        (
            f"meta{i}_tpu_runtime",
            with_base(f"  trainstack:tpu: {{accelerator_type: v2-8, runtime_version: {quoted}}}\n"),
            "trainstack:tpu.runtime_version",
        ),
    ]


# Runs the CLI and, on the way out, writes the process's peak resident memory (VmHWM: the
# high-water mark of its own address space since exec). The kernel's rusage for a child
# would also count the pages it shared with the parent before exec, and the pytest worker
# that forks it may hold TensorFlow.
PEAK_REPORTING_CLI = """
import os, runpy, sys
sys.argv[0] = "trainstack"
try:
    runpy.run_module("trainstack", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status:
        peak_kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["PEAK_RSS_FILE"], "w") as out:
        out.write(peak_kb)
"""


def _limit_cpu() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (MAX_CPU_SECONDS, MAX_CPU_SECONDS))


def run_validate_measured(path: Path) -> CliResult:
    """Exit status, output and peak resident memory (MB) of one validate process started
    afresh, run under the CPU-time limit (past it the kernel ends the process, and the exit
    status is not 1)."""
    peak_file = path.parent / "peak-rss-kb"
    result = subprocess.run(
        [sys.executable, "-c", PEAK_REPORTING_CLI, "validate", "--stack-file", str(path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PEAK_RSS_FILE": str(peak_file)},
        preexec_fn=_limit_cpu,
        timeout=HANG_SECONDS,
    )
    peak_mb = int(peak_file.read_text()) // 1024 if peak_file.exists() else -1
    return CliResult(result.returncode, result.stdout.decode(errors="replace"), peak_mb)


@pytest.fixture(scope="module")
def cli() -> Iterator[CliForkServer]:
    server = CliForkServer()
    yield server
    server.close()


def validate_forked(cli: CliForkServer, path: Path) -> CliResult:
    return cli.run(["validate", "--stack-file", str(path)], path.parent, MAX_CPU_SECONDS, HANG_SECONDS)


def assert_refused(result: CliResult, words: str) -> None:
    code, output, rss_mb = result.code, result.output, result.peak_rss_mb
    assert code == 1, f"exit {code} (-{int(signal.SIGXCPU)}: past {MAX_CPU_SECONDS} CPU seconds)\n{output}"
    assert "Traceback" not in output, output
    lines = output.splitlines()
    assert lines[0].startswith("trainstack: "), output
    assert "problem(s)" in lines[0], output
    assert all(line.startswith("  ") for line in lines[1:]), output
    assert words in output, output[:2000]
    assert 0 < rss_mb < MAX_RSS_MB, f"{rss_mb} MB"


def test_there_are_at_least_forty_hostile_cases() -> None:
    assert len(CASES) >= 40


def write_case(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "Pulumi.hostile.yaml"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("text", "words"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_hostile_stack_file_is_refused_quickly_in_bounded_memory(
    cli: CliForkServer, tmp_path: Path, text: str, words: str
) -> None:
    path = write_case(tmp_path, text)
    assert_refused(validate_forked(cli, path), words)


# The canaries: the costliest cases again, in a process of their own from the interpreter's start.
CANARIES = [case for case in CASES if case[0] in ("billion_laughs_in_labels", "two_megabytes", "deep_flow_sequence")]


@pytest.mark.slow
@pytest.mark.parametrize(("text", "words"), [case[1:] for case in CANARIES], ids=[case[0] for case in CANARIES])
def test_a_hostile_stack_file_is_refused_by_a_fresh_process(tmp_path: Path, text: str, words: str) -> None:
    assert_refused(run_validate_measured(write_case(tmp_path, text)), words)


def test_dev_zero_is_refused(tmp_path: Path) -> None:
    assert_refused(run_validate_measured(Path("/dev/zero")), "not a regular file")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "Pulumi.fifo.yaml"
    os.mkfifo(fifo)
    assert_refused(run_validate_measured(fifo), "not a regular file")


def test_a_stack_file_named_dot_dot_is_refused(cli: CliForkServer, tmp_path: Path) -> None:
    """`Pulumi....yaml` names the stack `..`; such a name once became a path to delete."""
    path = tmp_path / "Pulumi....yaml"
    path.write_text(BASE)
    assert_refused(validate_forked(cli, path), "'..' is not a stack name")


@pytest.mark.slow
def test_the_base_of_these_cases_is_valid(cli: CliForkServer, tmp_path: Path) -> None:
    """Guards the cases above: each must fail for its own reason."""
    for text in (BASE, with_base(CLUSTER)):
        path = tmp_path / "Pulumi.base.yaml"
        path.write_text(text)
        forked = validate_forked(cli, path)
        assert forked.code == 0, forked.output
    assert run_validate_measured(path).code == 0

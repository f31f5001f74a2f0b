"""Hostile files given to the commands other than through a stack file: `import` (job files, saved
gcloud command lines and the files they name) and `check --policy-config`. Each is refused in
one line, exit 1, with no traceback, in bounded CPU time and without waiting on a FIFO.

Every case runs the command a user types in its own process under a CPU-time limit
(RLIMIT_CPU); the timeout is only a guard against a process that waits without using the CPU.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAX_CPU_SECONDS = 20
HANG_SECONDS = 120
LAUGHS = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9)
)


def _limit_cpu() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (MAX_CPU_SECONDS, MAX_CPU_SECONDS))


def trainstack(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainstack", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=_limit_cpu,
        timeout=HANG_SECONDS,
    )


def assert_refused(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert words in result.stderr, result.stderr[-2000:]


def imported(tmp_path: Path, source: Path | str) -> subprocess.CompletedProcess[str]:
    return trainstack("import", str(source), "--stack", "hostile", "--out", str(tmp_path / "Pulumi.hostile.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "words"),
    [
        # 106 KB of aliases once wrote a 200 MB stack file after 285 s.
        (LAUGHS + "trainingInput: {scaleTier: CUSTOM, masterType: n1-standard-8, args: *a8}\n", "anchors and aliases"),
        # A 998-frame RecursionError traceback, once.
        ("trainingInput: " + "[" * 50_000 + "\n", "nesting deeper than"),
        ("trainingInput: {scaleTier: BASIC, scaleTier: CUSTOM}\n", "duplicate key 'scaleTier'"),
    ],
    ids=["aliases", "deep-nesting", "duplicate-key"],
)
def test_a_hostile_job_file_is_refused(tmp_path: Path, text: str, words: str) -> None:
    source = tmp_path / "config.yaml"
    source.write_text(text)
    assert_refused(imported(tmp_path, source), words)
    assert not (tmp_path / "Pulumi.hostile.yaml").exists()


@pytest.mark.slow
def test_dev_zero_is_not_imported(tmp_path: Path) -> None:
    """A MemoryError, once."""
    assert_refused(imported(tmp_path, "/dev/zero"), "not a regular file")


def test_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    assert_refused(imported(tmp_path, fifo), "not a regular file")


def test_a_fifo_a_saved_command_line_names_is_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "config.yaml")
    command = tmp_path / "submit.sh"
    command.write_text(
        "gcloud ai-platform jobs submit training job1 --package-path trainer --module-name trainer.task "
        "--region us-central1 --config config.yaml\n"
    )
    assert_refused(imported(tmp_path, command), "not a regular file")


@pytest.mark.parametrize(
    ("content", "words"),
    [("[" * 100_000, "nesting deeper than"), ('{"all": ' * 40 + '"advisory"' + "}" * 40, "nesting deeper than")],
    ids=["deep-list", "deep-objects"],
)
def test_a_hostile_policy_config_is_refused(tmp_path: Path, content: str, words: str) -> None:
    config = tmp_path / "policy.json"
    config.write_text(content)
    assert_refused(trainstack("check", "--stack", "dev", "--policy-config", str(config)), words)


def test_a_policy_config_fifo_is_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "policy.json"
    os.mkfifo(fifo)
    assert_refused(trainstack("check", "--stack", "dev", "--policy-config", str(fifo)), "not a regular file")


# Found by a hostile suite kept outside the project: each ended in a traceback, a hang past a
# minute, or a hostile value written into a stack that validated.
@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("trainingInput: {scaleTier: CUSTOM, masterType: n1-standard-8, workerType: n1-standard-8, workerCount: "
         + "9" * 5000 + "}\n", "trainingInput.workerCount: a number of 5000"),
        ('[{"replica_count": 1, "machine_spec": {"machine_type": "n1-standard-4"}, "container_spec": {"image_uri": '
         '"us-central1-docker.pkg.dev/team-proj-1/v/t:3"}}, {"replica_count": "\u00b2", "machine_spec": '
         '{"machine_type": "n1-standard-4"}}]\n', "replica_count"),
        ("trainingInput: {scaleTier: BASIC, args: 5}\n", "args must be a list of strings"),
        ("trainingInput: {scaleTier: BASIC, masterConfig: {imageUri: 'us-central1-docker.pkg.dev/p-12345/v/t:3'}, "
         "args: '--lr 0.1 --job-dir gs://other-team/x'}\n", "args must be a list of strings"),
        ("gcloud ai-platform jobs submit training j --scale-tier custom --master-machine-type n1-standard-8 "
         "--master-accelerator count=\u00b9,type=nvidia-tesla-t4\n", "expected count=N,type=GPU"),
        ("gcloud ai-platform jobs submit training j --scale-tier basic -- --x=" + "$HOME" * 20000 + "\n",
         "a saved command line of"),
    ],
    ids=["integer_of_5000_digits", "superscript_digit", "args_not_a_list", "args_a_string",
         "superscript_accelerator_count", "megabyte_command_line"],
)  # fmt: skip
def test_a_hostile_job_file_found_outside_is_refused(tmp_path: Path, text: str, words: str) -> None:
    source = tmp_path / ("submit.txt" if text.startswith("gcloud") else "job.yaml")
    source.write_text(text)
    assert_refused(imported(tmp_path, source), words)
    assert not (tmp_path / "Pulumi.hostile.yaml").exists()


@pytest.mark.slow
def test_a_directory_is_refused_as_a_job_file_and_as_a_stack_file(tmp_path: Path) -> None:
    assert_refused(imported(tmp_path, tmp_path), "not a regular file")
    assert_refused(trainstack("validate", "--stack-file", str(tmp_path)), "not a regular file")


def test_control_characters_from_a_job_file_reach_the_terminal_escaped(tmp_path: Path) -> None:
    source = tmp_path / "job.yaml"
    source.write_text('trainingInput: {scaleTier: "BASIC\\nwrote stacks/Pulumi.prod.yaml\\e[2K"}\n')
    result = imported(tmp_path, source)
    assert result.returncode == 1
    assert "\x1b" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["check", "--stack", "dev", "--policy-config"], "trainstack check: --policy-config"),
        (["submit", "--stack", "dev", "--local", "--job-file"], "trainstack: submit: --job-file"),
    ],
    ids=["policy-config", "job-file"],
)
def test_a_file_an_option_names_is_refused_naming_the_option_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], prefix: str
) -> None:
    """Both options read their file through one reader: the same three refusals, word for word."""
    from trainstack.commands.main import main

    listed = tmp_path / "list.yaml"
    listed.write_text("[1]\n")
    not_a_mapping = {
        "check": "a JSON object of policy names",
        "submit": "a job file is a mapping of trainstack:job's keys (name, model, ...)",
    }[argv[0]]
    for path, said in [
        (tmp_path / "missing", "no such file"),
        (tmp_path, "not a regular file"),
        (listed, not_a_mapping),
    ]:
        assert main([*argv, str(path)]) == 1
        assert capsys.readouterr().err == f"{prefix} {path}: {said}\n"

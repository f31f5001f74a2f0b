"""`trainstack local` output: TensorFlow's native chatter hidden unless --verbose, a re-run that
trains nothing says so, --args reaches the job's code (a value starting with "--" too), and the
exit code means one thing each."""

from __future__ import annotations

from pathlib import Path

import pytest

from stack_helpers import base_config, write_stack
from test_job_code import probe_package, single_node
from trainstack.base.project import PROJECT_ROOT
from trainstack.commands import local
from trainstack.commands.main import main
from trainstack.localrun.nodelogs import is_runtime_noise
from trainstack.localrun.outcome import LocalExit, LocalStackRunResult, exit_code

NATIVE_LINES = [
    "E0000 00:00:1795394545.207341   12913 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error",
    "I0000 00:00:1795394544.388169   12902 port.cc:153] oneDNN custom operations are on.",
    "W0000 00:00:1795394544.388998   12902 cudart_stub.cc:31] Could not find cuda drivers on your machine.",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
]
JOB_LINES = [
    "trainstack: job step ended with status 0: SUCCEEDED",
    "2026-11-23 01:34:04,623 INFO trainer.training: evaluation: loss=1.4800 accuracy=0.2227",
    "5/5 - 2s - loss: 1.5786 - accuracy: 0.2375 - 2s/epoch - 357ms/step",
    "Traceback (most recent call last):",
    "E0000 is not a native line without its source file",
]


@pytest.mark.parametrize("line", NATIVE_LINES)
def test_native_start_up_lines_are_noise(line: str) -> None:
    assert is_runtime_noise(line)


@pytest.mark.parametrize("line", JOB_LINES)
def test_job_lines_are_not_noise(line: str) -> None:
    assert not is_runtime_noise(line)


NOISY_MODULE = """
import sys
print("E0000 00:00:1795394545.207341   12913 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)")
print("the team's own line: args=" + " ".join(sys.argv[1:]), flush=True)
"""


def noisy_stack(tmp_path: Path) -> Path:
    package = tmp_path / "code" / "noisy_pkg"
    if not package.exists():
        probe_package(tmp_path / "code", "noisy_pkg")
        (package / "main.py").write_text(NOISY_MODULE)
    return write_stack(tmp_path, single_node({"name": "noisy", "package": str(package), "module": "noisy_pkg.main"}))


def run_local(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["local", "--stack-file", str(noisy_stack(tmp_path)), "--workdir", str(tmp_path / "work"), *extra])
    return code, capsys.readouterr().out


@pytest.mark.slow
def test_local_hides_native_chatter_unless_verbose_and_boot_log_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_local(tmp_path, capsys, "--args", "--lr 0.5 --name 'two words'")
    assert code == 0, out
    assert "cuInit" not in out
    assert "[chief] the team's own line: args=--job-dir" in out
    assert out.rstrip().endswith("stop chief")
    assert "--lr 0.5 --name two words" in out, "--args reaches the code, split as a shell would"
    assert "cuInit" in (tmp_path / "work" / "nodes" / "chief" / "boot.log").read_text()
    code, out = run_local(tmp_path, capsys, "--fresh", "--verbose")
    assert code == 0
    assert "[chief] E0000 00:00:1795394545.207341" in out


@pytest.mark.slow
def test_a_rerun_that_trains_nothing_says_so_and_suggests_fresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_local(tmp_path, capsys)[0] == 0
    code, out = run_local(tmp_path, capsys)
    assert code == 0
    assert "nothing was trained this time; add --fresh" in out
    assert "add --fresh" not in run_local(tmp_path, capsys, "--fresh")[1]


@pytest.mark.parametrize(
    ("job", "args", "words"),
    [
        (None, "--epochs 3", "use the --epochs, --steps-per-epoch"),
        ("package", "--job-dir /tmp/x", "--job-dir is set by the stack"),
        # One word starting with "--" is --args's value, and is checked as any other.
        (None, "--epochs=3", "use the --epochs, --steps-per-epoch"),
        ("package", "--job-dir=/tmp/x", "--job-dir is set by the stack"),
    ],
)
def test_local_args_may_not_set_what_the_stack_sets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job: str | None, args: str, words: str
) -> None:
    path = noisy_stack(tmp_path) if job else write_stack(tmp_path, base_config())
    assert main(["local", "--stack-file", str(path), "--workdir", str(tmp_path / "w"), "--args", args]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ("--x 'unterminated", "No closing quotation"),
        ("a\nb", "printable"),
        ("--x='unterminated", "No closing quotation"),
        ("--x=\x1b[31m", "printable"),
    ],
)
def test_local_args_that_do_not_split_are_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str], args: str, words: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["local", "--stack", "dev", "--args", args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--args" in err
    assert words in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "passed"),
    [
        # argparse alone stopped at each of the first three: "argument --args: expected one argument".
        (["--args", "--num-epochs=60"], ["--num-epochs=60"]),
        (["--args", "-v"], ["-v"]),
        (["--args", "--lr=0.5", "--fresh"], ["--lr=0.5"]),
        (["--args=--num-epochs=60"], ["--num-epochs=60"]),
        (["--args", "--num-epochs 60 --name 'two words'"], ["--num-epochs", "60", "--name", "two words"]),
    ],
)
def test_local_args_takes_a_value_that_starts_with_a_dash(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], passed: list[str]
) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(local, "cmd_local", lambda args: seen.append(args.args) or 0)
    assert main(["local", "--stack", "dev", *argv]) == 0
    assert seen == [passed]


def test_local_args_without_a_value_is_still_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["local", "--stack", "dev", "--args"])
    assert exit_.value.code == LocalExit.USAGE
    assert "--args: expected one argument" in capsys.readouterr().err


# --- Exit codes: the job's own code exiting 2 is not a usage error -------------------------------
def result_of(
    job_status: dict[str, object] | None, boots: dict[str, int | None], has_job: bool = True
) -> LocalStackRunResult:
    return LocalStackRunResult(
        job_status=job_status,
        node_status={node: None for node in boots},
        exit_codes=boots,
        self_stops=[],
        job_dir=Path("job"),
        logs={},
        has_job=has_job,
    )


@pytest.mark.parametrize(
    ("result", "code"),
    [
        (result_of({"state": "SUCCEEDED", "exit_code": 0}, {"chief": 0}), LocalExit.SUCCEEDED),
        # A team's argparse exits 2 on an unknown flag; the trainer exits 75 for a lost peer.
        (result_of({"state": "FAILED", "exit_code": 2}, {"chief": 0}), LocalExit.JOB_FAILED),
        (result_of({"state": "FAILED", "exit_code": 1}, {"chief": 0}), LocalExit.JOB_FAILED),
        (result_of({"state": "FAILED", "exit_code": 130}, {"chief": 0}), LocalExit.JOB_FAILED),
        (result_of({"state": "FAILED", "exit_code": 75}, {"chief": 0}), LocalExit.JOB_FAILED),
        (result_of(None, {"chief": None}), LocalExit.JOB_FAILED),
        (result_of(None, {"chief": 0, "worker-0": 0}, has_job=False), LocalExit.SUCCEEDED),
        (result_of(None, {"chief": 0, "worker-0": 2}, has_job=False), LocalExit.JOB_FAILED),
    ],
)
def test_a_runs_exit_code_says_whether_the_job_succeeded_whatever_its_code_exited_with(
    result: LocalStackRunResult, code: LocalExit
) -> None:
    assert exit_code(result) == code


@pytest.mark.slow
def test_a_job_whose_code_exits_2_is_a_failed_job_and_a_bad_option_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = probe_package(tmp_path / "code", "exits_two")
    (package / "main.py").write_text("import sys\nprint('unknown flag', file=sys.stderr)\nsys.exit(2)\n")
    stack = write_stack(tmp_path, single_node({"name": "two", "package": str(package), "module": "exits_two.main"}))
    code = main(["local", "--stack-file", str(stack), "--workdir", str(tmp_path / "work")])
    out = capsys.readouterr().out
    assert code == LocalExit.JOB_FAILED == 3, out
    assert "job FAILED" in out, "the report keeps the code's own exit status"
    assert "exit 2" in out, "the report keeps the code's own exit status"
    with pytest.raises(SystemExit) as exit_:
        main(["local", "--stack-file", str(stack), "--no-such-option"])
    assert exit_.value.code == LocalExit.USAGE == 2


def test_every_exit_code_of_local_is_in_its_help_and_in_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["local", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    docs = (PROJECT_ROOT / "docs" / "cli.md").read_text()
    assert len({int(code) for code in LocalExit}) == len(LocalExit), "one meaning each"
    for code in LocalExit:
        assert f" {int(code)} " in help_text, code
        assert f"\n| {int(code)} | " in docs, code

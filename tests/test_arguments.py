"""One meaning for --args on `local`, `submit` and `tune`: it overrides the stack's job.args flag
by flag (a new user's `--args "--lr 0.01"` dropped the data paths and the job FAILED), and
--args-replace replaces the list; each command says the arguments the code gets."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from test_job_places import TAXIFARE_ARGS, team_job

from stack_helpers import write_stack
from trainstack.commands.main import main
from trainstack.jobcode.arguments import override_arguments
from trainstack.localrun.nodes import TrainerOverrides


@pytest.mark.parametrize(
    ("base", "given", "expected"),
    [
        # A flag given replaces the same flag and its values, where the stack has it.
        (
            ["--data", "gs://d/x", "--lr", "0.1", "--epochs", "5"],
            ["--lr", "0.01"],
            ["--data", "gs://d/x", "--lr", "0.01", "--epochs", "5"],
        ),
        # Either spelling, on either side.
        (["--lr=0.1", "--epochs", "5"], ["--lr", "0.01"], ["--lr", "0.01", "--epochs", "5"]),
        (["--lr", "0.1"], ["--lr=0.01"], ["--lr=0.01"]),
        # A flag the stack lacks is added at the end; every value of a replaced flag goes.
        (["--files", "a", "b", "--v"], ["--files", "c", "--seed", "3"], ["--files", "c", "--v", "--seed", "3"]),
        # A flag the stack gives twice is given once, where it first stood.
        (["--lr", "1", "--x", "--lr", "2"], ["--lr", "3"], ["--lr", "3", "--x"]),
        # A flag given twice (an append action's) keeps both; a negative number is a value.
        (["--tag", "a"], ["--tag", "b", "--tag", "c"], ["--tag", "b", "--tag", "c"]),
        (["--shift", "-1", "--lr", "2"], ["--shift", "-2.5e-3"], ["--shift", "-2.5e-3", "--lr", "2"]),
        # Words before any flag are added at the end.
        (["--lr", "1"], ["extra"], ["--lr", "1", "extra"]),
    ],
)
def test_args_override_the_stacks_arguments_flag_by_flag(
    base: list[str], given: list[str], expected: list[str]
) -> None:
    assert override_arguments(base, given) == expected


def test_local_overrides_flag_by_flag_or_replaces_the_list() -> None:
    stack_args = ["--train_data_paths", "gs://d/x*", "--num_epochs", "100"]
    assert TrainerOverrides({}, ("--num_epochs", "5")).apply(stack_args) == [
        "--train_data_paths",
        "gs://d/x*",
        "--num_epochs",
        "5",
    ]
    assert TrainerOverrides({}, (), ("--num_epochs", "5")).apply(stack_args) == ["--num_epochs", "5"]


@pytest.mark.parametrize(
    ("option", "kept"),
    [("--args", True), ("--args-replace", False)],
)
def test_submit_keeps_the_stacks_other_flags_unless_told_to_replace_them_and_says_what_the_code_gets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, kept: bool
) -> None:
    config = team_job(TAXIFARE_ARGS)
    config["trainstack:cluster"]["idle_minutes"] = 10
    stack = write_stack(tmp_path, config)
    base = ["submit", "--stack-file", str(stack), "--local", "--workdir", str(tmp_path / "work"), "--no-start"]
    assert main([*base, option, "--lr 0.01 --output_dir gs://team-out/taxifare/trained/2"]) == 0
    out = capsys.readouterr().out
    [said] = [line for line in out.splitlines() if line.startswith("its code's arguments (after --job-dir): ")]
    given = ["--lr", "0.01", "--output_dir", "gs://team-out/taxifare/trained/2"]
    if kept:
        expected = [*TAXIFARE_ARGS[:2], "--output_dir", "gs://team-out/taxifare/trained/2", "--lr", "0.01"]
    else:
        expected = given
    assert shlex.split(said.partition(": ")[2]) == expected


def test_args_and_args_replace_are_one_or_the_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["submit", "--stack", "dev", "--args", "--lr 1", "--args-replace", "--lr 2"])
    assert "not allowed with argument" in capsys.readouterr().err

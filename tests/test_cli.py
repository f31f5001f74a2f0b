"""The offline commands as a user runs them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import zipapp
from pathlib import Path

import pytest
from http_stand_in import scripted_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stack_helpers import BASE_CONFIG, write_stack
from trainstack.commands.main import build_parser, main

REPO = Path(__file__).resolve().parent.parent


def test_plan_json_parses_and_lists_the_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "multiworker", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["stack"] == "multiworker"
    names = {r["inputs"].get("name") for r in plan["resources"] if r["type"] == "gcp:compute/instance:Instance"}
    assert names == {"multiworker-chief", "multiworker-worker-0", "multiworker-worker-1"}
    assert plan["hourly_usd"] > 0


def test_plan_text_shows_machines_accelerators_and_cost(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    assert "machineType=n1-standard-8" in out
    assert "guestAccelerators=1 x nvidia-tesla-t4" in out
    assert "onHostMaintenance=TERMINATE" in out
    assert "total" in out


def stand_in_agent(directory: Path) -> tuple[Path, str]:
    """An agent archive at the path shape nodes accept, that only reports it ran."""
    source = directory / "agent-source"
    source.mkdir()
    (source / "__main__.py").write_text("print('stand-in agent ran')\n")
    archive = directory / "trainstack" / "agent" / "trainstack-agent-0123456789abcdef.pyz"
    archive.parent.mkdir(parents=True)
    zipapp.create_archive(source, archive)
    return archive, hashlib.sha256(archive.read_bytes()).hexdigest()


def test_plan_out_writes_each_boot_script_the_plan_sets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainstack.cloud.planning import text_digest

    for stack, names in [("multiworker", ["cluster-node.sh"]), ("tpu", ["tpu-vm.sh"])]:
        out = tmp_path / stack
        assert main(["plan", "--stack", stack, "--out", str(out), "--json"]) == 0
        scripts = json.loads(capsys.readouterr().out)["scripts"]
        assert sorted(p.name for p in out.iterdir()) == names
        # The files are the scripts the plan hashes, byte for byte.
        assert {name: text_digest((out / name).read_text()) for name in names} == {
            name: scripts[name] for name in names
        }


@pytest.mark.parametrize("digest_matches", [True, False])
def test_the_script_plan_out_writes_runs_only_a_verified_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], digest_matches: bool
) -> None:
    """The written cluster-node.sh, run as a VM runs it: it fetches the agent its metadata
    names, runs it when its sha256 matches, and otherwise stops the machine without running it."""
    assert main(["plan", "--stack", "multiworker", "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    archive, digest = stand_in_agent(tmp_path)
    attributes = "/computeMetadata/v1/instance/attributes"
    stops = tmp_path / "self-stops.log"
    with scripted_server() as metadata:
        metadata.answer(f"{attributes}/trainstack-agent", (200, str(archive).encode()))
        metadata.answer(
            f"{attributes}/trainstack-agent-sha256", (200, (digest if digest_matches else "0" * 64).encode())
        )
        env = {
            "PATH": os.environ["PATH"],
            "TRAINSTACK_METADATA_ROOT": f"{metadata.root}/computeMetadata/v1",
            "TRAINSTACK_STATE_DIR": str(tmp_path / "state"),
            "TRAINSTACK_SELF_STOP_LOG": str(stops),
        }
        result = subprocess.run(
            ["bash", str(tmp_path / "out" / "cluster-node.sh")], env=env, capture_output=True, text=True, timeout=60
        )
    assert metadata.requests
    assert all(r["headers"].get("Metadata-Flavor") == "Google" for r in metadata.requests)
    if digest_matches:
        assert (result.returncode, result.stdout) == (0, "stand-in agent ran\n"), result.stderr
        assert not stops.exists()
    else:
        assert result.returncode == 1
        assert "stand-in agent ran" not in result.stdout
        assert "does not match its sha256 in metadata" in result.stderr
        assert stops.read_text().endswith(" stop boot-script\n")


@pytest.mark.slow
def test_validate_runs_as_a_module_with_no_credentials(tmp_path: Path) -> None:
    """The command a user types, in a subprocess with no cloud environment at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "PULUMI_"))}

    def trainstack(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "trainstack", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )

    result = trainstack("plan", "--stack", "paramserver")
    assert result.returncode == 0, result.stderr
    assert "paramserver-ps-0" in result.stdout
    bad = write_stack(tmp_path, {**BASE_CONFIG, "trainstack:zone": "mars-north1-a"})
    result = trainstack("validate", "--stack-file", str(bad))
    assert result.returncode == 1
    assert "trainstack:zone: zone mars-north1-a is not in gcp:region us-central1" in result.stderr
    assert "Traceback" not in result.stderr


# Random stack files: anything YAML can hold, at every level where a user writes values.
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 5000), st.floats(allow_nan=True), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)
known_keys = st.sampled_from(
    [
        "trainstack:cluster",
        "trainstack:tpu",
        "trainstack:notebook",
        "trainstack:job",
        "trainstack:budget",
        "trainstack:zone",
        "trainstack:labels",
        "gcp:project",
        "gcp:region",
        "trainstack:storage",
        "trainstack:name",
    ]
)


def _perturbed_base(draw: st.DrawFn) -> dict[str, object]:
    config: dict[str, object] = json.loads(json.dumps(BASE_CONFIG))
    for _ in range(draw(st.integers(1, 4))):
        key = draw(known_keys)
        if draw(st.booleans()) and isinstance(config.get(key), dict):
            inner = dict(config[key])  # type: ignore[arg-type]
            inner[
                draw(
                    st.sampled_from(["chief", "workers", "parameter_servers", "strategy", "count", "name", "type", "x"])
                )
            ] = draw(values)
            config[key] = inner
        else:
            config[key] = draw(values)
    return config


random_stacks = st.one_of(st.composite(_perturbed_base)(), st.dictionaries(st.text(max_size=20), values, max_size=5))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=random_stacks)
def test_random_stack_files_never_produce_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, object]
) -> None:
    path = write_stack(tmp_path, config)
    code = main(["validate", "--stack-file", str(path)])
    captured = capsys.readouterr()
    assert code in (0, 1)
    if code == 1:
        problem_lines = captured.err.splitlines()[1:]
        assert problem_lines
        assert all(line.startswith("  ") and ": " in line for line in problem_lines)


@pytest.mark.parametrize("out", ["/etc/passwd", "/proc/no-such/dir"])
def test_plan_out_to_a_file_or_an_impossible_place_is_one_line_and_exit_1(
    out: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: `plan --out /etc/passwd` ended in a FileExistsError traceback."""
    assert main(["plan", "--stack", "dev", "--out", out]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"trainstack: --out {out}: ")
    assert len(err.splitlines()) == 1


def console_command() -> str:
    """The `trainstack` command scripts/bootstrap installs beside this interpreter."""
    command = Path(sys.executable).parent / "trainstack"
    assert command.exists(), "scripts/bootstrap installs the project (pip install --editable .)"
    return str(command)


def test_the_console_command_runs_the_same_cli(tmp_path: Path) -> None:
    completed = subprocess.run(
        [console_command(), "validate", "--stack", "dev"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("stack dev is valid")
    failed = subprocess.run([console_command(), "validate", "--stack", "no-such-stack"], capture_output=True, text=True)
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr


def test_the_console_command_completes_subcommands_and_stack_flags(tmp_path: Path) -> None:
    """argcomplete's protocol: the shell sets COMP_LINE/COMP_POINT and reads the candidates."""

    def complete(line: str) -> list[str]:
        out = tmp_path / "completions"
        environment = {
            **os.environ,
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
            "_ARGCOMPLETE_IFS": "\n",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
        }
        subprocess.run([console_command()], env=environment, check=True, timeout=60)
        return out.read_text().split()

    assert complete("trainstack pl") == ["plan"]
    assert "--stack" in complete("trainstack validate --st")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--preempt", "chief", "--preempt-after", "20"],
            "chief is not a Spot VM, so it is never preempted; Spot nodes: worker-0, worker-1",
        ),
        (
            ["--preempt", "worker-9", "--preempt-after", "20"],
            "the cluster has no such node; its nodes: chief, worker-0, worker-1",
        ),
        (["--preempt", "worker-0"], "--preempt and --preempt-after go together"),
        (["--preempt", "worker-0,worker-0", "--preempt-after", "5"], "a node is named twice"),
        (["--preempt", "x;rm -rf ~", "--preempt-after", "5"], "node names as the cluster has them"),
        (["--preempt", "worker-0", "--preempt-after", "-5"], "seconds, more than 0 and at most 86400"),
    ],
)
def test_local_preempt_refuses_what_cannot_be_preempted_before_starting_anything(
    arguments: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workdir = tmp_path / "run"
    # argparse refuses a malformed value itself (exit 2); the rest is refused by `local`.
    refused_by_argparse = "-5" in arguments or "x;rm -rf ~" in arguments
    with pytest.raises(SystemExit) if refused_by_argparse else contextlib.nullcontext():
        code = main(["local", "--stack", "multiworker", "--workdir", str(workdir), *arguments])
        assert code == 2
    error = capsys.readouterr().err
    assert message in error
    assert "Traceback" not in error
    assert not workdir.exists(), "nothing may start for a refused --preempt"


def test_local_refuses_an_agent_time_scale_that_is_not_a_factor_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINSTACK_AGENT_TIME_SCALE", "10")
    workdir = tmp_path / "run"
    assert main(["local", "--stack", "multiworker", "--workdir", str(workdir)]) == 2
    error = capsys.readouterr().err
    assert "TRAINSTACK_AGENT_TIME_SCALE must be a factor from 0.05 to 1" in error
    assert "Traceback" not in error
    assert not workdir.exists()


@pytest.mark.parametrize("verb", ["submit", "jobs", "cancel", "tune", "zones"])
def test_a_command_documented_by_its_module_shows_the_docstring_as_written(
    verb: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its --help opens with the module's docstring, every line as the module writes it (a
    wrapped help text would join the docstring's lists and examples into one paragraph)."""
    import importlib

    monkeypatch.setenv("COLUMNS", "200")
    module = importlib.import_module(f"trainstack.commands.{'jobs' if verb == 'cancel' else verb}")
    with pytest.raises(SystemExit) as exit_:
        main([verb, "--help"])
    assert exit_.value.code == 0
    assert (module.__doc__ or "").strip() in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ("build --stack dev --tag .bad", "argument --tag: '.bad' is not a Docker tag: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'"),
        ("tune status --stack dev --study 9x", "argument --study: '9x': a study's name is a letter, then up to 63 letters, digits or '_' (its trials are jobs named <study>_t<N>)"),
        ("logs --stack dev --freshness 3y", "argument --freshness: '3y' is not a duration like 30m, 6h or 2d"),
        ("logs --stack dev --limit x", "argument --limit: 'x' is not a whole number"),
        ("cost --stack dev --run-hours x", "argument --run-hours: 'x' is not a number of hours"),
        ("start --stack dev --timeout x", "argument --timeout: 'x' is not a number of seconds"),
        ("tune status --stack dev --poll x", "argument --poll: 'x' is not a number of seconds"),
    ],
)  # fmt: skip
def test_an_option_of_the_wrong_form_is_one_usage_line_naming_it(
    argv: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv.split())
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {said}")


@pytest.mark.parametrize(
    ("flag", "low", "high"),
    [("--epochs", 1, 100_000), ("--image-size", 16, 1024), ("--batch-size-per-replica", 1, 65_536)],
)
def test_local_takes_a_trainer_setting_at_either_end_of_its_range_and_names_the_range_past_it(
    flag: str, low: int, high: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same ranges a stack file and the trainer's flags take (trainstack_contract.Bound).
    parser = build_parser()
    dest = flag.removeprefix("--").replace("-", "_")
    for value in (low, high):
        assert getattr(parser.parse_args(["local", "--stack", "dev", flag, str(value)]), dest) == value
    for value in (low - 1, high + 1):
        with pytest.raises(SystemExit):
            parser.parse_args(["local", "--stack", "dev", flag, str(value)])
        assert f"{value} is not between {low} and {high}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["local", "--stack", "dev", flag, "ten"])
    assert "'ten' is not a whole number" in capsys.readouterr().err

"""`trainstack local` of a TPU stack: the TPU VM's own boot script and agent on this machine,
the built-in trainer on the CPU standing in for TPUStrategy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainstack.commands.main import main
from trainstack.localrun.nodes import TPU_STAND_IN_WORK, TrainerOverrides, tpu_stand_in
from trainstack.localrun.run import LocalStackRun
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack
from trainstack_contract import FLAGS, LAYOUT, MIRRORED, TPU_NODE

TPU_ARGS = ["--model", "resnet50", "--epochs", "10", "--strategy", "tpu", "--tpu", "local", "--image-size", "224"]


def flag_values(args: list[str]) -> dict[str, str]:
    return dict(zip(args[::2], args[1::2], strict=True))


def test_the_built_in_trainer_trains_with_mirrored_over_logical_cpus_in_place_of_the_tpu() -> None:
    args, [note] = tpu_stand_in(TPU_ARGS, TrainerOverrides(), builtin=True, accelerator_type="v2-8")
    values = flag_values(args)
    assert FLAGS.tpu not in values
    assert values[FLAGS.strategy] == MIRRORED
    assert int(values[FLAGS.logical_cpus]) >= 2, "more than one replica, as a TPU has more than one core"
    assert values[FLAGS.model] == "resnet50"
    for flag, value in TPU_STAND_IN_WORK.items():
        assert values[flag] == value
    assert "TPUStrategy" in note
    assert "not exercised" in note


def test_the_command_lines_own_values_win_over_the_stand_ins_smaller_work() -> None:
    args, [note] = tpu_stand_in(TPU_ARGS, TrainerOverrides({FLAGS.epochs: "3"}), builtin=True, accelerator_type="v2-8")
    assert flag_values(args)[FLAGS.epochs] == "3"
    assert "--epochs 2" not in note


def test_a_teams_own_code_runs_as_it_is_and_the_note_says_where_it_fails() -> None:
    args, [note] = tpu_stand_in(["--tpu", "local", "--epochs", "3"], TrainerOverrides(), False, "v3-8")
    assert args == ["--tpu", "local", "--epochs", "3"]
    assert "TPUClusterResolver" in note


def test_local_refuses_to_preempt_a_tpu_vm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["local", "--stack", "tpu", "--workdir", str(tmp_path), "--preempt", "tpu", "--preempt-after", "5"])
    assert code == 2
    assert "is a TPU VM" in capsys.readouterr().err


@pytest.mark.slow
def test_the_shipped_tpu_stacks_job_runs_to_succeeded_through_the_tpu_vms_boot_script(tmp_path: Path) -> None:
    cfg, _ = load_stack(STACKS_DIR / "Pulumi.tpu.yaml")
    # The stack's job with a smaller model: ResNet-50 takes minutes to build on this CPU
    # (`trainstack local --stack tpu` trains it as shipped).
    run = LocalStackRun(resolve_stack(cfg), tmp_path / "run", TrainerOverrides({FLAGS.model: "cnn"}), echo=False)
    assert run.script.name == "tpu-vm.sh"
    result = run.start().wait(timeout=600)
    assert result.succeeded, "\n".join(result.logs[TPU_NODE])
    assert list(result.node_status) == [TPU_NODE]
    metrics = json.loads((Path(result.job_dir) / LAYOUT.metrics).read_text())
    assert metrics["replicas"] == 2
    # The TPU VM releases itself as on_finish says, through the agent's TPU path.
    assert [line.split()[1:] for line in result.self_stops] == [["stop", TPU_NODE]]

"""Spot preemption, run for real: the stack's own boot scripts on this machine (`trainstack
local`), a node preempted as Compute Engine does it (its metadata says preempted, SIGTERM,
SIGKILL after a grace), and the chief bringing it back through the local stand-in for the
Compute Engine API, whose start call boots the node again with the same boot script.

The preemption is triggered by what the job has done (a finished epoch), never by a clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from polling import wait_until

from stack_helpers import SHORT_RESUMABLE_JOB
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.outcome import LocalStackRunResult
from trainstack.localrun.run import LocalStackRun
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack

pytestmark = pytest.mark.slow

DEADLINE_SECONDS = 600


def stack_with(name: str, directory: Path, **cluster: Any):  # type: ignore[no-untyped-def]
    """A shipped stack, with ``cluster`` keys changed."""
    document = yaml.safe_load((STACKS_DIR / f"Pulumi.{name}.yaml").read_text())
    document["config"]["trainstack:cluster"].update(cluster)
    path = directory / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_stack(path)[0]


def wait_for_run(run: LocalStackRun, what: str, done: Callable[[], bool]) -> None:
    """Until ``done()``, while the run's chief goes on; its log in the failure."""

    def chief_ended() -> str | None:
        return None if run.supervisor.running("chief") else "the chief ended early:\n" + "\n".join(run.nodes[0].lines)

    try:
        wait_until(done, what, DEADLINE_SECONDS, interval=0.2, gone_wrong=chief_ended)
    except AssertionError as error:
        raise AssertionError(f"{error}\n" + "\n".join(run.nodes[0].lines)) from None


def epochs_completed(run: LocalStackRun) -> int:
    progress = Path(run.job_dir) / "progress.json"
    try:
        return int(json.loads(progress.read_text()).get("epochs_completed", 0))
    except (OSError, ValueError):
        return 0


def history(result: LocalStackRunResult, node: str) -> list[str]:
    status = result.node_status[node]
    assert status is not None, f"{node} wrote no status"
    return [entry["state"] for entry in status["history"]]


def test_a_preempted_multiworker_spot_worker_is_started_again_and_the_job_resumes(tmp_path: Path) -> None:
    cfg = stack_with("multiworker", tmp_path)
    run = LocalStackRun(resolve_stack(cfg), tmp_path / "run", TrainerOverrides(SHORT_RESUMABLE_JOB), echo=False).start()
    wait_for_run(run, "a finished epoch", lambda: epochs_completed(run) >= 1)
    run.preempt("worker-0")
    result = run.wait(timeout=DEADLINE_SECONDS)

    assert result.succeeded, "\n".join(result.logs["chief"])
    metrics = json.loads((Path(result.job_dir) / "metrics.json").read_text())
    assert metrics["epochs_resumed"] >= 1
    assert metrics["replicas"] == 3
    assert history(result, "worker-0") == ["RUNNING", "PREEMPTED", "RUNNING", "SUCCEEDED"]
    assert result.start_calls == ["POST multiworker-worker-0/start"]
    # The survivors restarted their trainers rather than failing.
    for node in ("chief", "worker-1"):
        assert history(result, node)[-1] == "SUCCEEDED"
        assert any("restart 1 of at most" in line for line in result.logs[node]), node
    assert len(result.self_stops) == 3


TEAM_PACKAGE = Path(__file__).resolve().parents[1] / "examples" / "team_project" / "keras_team"
EXAMPLE_PACKAGE = Path(__file__).resolve().parents[1] / "examples" / "tabular_mlp"


def team_stack(directory: Path, package: Path, module: str, args: list[str]):  # type: ignore[no-untyped-def]
    """A chief and one Spot worker running a team's own package."""
    document = yaml.safe_load((STACKS_DIR / "Pulumi.ownpackage.yaml").read_text())
    document["config"]["trainstack:job"] = {"name": "team", "package": str(package), "module": module, "args": args}
    path = directory / "Pulumi.team.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_stack(path)[0]


def second_epoch_began(run: LocalStackRun) -> bool:
    """Keras prints "Epoch 2/N" once the first epoch's callbacks (BackupAndRestore's backup
    among them) have run."""
    return any(line.startswith("Epoch 2/") for line in run.supervisor.lines("chief"))


@pytest.mark.parametrize(
    ("package", "module", "args", "result"),
    [
        # A team's code that knows nothing of trainstack: MWMS and BackupAndRestore, nothing else.
        (TEAM_PACKAGE, "keras_team.task", ["--epochs", "4", "--steps-per-epoch", "100"], "result.json"),
        (EXAMPLE_PACKAGE, "tabular_mlp.task", ["--epochs", "4", "--steps-per-epoch", "100"], "summary.json"),
    ],
    ids=["team-package", "tabular-example"],
)
def test_a_teams_own_trainer_resumes_from_its_backup_after_a_preemption(
    tmp_path: Path, package: Path, module: str, args: list[str], result: str
) -> None:
    """Defect: recovery hinged on the trainer exiting 75, a code no team's trainer knows; a
    team's package ended FAILED after its worker was preempted and started again."""
    cfg = team_stack(tmp_path, package, module, args)
    run = LocalStackRun(resolve_stack(cfg), tmp_path / "run", TrainerOverrides(), echo=False).start()
    job_dir = Path(run.job_dir)
    wait_for_run(run, "the first epoch's end", lambda: second_epoch_began(run))
    run.preempt("worker-0")
    outcome = run.wait(timeout=DEADLINE_SECONDS)

    assert outcome.succeeded, "\n".join(outcome.logs["chief"])
    assert history(outcome, "worker-0")[:3] == ["RUNNING", "PREEMPTED", "RUNNING"]
    assert outcome.start_calls == ["POST team-worker-0/start"]
    document = json.loads((job_dir / result).read_text())
    first_epoch = document.get("first_epoch", document.get("epochs_resumed"))
    assert first_epoch is not None, document
    assert first_epoch >= 1, document
    # The chief's code was started again after its peer was lost, whatever it exited with.
    assert any("restart 1 of at most" in line for line in outcome.logs["chief"])


def test_a_preempted_parameter_server_worker_is_started_again_and_the_job_succeeds(tmp_path: Path) -> None:
    cfg = stack_with("paramserver", tmp_path)
    overrides = {**SHORT_RESUMABLE_JOB, "--epochs": "4", "--steps-per-epoch": "100"}
    run = LocalStackRun(resolve_stack(cfg), tmp_path / "run", TrainerOverrides(overrides), echo=False).start()
    wait_for_run(run, "a finished epoch", lambda: epochs_completed(run) >= 1)
    run.preempt("worker-0")
    result = run.wait(timeout=DEADLINE_SECONDS)

    assert result.succeeded, "\n".join(result.logs["chief"])
    assert result.start_calls == ["POST paramserver-worker-0/start"]
    # The coordinator carried on without worker-0 and took it back once it was started
    # again; should the job end first, worker-0 stays stopped and PREEMPTED (no billing
    # but its disk), which is also right.
    worker = history(result, "worker-0")
    assert worker[:2] == ["RUNNING", "PREEMPTED"], worker
    assert worker[2:] in ([], ["RUNNING", "SUCCEEDED"]), worker
    assert {result.node_status[node]["state"] for node in ("chief", "worker-1", "ps-0")} == {"SUCCEEDED"}  # type: ignore[index]


def test_a_node_preempted_more_than_max_restarts_times_fails_the_job_and_every_node_is_released(
    tmp_path: Path,
) -> None:
    cfg = stack_with("multiworker", tmp_path, max_restarts=1)
    # Far longer than the test: the job must still be training at the second preemption,
    # which ends it.
    overrides = {**SHORT_RESUMABLE_JOB, "--epochs": "5000"}
    run = LocalStackRun(resolve_stack(cfg), tmp_path / "run", TrainerOverrides(overrides), echo=False).start()
    wait_for_run(run, "a finished epoch", lambda: epochs_completed(run) >= 1)
    run.preempt("worker-0")

    def back_at_work() -> bool:
        text = "\n".join(run.supervisor.lines("worker-0"))
        return text.count("starting the job") >= 2 and run.supervisor.running("worker-0")

    wait_for_run(run, "worker-0 started again", back_at_work)
    run.preempt("worker-0")
    result = run.wait(timeout=DEADLINE_SECONDS)

    assert result.job_status is not None
    assert result.job_status["state"] == "FAILED"
    reason = result.job_status.get("reason", "")
    assert "worker-0" in reason, result.job_status
    assert "cluster.max_restarts (1)" in reason, result.job_status
    assert result.start_calls == ["POST multiworker-worker-0/start"], "no start after the bound"
    # The chief and the surviving worker release themselves; worker-0 was stopped by its
    # preemption and nothing started it again.
    released = {line.split()[-1] for line in result.self_stops}
    assert released == {"chief", "worker-1"}, result.self_stops
    assert all(code is not None for code in result.exit_codes.values()), "a node was left running"
    assert history(result, "worker-0")[-1] == "PREEMPTED"

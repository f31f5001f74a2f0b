"""The nodes' one choice between a rehearsed start and a fresh one (trainer.warm_agreement),
on a real job directory, each node an Agreement of its own as each node's trainer makes one."""

from __future__ import annotations

import concurrent.futures
import itertools
from pathlib import Path

from trainer import jobdir, warm_agreement
from trainer.jobdir import JobLayout
from trainer.strategy import ClusterInfo

CLUSTER = {"chief": ["10.0.0.2:2222"], "worker": ["10.0.0.3:2222", "10.0.0.4:2222"]}
NODES = (("chief", 0), ("worker", 0), ("worker", 1))
NAMES = ("chief", "worker-0", "worker-1")
TOKEN = "00000000000000aa-00000000000000bb"


def layout(tmp_path: Path) -> JobLayout:
    root = str(tmp_path / "job")
    return JobLayout(
        root=root,
        backup_dir=f"{root}/backup",
        checkpoint_dir=f"{root}/checkpoints",
        log_dir=f"{root}/logs",
        model_dir=f"{root}/model",
        tmp_dir=f"{root}/tmp",
        metrics_path=f"{root}/metrics.json",
        progress_path=f"{root}/progress.json",
    )


class Ticks:
    """A clock that moves one second at each reading, and a sleep that counts: a wait's bound
    is reached after that many polls, whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = itertools.count()
        self.sleeps = 0

    def clock(self) -> float:
        return float(next(self.now))

    def sleep(self, _seconds: float) -> None:
        self.sleeps += 1


def node(tmp_path: Path, role: str, index: int, ticks: Ticks | None = None) -> warm_agreement.Agreement:
    cluster = ClusterInfo(cluster=CLUSTER, task_type=role, task_id=index)
    if ticks is None:
        return warm_agreement.Agreement(layout(tmp_path), cluster, claims_seconds=120, decision_seconds=240)
    return warm_agreement.Agreement(
        layout(tmp_path), cluster, clock=ticks.clock, sleep=ticks.sleep, claims_seconds=5, decision_seconds=10
    )


def role_of(name: str) -> tuple[str, int]:
    return NODES[NAMES.index(name)]


def all_at_once(tmp_path: Path, tokens: dict[str, str | None]) -> dict[str, bool]:
    agreements = {name: node(tmp_path, role, index) for (role, index), name in zip(NODES, tokens, strict=True)}
    with concurrent.futures.ThreadPoolExecutor(len(NODES)) as pool:
        futures = {name: pool.submit(agreements[name].agree, token) for name, token in tokens.items()}
        return {name: future.result(timeout=300) for name, future in futures.items()}


def test_nodes_that_rehearsed_together_all_start_with_the_rehearsal(tmp_path: Path) -> None:
    assert all_at_once(tmp_path, {"chief": TOKEN, "worker-0": TOKEN, "worker-1": TOKEN}) == {
        "chief": True,
        "worker-0": True,
        "worker-1": True,
    }


def test_one_fresh_worker_waits_until_no_node_holds_a_rehearsal_then_every_node_starts_afresh(
    tmp_path: Path,
) -> None:
    """Defect: the fresh worker made its strategy at once, while the chief's rehearsal still held
    the cluster: their collectives met, and the job failed."""
    agreements = {name: node(tmp_path, role, index) for (role, index), name in zip(NODES, NAMES, strict=True)}
    with concurrent.futures.ThreadPoolExecutor(len(NODES)) as pool:
        fresh = pool.submit(agreements["worker-0"].agree, None)
        holders = {name: pool.submit(agreements[name].agree, TOKEN) for name in ("chief", "worker-1")}
        # Both holders let their rehearsal go (each then replaces its process).
        assert {name: future.result(timeout=300) for name, future in holders.items()} == {
            "chief": False,
            "worker-1": False,
        }
        decision = jobdir.read_json(f"{layout(tmp_path).tmp_dir}/warm-start/decision.json")
        assert decision is not None
        assert decision["decision"] == "release"
        assert not fresh.done()
        # Their new processes hold none: now every node starts afresh, the waiting one too.
        again = {name: pool.submit(node(tmp_path, *role_of(name)).agree, None) for name in ("chief", "worker-1")}
        assert [future.result(timeout=300) for future in again.values()] == [False, False]
        assert fresh.result(timeout=300) is False
    decision = jobdir.read_json(f"{layout(tmp_path).tmp_dir}/warm-start/decision.json")
    assert decision is not None
    assert decision["decision"] == "fresh"


def test_fresh_nodes_start_together_once_every_claim_is_in(tmp_path: Path) -> None:
    ticks = Ticks()
    directory = f"{layout(tmp_path).tmp_dir}/warm-start"
    for worker in ("worker-0", "worker-1"):
        jobdir.write_json_atomically(f"{directory}/{worker}.json", {"rehearsal": None, "nonce": worker})
    assert node(tmp_path, "chief", 0, ticks).agree(None) is False
    assert ticks.sleeps == 0
    assert node(tmp_path, "worker", 0, ticks).agree(TOKEN) is False
    assert node(tmp_path, "worker", 1, ticks).agree(None) is False


def test_another_rehearsals_token_is_no_agreement(tmp_path: Path) -> None:
    other = "00000000000000cc-00000000000000dd"
    chosen = all_at_once(tmp_path, {"chief": TOKEN, "worker-0": TOKEN, "worker-1": other})
    assert set(chosen.values()) == {False}


def test_the_chief_lets_its_rehearsal_go_when_a_claim_never_comes(tmp_path: Path) -> None:
    ticks = Ticks()
    # worker-0 has claimed the chief's rehearsal; worker-1 never claims.
    directory = f"{layout(tmp_path).tmp_dir}/warm-start"
    claim = {"rehearsal": TOKEN, "nonce": "1" * 16, "waits_until": 4e9}
    jobdir.write_json_atomically(f"{directory}/worker-0.json", claim)
    assert node(tmp_path, "chief", 0, ticks).agree(TOKEN) is False
    assert 0 < ticks.sleeps <= 5
    decision = jobdir.read_json(f"{layout(tmp_path).tmp_dir}/warm-start/decision.json")
    assert decision == {"decision": "release", "rehearsal": None, "claims": {"worker-0": "1" * 16}}


def test_a_decision_of_another_start_is_not_taken_and_a_worker_that_gives_up_withdraws_its_claim(
    tmp_path: Path,
) -> None:
    directory = f"{layout(tmp_path).tmp_dir}/warm-start"
    # A rehearsed decision left by an earlier start, naming another process's nonce.
    stale = {"decision": "rehearsed", "rehearsal": TOKEN, "claims": {"worker-0": "0" * 16}}
    jobdir.write_json_atomically(f"{directory}/decision.json", stale)
    ticks = Ticks()
    assert node(tmp_path, "worker", 0, ticks).agree(TOKEN) is False
    assert ticks.sleeps > 0
    claim = jobdir.read_json(f"{directory}/worker-0.json")
    assert claim is not None
    assert claim["rehearsal"] is None


def test_a_lone_node_starts_with_its_rehearsal_without_any_file(tmp_path: Path) -> None:
    lone = ClusterInfo(cluster={"chief": ["10.0.0.2:2222"]}, task_type="chief", task_id=0)
    assert warm_agreement.Agreement(layout(tmp_path), lone).agree(TOKEN) is True
    assert not (tmp_path / "job").exists()


def test_the_agreements_files_go_with_the_job(tmp_path: Path) -> None:
    all_at_once(tmp_path, {"chief": TOKEN, "worker-0": TOKEN, "worker-1": TOKEN})
    warm_agreement.remove(layout(tmp_path))
    assert not (tmp_path / "job" / "tmp" / "warm-start").exists()


def test_a_decider_that_comes_as_a_claimants_wait_runs_out_decides_afresh(tmp_path: Path) -> None:
    """A claimant stops waiting at its bound: a "rehearsed" written after that would start the
    decider rehearsed and the claimant afresh, whose collectives never meet."""
    directory = f"{layout(tmp_path).tmp_dir}/warm-start"
    now = 1_000_000.0
    waiting = {"rehearsal": TOKEN, "nonce": "1" * 16, "waits_until": now + 60}
    nearly_over = {"rehearsal": TOKEN, "nonce": "2" * 16, "waits_until": now + 2}
    jobdir.write_json_atomically(f"{directory}/worker-0.json", waiting)
    jobdir.write_json_atomically(f"{directory}/worker-1.json", nearly_over)
    cluster = ClusterInfo(cluster=CLUSTER, task_type="chief", task_id=0)
    ticks = Ticks()
    chief = warm_agreement.Agreement(
        layout(tmp_path), cluster, clock=ticks.clock, wall_clock=lambda: now, sleep=ticks.sleep
    )
    assert chief.agree(TOKEN) is False
    decision = jobdir.read_json(f"{directory}/decision.json")
    assert decision is not None
    assert decision["decision"] == "release"
    # With time to spare on both, the same claims are agreed.
    jobdir.write_json_atomically(f"{directory}/worker-1.json", {**nearly_over, "waits_until": now + 60})
    assert chief.agree(TOKEN) is True


def test_a_decision_file_of_the_wrong_shape_is_no_decision(tmp_path: Path) -> None:
    """The job's own code can write its temporary directory: what it leaves there is not taken
    for a decision, and does not crash the trainer's start."""
    directory = f"{layout(tmp_path).tmp_dir}/warm-start"
    jobdir.write_json_atomically(f"{directory}/decision.json", {"decision": "rehearsed", "claims": ["worker-0"]})
    ticks = Ticks()
    assert node(tmp_path, "worker", 0, ticks).agree(TOKEN) is False
    assert ticks.sleeps > 0

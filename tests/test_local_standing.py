"""`trainstack local --standing`: the run's own plumbing, whatever the nodes' agent does between
jobs. Each node here runs a small boot script in place of the real one (the queue loop is the
agent's; it is tested there): the run names itself in standing.json while it is up, SIGUSR1
boots every node that has exited again, and the run ends once every node has exited."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from polling import wait_until

from stack_helpers import base_config, write_stack
from trainstack.cloud import bootscripts
from trainstack.commands.main import main
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.outcome import LocalExit
from trainstack.localrun.run import run_local
from trainstack.localrun.workdir import WORKDIR_MARKER
from trainstack.stackmodel.feasibility import parse_and_check
from trainstack.stackmodel.resolved import ResolvedStack, resolve_stack

# A hang guard, not a measure.
HANG_SECONDS = 120.0
IDLE_MINUTES = 3

# Each boot: the node's idle wait as its metadata says it, then "boot"; the chief ends at once,
# the workers once <workdir>/release exists; then "end".
FAKE_BOOT = f"""#!/bin/bash
state="$TRAINSTACK_STATE_DIR"
node=$(basename "$(dirname "$state")")
idle=$({sys.executable} -c 'import sys, urllib.request as u
r = u.Request(sys.argv[1] + "/instance/attributes/trainstack-idle-seconds", headers={{"Metadata-Flavor": "Google"}})
try:
    print(u.urlopen(r).read().decode())
except u.HTTPError as error:
    print(error.code)' "$TRAINSTACK_METADATA_ROOT")
echo "boot idle=$idle" >> "$state/boots"
if [ "$node" != chief ]; then
  while [ ! -e "$state/../../../release" ]; do sleep 0.05; done
fi
echo end >> "$state/boots"
"""


def standing_stack() -> ResolvedStack:
    """Chief and two workers, no job of their own: they wait for queued jobs IDLE_MINUTES."""
    config = base_config()
    config["trainstack:job"] = "none"
    config["trainstack:cluster"]["idle_minutes"] = IDLE_MINUTES
    return resolve_stack(parse_and_check("standing", config))


def boots(workdir: Path, node: str) -> list[str]:
    path = workdir / "nodes" / node / "state" / "boots"
    return path.read_text().splitlines() if path.exists() else []


def until(predicate: Any, what: str) -> None:
    wait_until(predicate, what, HANG_SECONDS, interval=0.05)


@pytest.fixture
def fake_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootscripts, "render", lambda *args, **kwargs: FAKE_BOOT)


@pytest.mark.slow
def test_a_standing_run_names_itself_wakes_exited_nodes_on_sigusr1_and_ends_when_all_have_exited(
    tmp_path: Path, fake_boot: None
) -> None:
    workdir = tmp_path / "work"
    standing = workdir / "standing.json"
    seen: dict[str, Any] = {}

    def drive() -> None:
        """What a user and `submit --local` do while the run is up."""
        try:
            until(standing.exists, "standing.json was not written")
            seen["record"] = json.loads(standing.read_text())
            until(lambda: boots(workdir, "chief")[-1:] == ["end"], "the chief did not end its first boot")
            seen["chief_before"] = boots(workdir, "chief")
            os.kill(os.getpid(), signal.SIGUSR1)
            until(lambda: len(boots(workdir, "chief")) == 4, "SIGUSR1 did not boot the exited chief again")
        finally:
            # The workers end: every node has exited, and the run with them.
            (workdir / "release").touch()

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    result = run_local(
        standing_stack(),
        workdir,
        TrainerOverrides(),
        echo=False,
        timeout=HANG_SECONDS,
        allow_shared_network=True,
        standing=True,
    )
    driver.join(HANG_SECONDS)
    assert seen["record"] == {"version": 1, "pid": os.getpid(), "stack": "standing"}
    assert seen["chief_before"] == [f"boot idle={IDLE_MINUTES * 60}", "end"]
    # Booted again through its boot script, with the same metadata; the workers, still up, were not.
    assert boots(workdir, "chief") == [f"boot idle={IDLE_MINUTES * 60}", "end"] * 2
    assert boots(workdir, "worker-0") == boots(workdir, "worker-1") == [f"boot idle={IDLE_MINUTES * 60}", "end"]
    assert result.exit_codes == {"chief": 0, "worker-0": 0, "worker-1": 0}
    assert not standing.exists()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


@pytest.mark.slow
def test_a_one_shot_run_runs_no_queue_and_writes_no_standing_record(tmp_path: Path, fake_boot: None) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / WORKDIR_MARKER).touch()
    (workdir / "release").touch()
    result = run_local(
        standing_stack(), workdir, TrainerOverrides(), echo=False, timeout=HANG_SECONDS, allow_shared_network=True
    )
    assert {n: boots(workdir, n) for n in result.exit_codes} == {n: ["boot idle=404", "end"] for n in result.exit_codes}
    assert not (workdir / "standing.json").exists()


def test_standing_needs_nodes_that_run_a_queue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = base_config()
    config["trainstack:job"] = "none"
    path = write_stack(tmp_path, config)
    assert main(["local", "--stack-file", str(path), "--standing", "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "--standing" in err
    assert "cluster.idle_minutes" in err
    assert "Traceback" not in err


def test_standing_tells_how_many_nodes_are_up_how_to_submit_and_when_they_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from trainstack.commands.local import standing_note
    from trainstack_contract.timescale import TIME_SCALE_VARIABLE

    monkeypatch.delenv(TIME_SCALE_VARIABLE, raising=False)
    note = standing_note(argparse.Namespace(workdir=None, stack="standing", stack_file=None), standing_stack())
    assert note == (
        f"standing: 3 nodes up; submit jobs with `trainstack submit --stack standing --local ...`; "
        f"they stop after {IDLE_MINUTES} idle minutes"
    )
    monkeypatch.setenv(TIME_SCALE_VARIABLE, "0.25")
    named = argparse.Namespace(workdir=tmp_path / "my work", stack=None, stack_file=tmp_path / "Pulumi.standing.yaml")
    note = standing_note(named, standing_stack())
    # The stack as the user named it: a stack file stays a stack file.
    assert (
        f"`trainstack submit --stack-file {tmp_path / 'Pulumi.standing.yaml'} --local --workdir '{tmp_path / 'my work'}' ...`"
        in note
    )
    assert note.endswith(f"they stop after {IDLE_MINUTES} idle minutes ({TIME_SCALE_VARIABLE}=0.25: 45 s here)")


def test_a_standing_run_stopped_by_a_signal_lists_its_jobs_and_says_how_to_resume_them(
    tmp_path: Path, fake_boot: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stopped by SIGTERM (a terminal's Ctrl-C is SIGINT, handled alike): the run ends with the
    jobs table and the command that resumes the queue, the standing one, not a one-shot run."""
    config = base_config()
    config["trainstack:job"] = "none"
    config["trainstack:cluster"]["idle_minutes"] = IDLE_MINUTES
    stack_file = write_stack(tmp_path, config, stack="standing")
    workdir = tmp_path / "work"

    def stop() -> None:
        until((workdir / "standing.json").exists, "standing.json was not written")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop, daemon=True).start()
    argv = ["local", "--stack-file", str(stack_file), "--standing", "--workdir", str(workdir)]
    code = main([*argv, "--allow-shared-network"])
    (workdir / "release").touch()
    out, err = capsys.readouterr()
    assert code == LocalExit.INTERRUPTED, err
    assert "standing: no job has run on this cluster yet" in out, out
    assert f"`trainstack local --stack-file {stack_file} --standing --workdir {workdir}`" in err, err


@pytest.mark.slow
def test_a_job_queued_as_every_node_idled_out_boots_them_again_rather_than_wait(
    tmp_path: Path, fake_boot: None
) -> None:
    """The idle-stop race, locally: the job reaches the queue after each node's last look and
    the wake finds them still up; when they have all stopped, the standing run boots them again
    for it, as `submit` starts a VM that stopped. Twice at most: these fake nodes never take it."""
    from trainstack.base.bucket import DirectoryBucket
    from trainstack.jobqueue.queue import submit

    stack = standing_stack()
    workdir = tmp_path / "work"

    def drive() -> None:
        try:
            until((workdir / "standing.json").exists, "standing.json was not written")
            until(lambda: boots(workdir, "chief")[-1:] == ["end"], "the chief did not end its first boot")
            bucket = workdir / "bucket" / stack.bucket_name
            submit(
                DirectoryBucket(bucket),
                "late",
                {"trainstack-job-mode": "package"},
                [],
                "2026-11-28T00:00:00Z",
                lambda e: False,
            )
        finally:
            (workdir / "release").touch()

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    result = run_local(
        stack, workdir, TrainerOverrides(), echo=False, timeout=HANG_SECONDS, allow_shared_network=True, standing=True
    )
    driver.join(HANG_SECONDS)
    for node in ("chief", "worker-0", "worker-1"):
        assert boots(workdir, node) == [f"boot idle={IDLE_MINUTES * 60}", "end"] * 3, node
    assert result.exit_codes == {"chief": 0, "worker-0": 0, "worker-1": 0}

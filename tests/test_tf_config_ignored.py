"""A team's code that ignores TF_CONFIG runs as one independent copy per node: `trainstack local`
says so in its run report, from the nodes' status objects, and still runs it (AI Platform did)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from stack_helpers import base_config, write_stack
from trainstack.base.project import PROJECT_ROOT
from trainstack.commands.main import main
from trainstack.localrun.outcome import LocalStackRunResult, report
from trainstack_agent.timings import Timings
from trainstack_contract.status import CLUSTER_PORT_WARNING, TF_CONFIG_DOCS
from trainstack_contract.timescale import TIME_SCALE_VARIABLE

# The sample in a few lines: it trains (sleeps) and saves its model to the job
# directory, building no strategy, unless --listen makes it start a server on its TF_CONFIG
# port as MultiWorkerMirroredStrategy does.
TEAM_TASK = """
import argparse, json, os, socket, time
parser = argparse.ArgumentParser()
parser.add_argument("--job-dir")
parser.add_argument("--seconds", type=float)
parser.add_argument("--listen", action="store_true")
args = parser.parse_args()
if args.listen:
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    server = socket.socket()
    server.bind(("0.0.0.0", int(config["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])))
    server.listen()
time.sleep(args.seconds)
export = os.path.join(args.job_dir, "keras_export")
os.makedirs(export, exist_ok=True)
with open(os.path.join(export, "saved_by"), "a") as handle:
    handle.write(os.environ["NODE_NAME"] + "\\n")
"""
# Every wait of the agent at a tenth of Compute Engine's: the shortest run it judges is 6 s.
TIME_SCALE = 0.1


def team_stack(tmp_path: Path, args: list[str]) -> Path:
    package = tmp_path / "code" / "team_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(TEAM_TASK)
    config = base_config()
    # A chief and a worker: MultiWorkerMirroredStrategy, TF_CONFIG on both.
    config["trainstack:cluster"]["workers"]["count"] = 1
    config["trainstack:job"] = {"name": "sample", "package": str(package), "module": "team_pkg.task", "args": args}
    return write_stack(tmp_path, config)


@pytest.mark.slow
@pytest.mark.parametrize("listens", [False, True], ids=["ignores-tf-config", "joins-the-cluster"])
def test_local_reports_code_that_ignored_tf_config_on_every_node_and_still_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, listens: bool
) -> None:
    monkeypatch.setenv(TIME_SCALE_VARIABLE, str(TIME_SCALE))
    seconds = Timings().cluster_port_min_run * TIME_SCALE + 2
    path = team_stack(tmp_path, ["--seconds", str(seconds), *(["--listen"] if listens else [])])
    workdir = tmp_path / "work"
    code = main(["local", "--stack-file", str(path), "--workdir", str(workdir)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "job SUCCEEDED" in out
    warnings = [line for line in out.splitlines() if line.startswith("warning")]
    if listens:
        assert warnings == []
        assert "joined the cluster" in out
        return
    # The report: one line, naming both nodes, what it means and where the docs say what to do.
    [warning] = warnings
    assert warning.startswith("warning: the job's code ignored TF_CONFIG on chief, worker-0 (")
    assert warning.endswith(f"(see {TF_CONFIG_DOCS})")
    # Each node's log said it, once.
    for node in ("chief", "worker-0"):
        boot_log = (workdir / "nodes" / node / "boot.log").read_text()
        assert boot_log.count("WARNING: the job's code ended (exit 0)") == 1, boot_log[-3000:]
    # As the issue saw: both copies wrote the one model directory.
    [saved_by] = workdir.glob("bucket/*/jobs/sample/keras_export/saved_by")
    assert sorted(saved_by.read_text().split()) == ["chief", "worker-0"]
    # `trainstack status --local` says it too, from the same status objects.
    assert main(["status", "--stack-file", str(path), "--local", "--workdir", str(workdir)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == warning


def test_the_run_report_says_which_nodes_ignored_tf_config_after_the_jobs_state(tmp_path: Path) -> None:
    warned = {"state": "SUCCEEDED", "exit_code": 0, "time": "t", "warnings": {CLUSTER_PORT_WARNING: "..."}}
    plain = {"state": "SUCCEEDED", "exit_code": 0, "time": "t"}
    result = LocalStackRunResult(
        job_status={"state": "SUCCEEDED", "exit_code": 0},
        node_status={"chief": warned, "worker-0": warned, "worker-1": plain},
        exit_codes={"chief": 0, "worker-0": 0, "worker-1": 0},
        self_stops=[],
        job_dir=tmp_path,
        logs={},
    )
    out = io.StringIO()
    report(result, out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "job SUCCEEDED"
    assert lines[1].startswith("warning: the job's code ignored TF_CONFIG on chief, worker-0 (")
    assert "all writing this job directory, all billed" in lines[1]
    assert TF_CONFIG_DOCS in lines[1]
    assert lines[2].startswith("  chief ")
    result.node_status = {"chief": plain, "worker-0": plain, "worker-1": plain}
    out = io.StringIO()
    report(result, out)
    assert "warning" not in out.getvalue()


def test_the_warnings_pointer_leads_to_what_a_trainer_must_do() -> None:
    from test_docs import anchors

    page, _, anchor = TF_CONFIG_DOCS.partition("#")
    assert anchor in anchors(PROJECT_ROOT / page)
    assert "Code that ignores TF_CONFIG" in (PROJECT_ROOT / page).read_text()

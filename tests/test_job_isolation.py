"""What one job's code can reach in a local run, which is as strict as Google Cloud: its own
directory but what the agents write there, its own token, and nothing of another job's, of the
queue or of the node's credentials. Run by the real boot script and agent (`trainstack local`,
as root, as a node runs)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from test_job_privileges import local_run, require_root

from trainstack.localrun.standins import LOCAL_TOKEN
from trainstack_contract import LAYOUT
from trainstack_contract.queue import INDEX_OBJECT

# Tries what a hostile job would, records each outcome in its own directory, says each refusal
# in its log, and exits 0.
ATTACKS_MODULE = """
import json, os, pathlib, sys, urllib.error, urllib.request
argv = sys.argv[1:]
job_dir = pathlib.Path(argv[argv.index("--job-dir") + 1])
bucket = job_dir.parent.parent
outcomes = {}

def attempt(name, action):
    try:
        action()
        outcomes[name] = "done"
    except PermissionError as error:
        outcomes[name] = "denied"
        print(f"denied: {name}: {error}", flush=True)
    except OSError as error:
        outcomes[name] = f"failed: {error}"

def forge(path):
    return lambda: pathlib.Path(path).write_text('{"state": "SUCCEEDED"}')

attempt("other_status", forge(job_dir / ".." / "other_job" / "status" / "job.json"))
attempt("queue_index", forge(bucket / "trainstack" / "queue" / "index.json"))
attempt("own_status", forge(job_dir / "status" / "job.json"))
attempt("own_status_renamed", lambda: (job_dir / "status").rename(job_dir / "status-moved"))
attempt("own_hypertune", forge(job_dir / "hypertune" / "chief.metrics"))
(job_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
attempt("own_checkpoint", forge(job_dir / "checkpoints" / "ckpt"))

def fetch(url):
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return {"status": answer.status, "body": answer.read().decode()}
    except urllib.error.HTTPError as error:
        print(f"denied: {url}: {error.code}", flush=True)
        return {"status": error.code, "body": ""}

account = "/computeMetadata/v1/instance/service-accounts/default/"
node_root = os.environ["TRAINSTACK_METADATA_ROOT"]
outcomes["node_token"] = fetch(node_root + "/instance/service-accounts/default/token")
outcomes["own_token"] = fetch("http://" + os.environ["GCE_METADATA_HOST"] + account + "token")
outcomes["own_account"] = fetch("http://" + os.environ["GCE_METADATA_HOST"] + account + "?recursive=true")
(job_dir / "outcomes.json").write_text(json.dumps(outcomes))
"""


@pytest.mark.slow
def test_a_jobs_code_is_denied_other_jobs_the_queue_its_own_status_and_the_nodes_token(tmp_path: Path) -> None:
    require_root()
    local = local_run(tmp_path, ATTACKS_MODULE, [])
    bucket = local.job_dir.parent.parent
    other = bucket / LAYOUT.jobs / "other_job" / LAYOUT.job_status
    other.parent.mkdir(parents=True)
    other.write_text('{"state": "QUEUED"}')
    index = bucket / INDEX_OBJECT
    index.parent.mkdir(parents=True)
    index.write_text('{"version": 1, "jobs": []}')
    result = local.start().wait(timeout=300)
    assert result.succeeded, result.logs
    outcomes = json.loads((result.job_dir / "outcomes.json").read_text())
    # Nothing of another job's, of the queue's or of what the agents write is the job's.
    for name in ("other_status", "queue_index", "own_status", "own_status_renamed", "own_hypertune"):
        assert outcomes[name] == "denied", name
    assert other.read_text() == '{"state": "QUEUED"}'
    assert index.read_text() == '{"version": 1, "jobs": []}'
    assert json.loads((result.job_dir / LAYOUT.job_status).read_text())["state"] == "SUCCEEDED"
    # Its own files are its own, while it runs; once it has ended, the agents' again.
    assert outcomes["own_checkpoint"] == "done"
    checkpoint = result.job_dir / "checkpoints" / "ckpt"
    assert checkpoint.stat().st_uid == 0
    assert not checkpoint.stat().st_mode & 0o022
    # The node's token is closed to it; its own place answers it as the metadata server would.
    assert outcomes["node_token"]["status"] == 403
    assert LOCAL_TOKEN not in json.dumps(outcomes)
    assert outcomes["own_account"]["status"] == 200
    assert json.loads(outcomes["own_account"]["body"])["email"].endswith(".iam.gserviceaccount.com")
    # A local directory job reaches no bucket: no token at all, said in one line.
    assert outcomes["own_token"]["status"] == 503
    log = "\n".join(result.logs["chief"])
    assert "denied: other_status: [Errno 13] Permission denied" in log
    assert "denied: queue_index: [Errno 13] Permission denied" in log


# Job A: leaves a daemon in a session of its own (setsid(1)) that, every 50 ms, reads the
# environment of every process it can and writes any secret it finds through a file it opened
# while the job ran; then job A ends.
LEAVER_MODULE = """
import os, pathlib, subprocess, sys
argv = sys.argv[1:]
job_dir = pathlib.Path(argv[argv.index("--job-dir") + 1])
daemon = '''
import os, pathlib, sys, time
found = open(sys.argv[1], "a", buffering=1)
while True:
    for entry in pathlib.Path("/proc").iterdir():
        try:
            for item in (entry / "environ").read_bytes().split(b"\\\\0"):
                if item.startswith(b"TEAM_B_RUN_LABEL="):
                    found.write(item.decode() + "\\\\n")
        except OSError:
            pass
    time.sleep(0.05)
'''
leaks = job_dir / "leaks.txt"
child = subprocess.Popen(["setsid", sys.executable, "-c", daemon, str(leaks)], start_new_session=True)
(job_dir / "daemon.pid").write_text(str(child.pid))
"""
# Job B, another team member's: holds a secret in its environment for a few seconds.
HOLDER_MODULE = """
import time
time.sleep(4)
"""


@pytest.mark.slow
def test_a_process_that_leaves_its_jobs_session_ends_with_the_job_and_never_sees_the_next(tmp_path: Path) -> None:
    """On a standing node, job A's code leaves a daemon behind in a session of its own; it ends
    with job A (its cgroup), so job B, run next as the same user, keeps its secret to itself."""
    from test_standing_queue import job_state, stack_config, standing_cluster, trainstack, until

    from stack_helpers import write_stack

    require_root()
    packages = {}
    for name, source in (("leaver", LEAVER_MODULE), ("holder", HOLDER_MODULE)):
        package = tmp_path / name / f"{name}_pkg"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "main.py").write_text(source)
        packages[name] = package
    stack_file = write_stack(tmp_path, stack_config("dev", idle_minutes=1), stack="team")
    workdir = tmp_path / "work"
    target = ["--stack-file", str(stack_file), "--local", "--workdir", str(workdir)]
    with standing_cluster(stack_file, workdir) as standing:
        for name, extra in (("leaver", []), ("holder", ["--env", "TEAM_B_RUN_LABEL=hunter2"])):
            package = packages[name]
            submitted = trainstack(
                "submit", *target, "--name", name, "--package", str(package), "--module", f"{name}_pkg.main", *extra
            )
            assert submitted.returncode == 0, submitted.stderr
        jobs = until(lambda: next(iter(workdir.glob("bucket/*/jobs")), None), "the bucket's jobs/", standing)
        until(lambda: job_state(jobs / "q2_holder") == "SUCCEEDED", "job B's end", standing)
        standing.send_signal(signal.SIGTERM)
        standing.communicate(timeout=120)
    assert job_state(jobs / "q1_leaver") == "SUCCEEDED"
    pid = int((jobs / "q1_leaver" / "daemon.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"job A's daemon {pid} outlived its job"
    leaks = jobs / "q1_leaver" / "leaks.txt"
    assert "hunter2" not in (leaks.read_text() if leaks.exists() else "")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True

"""`trainstack import` of AI Platform Training jobs: every scale tier, every legacy machine type
(from the catalog's table, with its caveats printed), and the gcloud command line that submitted
a job, with its package, module and arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trainstack.catalog import legacy_machine_types, load_catalog, scale_tiers
from trainstack.commands.main import main
from trainstack.jobcode.package import project_path
from trainstack.stackmodel.stackfile import load_stack

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"


def run_import(tmp_path: Path, source: Path, name: str, *extra: str) -> tuple[int, Path]:
    out = tmp_path / f"Pulumi.{name}.yaml"
    return main(["import", str(source), "--stack", name, "--out", str(out), *extra]), out


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def job_file(tmp_path: Path, **training_input: object) -> Path:
    """A job's config.yaml with these trainingInput fields."""
    return write(tmp_path, yaml.safe_dump({"trainingInput": training_input}))


def refused_import(tmp_path: Path, capsys: pytest.CaptureFixture[str], source: Path, name: str) -> str:
    """What the import of ``source`` says on stderr; it must exit 1 and write no stack file."""
    code, out = run_import(tmp_path, source, name)
    err = capsys.readouterr().err
    assert code == 1
    assert not out.exists()
    return err


def image_command(tmp_path: Path, args: str) -> Path:
    """A saved gcloud command line (submit.txt) that runs an image with these arguments."""
    command = (
        "gcloud ai-platform jobs submit training j --scale-tier basic --master-image-uri "
        f"us-central1-docker.pkg.dev/p-1/r/t:1 -- {args}\n"
    )
    return write(tmp_path, command, "submit.txt")


def config_of(out: Path) -> dict:
    return yaml.safe_load(out.read_text())["config"]


def imported_job(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, name: str) -> dict:
    """The trainstack:job of the stack imported from a gcloud command line, the import succeeding."""
    code, out = run_import(tmp_path, write(tmp_path, command, "submit.txt"), name)
    assert code == 0, capsys.readouterr().err
    return config_of(out)["trainstack:job"]


# (tier, chief machine, chief GPU, workers, parameter servers); BASIC_TPU has no cluster.
TIERS = [
    ("BASIC", "n1-standard-4", None, 0, 0),
    ("BASIC_GPU", "n1-standard-8", ("nvidia-tesla-t4", 1), 0, 0),
    ("STANDARD_1", "n1-standard-4", None, 4, 3),
    ("PREMIUM_1", "n1-standard-4", None, 19, 11),
]


@pytest.mark.parametrize(("tier", "machine", "gpu", "workers", "servers"), TIERS)
def test_every_gpu_and_cpu_scale_tier_imports_to_a_stack_that_validates(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tier: str,
    machine: str,
    gpu: tuple[str, int] | None,
    workers: int,
    servers: int,
) -> None:
    code, out = run_import(tmp_path, write(tmp_path, f"trainingInput: {{scaleTier: {tier}}}\n"), "tier")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    cluster = load_stack(out)[0].settings.cluster
    assert cluster is not None
    assert cluster.chief.machine_type == machine
    chief_gpu = cluster.chief.accelerator
    assert (None if chief_gpu is None else (chief_gpu.type, chief_gpu.count)) == gpu
    assert (cluster.workers.count if cluster.workers else 0) == workers
    assert (cluster.parameter_servers.count if cluster.parameter_servers else 0) == servers
    assert cluster.strategy == ("parameter_server" if servers else "auto")
    assert f"scaleTier {tier} is a master" in printed.out
    # A tier whose machines Google never published says so.
    assert ("check it" in printed.out) == scale_tiers()[tier].inferred


def test_the_basic_tpu_tier_is_a_tpu_vm_in_a_zone_that_offers_v2_8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_import(tmp_path, write(tmp_path, "trainingInput: {scaleTier: BASIC_TPU}\n"), "tpu")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    settings = load_stack(out)[0].settings
    assert settings.cluster is None
    assert settings.tpu is not None
    assert settings.tpu.accelerator_type == "v2-8"
    assert settings.zone in load_catalog().tpu_zones_for("v2", 8)
    assert "the master VM's role moves onto the TPU VM's host" in printed.out


def test_a_predefined_tier_says_which_cluster_keys_it_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path, "trainingInput: {scaleTier: BASIC, masterType: n1-highmem-16, workerCount: 2}\n")
    code, out = run_import(tmp_path, source, "basic")
    assert code == 0
    assert "scaleTier BASIC fixes the cluster, so masterType, workerCount are not used" in capsys.readouterr().out
    assert config_of(out)["trainstack:cluster"]["chief"]["machine_type"] == "n1-standard-4"


LEGACY = sorted(legacy_machine_types().values(), key=lambda legacy: legacy.name)


@pytest.mark.parametrize("legacy", LEGACY, ids=[legacy.name for legacy in LEGACY])
def test_every_legacy_machine_type_becomes_its_compute_engine_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], legacy
) -> None:
    source = write(tmp_path, f"trainingInput: {{scaleTier: CUSTOM, masterType: {legacy.name}}}\n")
    code, out = run_import(tmp_path, source, "legacy")
    printed = capsys.readouterr()
    chief = config_of(out)["trainstack:cluster"]["chief"]
    assert chief["machine_type"] == legacy.machine_type
    assert chief.get("accelerator") == ({"type": legacy.gpu, "count": legacy.gpu_count} if legacy.gpu else None)
    assert f"masterType {legacy.name} (AI Platform's own type) becomes {legacy.machine_type}" in printed.out
    assert ("not confirmed from a Google table" in printed.out) == legacy.inferred
    if legacy.name == "complex_model_l_gpu":
        # Eight K80s became eight T4s, which no N1 machine takes: written, and the key is named.
        assert code == 1
        assert "trainstack:cluster.chief.accelerator" in printed.err
        assert "8 T4 do not fit one N1 machine" in printed.out
    else:
        assert code == 0, printed.err


def test_the_legacy_table_points_at_machines_and_current_gpus_the_catalog_knows() -> None:
    # Every type and tier AI Platform Training accepted (seed 000; the REST reference's list).
    assert set(legacy_machine_types()) == {
        "standard", "large_model", "complex_model_s", "complex_model_m", "complex_model_l",
        "standard_gpu", "complex_model_m_gpu", "complex_model_l_gpu", "standard_p100", "complex_model_m_p100",
        "standard_v100", "large_model_v100", "complex_model_m_v100", "complex_model_l_v100",
    }  # fmt: skip
    assert set(scale_tiers()) == {"BASIC", "BASIC_GPU", "BASIC_TPU", "STANDARD_1", "PREMIUM_1"}
    catalog = load_catalog()
    for legacy in legacy_machine_types().values():
        assert legacy.machine_type in catalog.machine_types, legacy
        if legacy.gpu:
            assert not catalog.gpus[legacy.gpu].retired, legacy
        if legacy.retired_gpu:
            assert catalog.gpus[legacy.retired_gpu].retired, legacy
    for tier in scale_tiers().values():
        for machine in (tier.master_type, tier.worker_type, tier.parameter_server_type):
            assert machine is None or machine in legacy_machine_types() or machine == "cloud_tpu", tier


def test_the_region_of_the_job_chooses_a_zone_that_offers_its_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(
        tmp_path,
        "trainingInput: {scaleTier: CUSTOM, region: europe-west4, masterType: n1-standard-8,"
        " masterConfig: {acceleratorConfig: {count: 1, type: NVIDIA_TESLA_V100}}}\n",
    )
    code, out = run_import(tmp_path, source, "eu")
    assert code == 0, capsys.readouterr().err
    settings = load_stack(out)[0].settings
    assert settings.zone.startswith("europe-west4-")
    assert settings.zone in load_catalog().gpu_zones["nvidia-tesla-v100"]


def package(tmp_path: Path) -> Path:
    trainer = tmp_path / "trainer"
    trainer.mkdir()
    (trainer / "__init__.py").write_text("")
    (trainer / "task.py").write_text("print('training')\n")
    return trainer


SEED_VALUES = {"$JOB_NAME": "flowers_2019", "$APP_PACKAGE_PATH": "trainer/", "$MAIN_APP_MODULE": "trainer.task"}


@pytest.mark.parametrize("example", ["seed000_gcloud_config.txt", "seed000_gcloud_flags.txt"])
def test_the_seed_gcloud_command_lines_import_with_package_module_and_user_args(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str
) -> None:
    """The seeds' commands with their variables' values written in, as the refusal asks."""
    trainer = package(tmp_path)
    text = (FIXTURES / example).read_text().replace("--job-dir $JOB_DIR \\\n", "")
    for variable, value in SEED_VALUES.items():
        text = text.replace(variable, value)
    command = tmp_path / example
    command.write_text(text)
    (tmp_path / "seed000_custom_t4.yaml").write_text((FIXTURES / "seed000_custom_t4.yaml").read_text())
    code, out = run_import(tmp_path, command, "seed-cli")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    cfg = load_stack(out)[0]
    assert cfg.settings.job is not None
    assert cfg.settings.job.name == "flowers_2019"
    # Written from the project root, as every path of a stack file, never absolute.
    assert not Path(cfg.settings.job.package or "/").is_absolute()
    assert project_path(cfg.settings.job.package or "").resolve() == trainer.resolve()
    assert cfg.settings.job.module == "trainer.task"
    assert cfg.settings.job.args == ["--user_arg_1", "value_1", "--user_arg_n", "value_n"]
    # Defect: code written for AI Platform's TensorFlow 2.x runtimes (tf.keras as Keras 2) needed
    # edits under TensorFlow 2.21, where tf.keras is Keras 3.
    assert cfg.settings.job.env == {"TF_USE_LEGACY_KERAS": "1"}
    assert 'notice: job.env: {TF_USE_LEGACY_KERAS: "1"} is set: AI Platform\'s TensorFlow 2.x runtimes' in printed.out
    assert 'job.env: {TF_USE_LEGACY_KERAS: "1"} is set' in out.read_text(), "said in the stack file too"
    cluster = cfg.settings.cluster
    assert cluster is not None
    assert cluster.workers is not None
    assert cluster.parameter_servers is not None
    assert cluster.chief.accelerator is not None
    assert cluster.chief.accelerator.count == 4
    assert (cluster.workers.count, cluster.workers.machine_type, cluster.parameter_servers.count) == (
        9,
        "n1-highcpu-16",
        3,
    )


@pytest.mark.parametrize("example", ["seed000_gcloud_config.txt", "seed000_gcloud_flags.txt"])
def test_a_saved_commands_shell_variables_are_refused_all_named_never_taken_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, example: str
) -> None:
    """Defect: the import expanded $VARIABLES from the environment it ran in, so a value the
    user never saw (a password in $DATABASE_URL) went into the stack file and metadata."""
    monkeypatch.setenv("JOB_NAME", "flowers_2019")
    monkeypatch.setenv("APP_PACKAGE_PATH", "trainer/")
    monkeypatch.setenv("MAIN_APP_MODULE", "trainer.task")
    monkeypatch.setenv("JOB_DIR", "gs://b/jobs")
    err = refused_import(tmp_path, capsys, FIXTURES / example, "seed-cli")
    assert (
        "the command uses shell variables ($APP_PACKAGE_PATH, $JOB_DIR, $MAIN_APP_MODULE): an import "
        "takes no value from this environment"
    ) in err, err
    assert "write each value into the command" in err
    assert "trainstack:secrets" in err


# Values that carry a credential whatever the variable they came from: each is refused.
CREDENTIALS = {
    "database URL": "postgres://trainer:Tr0ub4dor3@db.internal:5432/runs",
    "proxy URL": "http://svc:hunter2pw@proxy.corp:3128",
    "Sentry DSN": "https://5f0e2a9c41d04b7e@o12345.ingest.sentry.io/678",
    "GitHub token": "ghp_R4nd0mT0k3nV4lu3Xy9Qw2Er5Ty8Ui1Op3As",
    "AWS key": "AKIAIOSFODNN7EXAMPLE",
    "Google token": "ya29.a0AfH6SMBxYzQw8rT5uV2nL0pK9jH3gF",
    "Slack token": "xoxb-123456789012-abcdefghijkl",
    "API key": "sk-proj-Xy7Qw2Er5Ty8Ui1Op3AsDf6Gh",
    "JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "random base64": "q8Zr3TfL1xWm9Kp2Vb7Nc4Hd6Jg0Ys5A",
    "hex": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
}


@pytest.mark.parametrize("kind", CREDENTIALS)
def test_a_credential_in_a_saved_command_is_refused_whatever_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Defect: $DATABASE_URL, $HTTPS_PROXY and $SENTRY_DSN (passwords in URLs) were copied into
    job.args and so into metadata: the list of secret-sounding names missed them."""
    secret = CREDENTIALS[kind]
    err = refused_import(tmp_path, capsys, image_command(tmp_path, f"--epochs 3 --db={secret}"), "leaky")
    assert "the job's argument 3 (after --) holds what looks like a credential" in err, err
    assert secret not in err
    assert "trainstack:secrets" in err


def test_a_credential_in_a_job_file_is_refused_naming_where_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    training_input = {
        "scaleTier": "BASIC",
        "region": "us-central1",
        "masterConfig": {"imageUri": "us-central1-docker.pkg.dev/p-1/r/t:1"},
        "args": ["--epochs", "3", "--proxy", CREDENTIALS["proxy URL"]],
    }
    err = refused_import(tmp_path, capsys, write(tmp_path, json.dumps({"trainingInput": training_input})), "leaky")
    assert "trainingInput.args[3] holds what looks like a credential (a URL with a user or password" in err, err
    assert "hunter2pw" not in err


def test_values_that_carry_no_credential_still_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--train-files=gs://cloud-samples-data/ai-platform/census/data/adult.data.csv",
        "--model-name=MNIST_V2_Resnet50_BatchNorm_EXP12_Run3_Seed42",
        "--learning-rate=0.001",
        "--url=https://example.com/data?x=1",
    ]
    command = (
        "gcloud ai-platform jobs submit training j --scale-tier basic --master-image-uri "
        f"us-central1-docker.pkg.dev/team-proj-1/images/trainer:v2 -- {' '.join(args)}\n"
    )
    assert imported_job(tmp_path, capsys, command, "clean")["args"] == args


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (
            "gcloud ai-platform jobs submit training j --master-machine-type $MACHINE\n",
            "shell variables ($MACHINE)",
        ),
        ("gcloud ai-platform jobs submit training j --scale-tier basic --frobnicate 3\n", "--frobnicate: not a flag"),
        (
            "gcloud ai-platform jobs submit training j --master-accelerator 4xT4 --scale-tier custom\n",
            "count=N,type=GPU",
        ),
        (
            "gcloud ai-platform jobs submit training j --package-path trainer --scale-tier basic\n",
            "without --module-name",
        ),
        ("gcloud ai-platform jobs submit training j --scale-tier 'basic\n", "does not parse as a shell"),
        ("gcloud ai-platform jobs submit training j --master-machine-type $(touch pwned)\n", "an import runs nothing"),
    ],
)
def test_a_command_line_that_cannot_become_a_stack_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str, words: str
) -> None:
    monkeypatch.delenv("MACHINE", raising=False)
    err = refused_import(tmp_path, capsys, write(tmp_path, command, "submit.txt"), "bad")
    assert words in err
    assert "Traceback" not in err


def test_an_image_command_line_runs_the_image_with_its_args(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    image = "us-central1-docker.pkg.dev/team-proj-1/images/trainer:v2"
    command = (
        "gcloud ai-platform jobs submit training nightly_1 --region us-central1 --scale-tier basic-gpu "
        f"--master-image-uri {image} -- --epochs 3\n"
    )
    job = imported_job(tmp_path, capsys, command, "nightly")
    assert job == {"name": "nightly_1", "image": image, "args": ["--epochs", "3"]}


def test_a_line_break_in_a_copied_value_stays_inside_its_comment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: a newline in jobDir left the `# notice:` comment and added a top-level
    `secretsprovider:` line to the written stack file, which validate then called valid."""
    hostile = "gs://b/x\nsecretsprovider: gcpkms://projects/attacker-proj/locations/global/keyRings/k/cryptoKeys/c"
    source = job_file(tmp_path, scaleTier="BASIC", region="us-central1", jobDir=hostile)
    code, out = run_import(tmp_path, source, "hostile", "--project", "team-proj-1")
    assert code == 0, capsys.readouterr().err
    document = yaml.safe_load(out.read_text())
    assert set(document) == {"config"}
    assert not any(line.startswith("secretsprovider") for line in out.read_text().splitlines())
    assert "jobDir gs://b/x\\nsecretsprovider" in out.read_text()


@pytest.mark.parametrize(
    "variable", ["PULUMI_CONFIG_PASSPHRASE", "WANDB_API_KEY", "HF_TOKEN", "DB_PASSWORD", "DB_PASS", "GH_PAT"]
)
def test_a_variable_that_holds_a_secret_is_refused_not_written_into_the_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """Defect: a saved command using $PULUMI_CONFIG_PASSPHRASE put the passphrase into the
    stack file and the trainer-args metadata with only a notice."""
    monkeypatch.setenv(variable, "s3cr3t-value")
    err = refused_import(tmp_path, capsys, image_command(tmp_path, f"--key ${variable}"), "leaky")
    assert f"${variable} looks like a secret" in err
    assert f"trainstack:secrets.{variable}" in err
    assert "s3cr3t-value" not in err


def test_every_variable_is_reported_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: the import stopped at the first unset variable, so a user fixed them one run at a time."""
    source = write(
        tmp_path,
        "gcloud ai-platform jobs submit training j --scale-tier custom --master-machine-type $MACHINE "
        "--master-image-uri us-central1-docker.pkg.dev/p-1/r/t:1 -- --epochs $EPOCHS --lr ${LR} --seed $1\n",
        "submit.txt",
    )
    code, _ = run_import(tmp_path, source, "unset")
    err = capsys.readouterr().err
    assert code == 1
    assert "the command uses shell variables ($1, $EPOCHS, $MACHINE, ${LR})" in err, err


def test_every_retired_gpu_of_every_pool_is_named_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: an import named the master's K80s, and the workers' only on the next try."""
    # Two pools of two K80s each (each pool its own mapping: the import refuses YAML aliases).
    k80s = {
        f"{pool}Config": {"acceleratorConfig": {"type": "NVIDIA_TESLA_K80", "count": 2}}
        for pool in ("master", "worker")
    }
    pools = {"masterType": "n1-standard-8", "workerType": "n1-standard-8", "workerCount": 2}
    source = job_file(tmp_path, scaleTier="CUSTOM", **pools, **k80s)
    err = refused_import(tmp_path, capsys, source, "k80")
    assert "masterConfig.acceleratorConfig names NVIDIA_TESLA_K80" in err
    assert "workerConfig.acceleratorConfig names NVIDIA_TESLA_K80" in err


def test_every_field_left_behind_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: pythonVersion (and any field the import did not know) vanished without a word."""
    left_behind = {"pythonVersion": "3.7", "runtime_version": "2.1", "network": "projects/p/global/networks/n"}
    source = job_file(
        tmp_path, scaleTier="BASIC", region="us-central1", scheduling={"maxRunningTime": "7200s"}, **left_behind
    )
    code, out = run_import(tmp_path, source, "dropped")
    assert code == 0
    text = out.read_text()
    for words in (
        "pythonVersion 3.7 is not used",
        "runtimeVersion 2.1 is not used",
        "no key for them: network\n",
    ):
        assert words in text, words


def test_a_worker_pools_boot_disk_type_is_named_when_left_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pools = [
        {
            "machine_spec": {"machine_type": "n1-standard-8"},
            "replica_count": 1,
            "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 200},
            "container_spec": {"image_uri": "us-docker.pkg.dev/acme-project/repo/trainer:v1"},
        }
    ]
    code, out = run_import(tmp_path, write(tmp_path, json.dumps(pools), "pools.json"), "disks")
    assert code == 0
    assert "worker pool 0: disk_spec.boot_disk_type pd-ssd is not imported" in out.read_text()
    assert yaml.safe_load(out.read_text())["config"]["trainstack:cluster"]["chief"]["disk_gb"] == 200


def test_max_running_time_becomes_the_clusters_run_time_cap_and_prices_one_run_by_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: scheduling.maxRunningTime was dropped: the team's 2-hour cap became the 24-hour
    default, and `cost` priced one run at most at 24 hours."""
    from trainstack.stackmodel.cost import cost_report
    from trainstack.stackmodel.resolved import resolve_stack

    code, out = run_import(tmp_path, FIXTURES / "max_running_time_2h.yaml", "capped")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert config_of(out)["trainstack:cluster"]["max_run_hours"] == 2
    assert "notice: scheduling.maxRunningTime 7200s is cluster.max_run_hours 2" in printed.out
    stack = resolve_stack(load_stack(out)[0])
    assert stack.cluster is not None
    assert stack.cluster.max_run_seconds == 7200
    report = cost_report(stack)
    assert report.hourly_usd is not None
    assert report.one_run_max_usd is not None
    assert report.one_run_max_usd == pytest.approx(report.hourly_usd * 2)


@pytest.mark.parametrize(
    ("duration", "hours", "words"),
    [
        ("5400s", 1.5, None),
        ("100s", 0.03, "scheduling.maxRunningTime 100s rounded up to 0.03 h"),
        ("3600.5s", 1.01, "rounded up to 1.01 h"),
        ("0s", 0.01, "below Compute Engine's shortest run-time cap: max_run_hours 0.01"),
        ("99999999999s", 2880, "past Compute Engine's longest run-time cap (120 days): max_run_hours 2880"),
    ],
)
def test_a_run_time_cap_is_rounded_up_to_the_keys_step_and_kept_within_its_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], duration: str, hours: float, words: str | None
) -> None:
    source = job_file(tmp_path, scaleTier="BASIC", scheduling={"maxRunningTime": duration})
    code, out = run_import(tmp_path, source, "capped")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert config_of(out)["trainstack:cluster"]["max_run_hours"] == hours
    if words is not None:
        assert words in printed.out, printed.out


@pytest.mark.parametrize("duration", ["2h", "7200", 7200, "-5s", "7200s\n"])
def test_a_run_time_cap_that_is_not_a_duration_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], duration: object
) -> None:
    source = job_file(tmp_path, scaleTier="BASIC", scheduling={"maxRunningTime": duration})
    code, _ = run_import(tmp_path, source, "capped")
    err = capsys.readouterr().err
    assert code == 1
    [line] = err.splitlines()
    assert "scheduling.maxRunningTime" in line
    assert "is not a duration: seconds followed by s, such as 7200s" in line


def test_a_tpu_jobs_run_time_cap_is_the_tpu_vms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = FIXTURES / "seed001_tpu_accelerator.yaml"
    document = yaml.safe_load(source.read_text())
    document["trainingInput"]["scheduling"] = {"maxRunningTime": "10800s"}
    code, out = run_import(tmp_path, write(tmp_path, yaml.safe_dump(document)), "tpucap")
    assert code == 0, capsys.readouterr().err
    assert config_of(out)["trainstack:tpu"]["max_run_hours"] == 3


def test_a_config_without_code_says_to_set_job_env_with_the_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_import(tmp_path, FIXTURES / "max_running_time_2h.yaml", "nocode")
    assert code == 0
    assert "trainstack:job" not in config_of(out)
    assert 'with the package, set job.env: {TF_USE_LEGACY_KERAS: "1"}' in capsys.readouterr().out


def test_a_tensorflow_1_runtimes_package_gets_no_legacy_keras_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = package(tmp_path)
    source = write(
        tmp_path,
        f"gcloud ai-platform jobs submit training old_1 --region us-central1 --scale-tier basic "
        f"--runtime-version 1.15 --package-path {trainer} --module-name trainer.task\n",
        "submit.txt",
    )
    code, out = run_import(tmp_path, source, "old")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "env" not in config_of(out)["trainstack:job"]
    assert "TF_USE_LEGACY_KERAS" not in printed.out


# --- trainingInput.hyperparameters: the study, written beside the stack -----------------------
TUNED_JOB = """\
jobId: census_hp_1
trainingInput:
  scaleTier: BASIC
  region: us-central1
  hyperparameters:
    goal: MAXIMIZE
    maxTrials: 4
    maxParallelTrials: 2
    hyperparameterMetricTag: epoch_accuracy
    params:
    - parameterName: batch-size
      type: INTEGER
      minValue: 8
      maxValue: 256
      scaleType: UNIT_LINEAR_SCALE
    - parameterName: learning-rate
      type: DOUBLE
      minValue: 1e-2
      maxValue: 0.1
      scaleType: UNIT_LOG_SCALE
"""


def test_a_jobs_tuning_spec_is_written_beside_the_stack_for_trainstack_tune(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainstack.tuning.spec import read_spec, spec_from_mapping

    source = write(tmp_path, TUNED_JOB)
    code, out = run_import(tmp_path, source, "census")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    spec_file = tmp_path / "Pulumi.census.hptuning.yaml"
    command = f"trainstack tune --stack-file {out} --spec {spec_file}"
    assert f"notice: hyperparameters (tuning) are in {spec_file}: run the study with `{command}`" in printed.out
    assert f"wrote {spec_file}" in printed.out
    # The study as written, normalised (camelCase, defaults written out), under trainingInput as
    # Google's samples ship hptuning_config.yaml: `tune --spec` and gcloud --config both read it.
    spec = read_spec(spec_file)
    assert spec == spec_from_mapping(yaml.safe_load(TUNED_JOB)["trainingInput"]["hyperparameters"])
    assert spec.params[1].min_value == 0.01
    text = spec_file.read_text()
    first, *rest = text.splitlines()
    assert first == (
        f"# Hyperparameter tuning spec imported from config.yaml by `trainstack import`; run it with `{command}`"
    )
    assert not any(line.startswith("#") for line in rest)
    assert yaml.safe_load(text)["trainingInput"]["hyperparameters"]["maxFailedTrials"] == 0
    # The stack itself is the job's one trial's machines, and its notice stays with it.
    assert config_of(out)["trainstack:cluster"]["chief"]["machine_type"] == "n1-standard-4"
    assert f"# notice: hyperparameters (tuning) are in {spec_file}" in out.read_text()
    assert "not imported" not in printed.out


def test_the_tune_command_names_a_stack_in_stacks_by_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainstack.stackmodel.stackfile as stackfile

    monkeypatch.setattr(stackfile, "STACKS_DIR", tmp_path / "stacks")
    assert main(["import", str(write(tmp_path, TUNED_JOB)), "--stack", "team"]) == 0, capsys.readouterr().err
    spec_file = tmp_path / "stacks" / "Pulumi.team.hptuning.yaml"
    assert spec_file.is_file()
    assert (tmp_path / "stacks" / "Pulumi.team.yaml").is_file()
    assert f"`trainstack tune --stack team --spec {spec_file}`" in capsys.readouterr().out


def test_a_saved_command_lines_config_brings_its_tuning_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, TUNED_JOB, "hptuning_config.yaml")
    command = write(
        tmp_path,
        "gcloud ai-platform jobs submit training census_1 --region us-central1 "
        "--master-image-uri us-central1-docker.pkg.dev/team-project/trainers/census:1 --config hptuning_config.yaml\n",
        "submit.txt",
    )
    code, _ = run_import(tmp_path, command, "census")
    assert code == 0, capsys.readouterr().err
    assert [p.parameter_name for p in read_spec_of(tmp_path / "Pulumi.census.hptuning.yaml")] == [
        "batch-size",
        "learning-rate",
    ]


def read_spec_of(path: Path) -> list:
    from trainstack.tuning.spec import read_spec

    return list(read_spec(path).params)


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        ("maxTrials: 4", "maxTrials: 100000", "trainingInput.hyperparameters.maxTrials: 100000 is outside 1 to 1000"),
        (
            "minValue: 8",
            "minValue: 300",
            "trainingInput.hyperparameters.params[0]: minValue 300 is not below maxValue 256",
        ),
        ("type: DOUBLE", "type: FLOAT", "trainingInput.hyperparameters.params[1].type: 'FLOAT' is not one of"),
        ("parameterName: batch-size", "parameterName: --batch-size;rm", "params[0].parameterName: '--batch-size;rm'"),
    ],
)
def test_a_tuning_spec_with_problems_fails_the_import_one_line_each_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, line: str
) -> None:
    source = write(tmp_path, TUNED_JOB.replace(old, new))
    code, _out = run_import(tmp_path, source, "census")
    err = capsys.readouterr().err
    assert code == 1
    (problem,) = err.splitlines()
    assert problem.startswith(f"trainstack: import {source}: "), problem
    assert line in problem, problem
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_every_problem_of_a_tuning_spec_is_named_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path, TUNED_JOB.replace("goal: MAXIMIZE", "goal: UP").replace("maxTrials: 4", "maxTrials: 0"))
    assert run_import(tmp_path, source, "census")[0] == 1
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 2)[2].split(":")[0] for line in lines] == [
        "trainingInput.hyperparameters.goal",
        "trainingInput.hyperparameters.maxTrials",
    ]


def test_an_existing_tuning_spec_is_kept_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path, TUNED_JOB)
    spec_file = tmp_path / "Pulumi.census.hptuning.yaml"
    spec_file.write_text("# a study of the team's own\n")
    code, out = run_import(tmp_path, source, "census")
    assert code == 1
    assert f"{spec_file} exists; not overwriting it (--force to replace it)" in capsys.readouterr().err
    assert spec_file.read_text() == "# a study of the team's own\n"
    assert not out.exists()
    code, out = run_import(tmp_path, source, "census", "--force")
    assert code == 0, capsys.readouterr().err
    assert read_spec_of(spec_file)[0].parameter_name == "batch-size"


def test_a_job_without_a_tuning_spec_writes_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path, "trainingInput:\n  scaleTier: BASIC\n  hyperparameters: null\n")
    code, _out = run_import(tmp_path, source, "plain")
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Pulumi.plain.yaml", "config.yaml"]

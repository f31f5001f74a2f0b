"""`trainstack import`: a stack from Vertex AI worker pools, checked like any stack, with what
cannot carry over reported."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainstack.commands.main import main
from trainstack.stackmodel.stackfile import load_stack

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"


def run_import(tmp_path: Path, source: Path, name: str, *extra: str) -> tuple[int, Path]:
    out = tmp_path / f"Pulumi.{name}.yaml"
    return main(["import", str(source), "--stack", name, "--out", str(out), *extra]), out


def test_the_seed_worker_pools_import_to_a_stack_that_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_import(tmp_path, FIXTURES / "seed004_worker_pools.json", "flowers", "--project", "my-project-123")
    assert code == 0, capsys.readouterr().err
    cfg = load_stack(out)[0]
    cluster = cfg.settings.cluster
    assert cluster is not None
    assert cluster.chief.machine_type == "n1-standard-4"
    assert cluster.workers is not None
    assert (cluster.workers.count, cluster.workers.machine_type) == (1, "n1-standard-4")
    assert cluster.strategy == "multi_worker_mirrored"
    assert cluster.parameter_servers is None
    assert cfg.settings.job is not None
    assert (
        cfg.settings.job.image
        == "us-central1-docker.pkg.dev/my-project-123/flower-app/flower_image_distributed:multi_machine"
    )
    assert "named the project as {PROJECT_ID}" in capsys.readouterr().out


def test_a_custom_job_with_gpus_parameter_servers_and_an_evaluator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_import(tmp_path, FIXTURES / "custom_job_gpus.yaml", "vision", "--project", "team-proj-1")
    printed = capsys.readouterr().out
    assert code == 0
    cluster = load_stack(out)[0].settings.cluster
    assert cluster is not None
    assert cluster.chief.accelerator is not None
    assert (cluster.chief.accelerator.type, cluster.chief.accelerator.count) == ("nvidia-tesla-v100", 2)
    assert cluster.chief.disk_gb == 300
    assert cluster.workers is not None
    assert cluster.workers.count == 3
    assert cluster.parameter_servers is not None
    assert (cluster.parameter_servers.count, cluster.parameter_servers.machine_type) == (2, "n1-highmem-8")
    assert cluster.strategy == "parameter_server"
    job = yaml.safe_load(out.read_text())["config"]["trainstack:job"]
    assert job == {
        "name": "vision",
        "image": "us-central1-docker.pkg.dev/team-proj-1/vision/trainer:v3",
        "args": ["--epochs", "5"],
    }
    assert "pool 3 (evaluator) is not imported" in printed
    assert "runs other code than pool 0" in printed, "the evaluator's image has no args: other code"


def test_what_the_new_machines_cannot_do_is_reported_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "k80.json"
    source.write_text(
        '[{"replica_count": 1, "machine_spec": {"machine_type": "n1-standard-8", '
        '"accelerator_type": "NVIDIA_TESLA_K80", "accelerator_count": 1}}]'
    )
    code, out = run_import(tmp_path, source, "old")
    err = capsys.readouterr().err
    assert code == 1, "written, for the user to fix"
    assert out.exists(), "written, for the user to fix"
    assert "trainstack:cluster.chief.accelerator.type" in err
    assert "retired" in err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("trainingInput: {scaleTier: GOLD_1}\n", "scaleTier GOLD_1: not an AI Platform scale tier; valid: BASIC,"),
        (
            "trainingInput: {scaleTier: CUSTOM, masterType: standard_gpu,"
            " masterConfig: {acceleratorConfig: {count: 2, type: NVIDIA_TESLA_T4}}}\n",
            "masterType standard_gpu comes with 1 GPU(s) of its own",
        ),
        (
            "trainingInput: {scaleTier: CUSTOM, masterType: n1-standard-8, workerType: cloud_tpu, workerCount: 2}\n",
            "workerCount 2 with workerType cloud_tpu",
        ),
        (
            "trainingInput: {scaleTier: CUSTOM, masterType: n1-standard-8, workerType: cloud_tpu, workerCount: 1,"
            " parameterServerCount: 1, parameterServerType: n1-highmem-8}\n",
            "a cloud_tpu worker with parameter servers: AI Platform rejected this",
        ),
        (
            "trainingInput: {scaleTier: CUSTOM, masterType: n1-standard-8,"
            " masterConfig: {acceleratorConfig: {count: 1, type: NVIDIA_TESLA_K80}}}\n",
            "NVIDIA_TESLA_K80, which Google has retired; the nearest current GPU is nvidia-tesla-t4",
        ),
        (
            "trainingInput: {scaleTier: CUSTOM, masterType: n1-standard-8, workerType: cloud_tpu, workerCount: 1,"
            " workerConfig: {acceleratorConfig: {type: TPU_V2, count: 32}}}\n",
            "TPU_V2 and count 8",
        ),
        ("{jobSpec: {}}\n", "no worker_pool_specs found"),
        ("[{replica_count: 2, machine_spec: {machine_type: n1-standard-4}}]\n", "replica_count must be 1"),
        ("[{machine_spec: {machine_type: n1-standard-4, accelerator_type: NVIDIA_TESLA_T4}}]\n", "accelerator_count"),
        ("[{replica_count: 1, machine_spec: {machine_type: n1-standard-4}}]\n" * 1 + "x: [\n", "neither YAML nor JSON"),
    ],
)
def test_a_file_that_cannot_become_a_stack_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    source = tmp_path / "job.yaml"
    source.write_text(text)
    code, out = run_import(tmp_path, source, "bad")
    err = capsys.readouterr().err
    assert code == 1
    assert words in err
    assert "Traceback" not in err
    assert not out.exists()


def test_an_existing_stack_file_is_not_overwritten_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "Pulumi.flowers.yaml"
    out.write_text("# mine\n")
    assert run_import(tmp_path, FIXTURES / "seed004_worker_pools.json", "flowers")[0] == 1
    assert out.read_text() == "# mine\n"
    assert "not overwriting" in capsys.readouterr().err
    assert run_import(tmp_path, FIXTURES / "seed004_worker_pools.json", "flowers", "--force")[0] == 0
    assert out.read_text() != "# mine\n"


@pytest.mark.parametrize(
    "args", [["--name", "Bad Name"], ["--name", "../up"], ["--name", "ok", "--zone", "us-central1-a\n"]]
)
def test_bad_names_are_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["import", str(FIXTURES / "seed004_worker_pools.json"), *args])
    assert exit_.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_the_first_seed_000_config_imports_with_its_machines_and_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_import(tmp_path, FIXTURES / "seed000_custom_t4.yaml", "seed-t4")
    assert code == 0, capsys.readouterr().err
    cfg = load_stack(out)[0]
    cluster = cfg.settings.cluster
    assert cluster is not None
    assert cluster.chief.machine_type == "n1-highcpu-16"
    assert cluster.chief.accelerator is not None
    assert (cluster.chief.accelerator.type, cluster.chief.accelerator.count) == ("nvidia-tesla-t4", 4)
    assert cluster.workers is not None
    assert cluster.workers.accelerator is not None
    assert (cluster.workers.count, cluster.workers.machine_type, cluster.workers.accelerator.count) == (
        9,
        "n1-highcpu-16",
        4,
    )
    assert cluster.parameter_servers is not None
    assert (cluster.parameter_servers.count, cluster.parameter_servers.machine_type) == (3, "n1-highmem-8")
    assert cluster.strategy == "parameter_server"
    assert cfg.settings.job is None
    assert "job.package" in capsys.readouterr().out


def test_both_gpu_spellings_import_the_same(tmp_path: Path) -> None:
    outs = []
    for spelling in ("NVIDIA_TESLA_V100", "nvidia-tesla-v100"):
        source = tmp_path / f"{spelling}.yaml"
        source.write_text(
            "trainingInput: {scaleTier: CUSTOM, masterType: n1-standard-8,"
            f" masterConfig: {{acceleratorConfig: {{count: 1, type: {spelling}}}}}}}\n"
        )
        code, out = run_import(tmp_path / spelling, source, "v100")
        assert code == 0
        outs.append(yaml.safe_load(out.read_text())["config"])
    assert outs[0] == outs[1]
    assert outs[0]["trainstack:cluster"]["chief"]["accelerator"] == {"type": "nvidia-tesla-v100", "count": 1}


@pytest.mark.parametrize("example", ["seed001_tpu_legacy_master.yaml", "seed001_tpu_accelerator.yaml"])
def test_a_cloud_tpu_worker_becomes_a_tpu_vm_and_the_master_moves_onto_its_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str
) -> None:
    code, out = run_import(tmp_path, FIXTURES / example, "seed-tpu", "--zone", "us-central1-b")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    cfg = load_stack(out)[0]
    assert cfg.settings.cluster is None
    assert cfg.settings.tpu is not None
    assert cfg.settings.tpu.accelerator_type == "v2-8"
    assert "the master VM's role moves onto the TPU VM's host" in printed.out


def test_the_second_seed_000_config_maps_legacy_k80_machines_to_t4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_import(tmp_path, FIXTURES / "seed000_legacy_gpu.yaml", "legacy")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    cluster = load_stack(out)[0].settings.cluster
    assert cluster is not None
    assert cluster.workers is not None
    assert cluster.parameter_servers is not None
    for node in (cluster.chief, cluster.workers):
        assert node.machine_type == "n1-standard-16"
        assert node.accelerator is not None
        assert (node.accelerator.type, node.accelerator.count) == (
            "nvidia-tesla-t4",
            4,
        )
    assert cluster.workers.count == 9
    assert (cluster.parameter_servers.count, cluster.parameter_servers.machine_type) == (3, "n1-highmem-8")
    assert "it carried nvidia-tesla-k80, retired, so the nearest current GPU at the same count" in printed.out
    # The notices stay in the stack file, for whoever reads it next.
    assert "# notice: masterType complex_model_m_gpu (AI Platform's own type) becomes n1-standard-16" in out.read_text()


@pytest.mark.parametrize("name", ["Vision_Team", "team.v2"])
def test_a_stack_name_validate_takes_is_one_import_takes(tmp_path: Path, name: str) -> None:
    """Defect: `validate --stack Vision_Team` was valid, `import --stack Vision_Team` refused the name."""
    code, out = run_import(tmp_path, FIXTURES / "seed004_worker_pools.json", name, "--project", "my-project-123")
    assert code == 0
    assert main(["validate", "--stack-file", str(out)]) == 0


def test_a_custom_jobs_timeout_and_container_env_carry_over_but_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = yaml.safe_load((FIXTURES / "custom_job_gpus.yaml").read_text())
    document["jobSpec"]["scheduling"] = {"timeout": "7200s"}
    document["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"] = [
        {"name": "TF_USE_LEGACY_KERAS", "value": "1"},
        {"name": "WANDB_API_KEY", "value": "k-0123456789"},
    ]
    source = tmp_path / "job.yaml"
    source.write_text(yaml.safe_dump(document))
    code, out = run_import(tmp_path, source, "capped")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    settings = load_stack(out)[0].settings
    assert settings.cluster is not None
    assert settings.cluster.max_run_hours == 2
    assert settings.job is not None
    assert settings.job.env == {"TF_USE_LEGACY_KERAS": "1"}
    assert "k-0123456789" not in out.read_text()
    assert "k-0123456789" not in printed.out
    assert "trainstack:secrets.WANDB_API_KEY" in printed.out
    assert "scheduling.timeout 7200s is cluster.max_run_hours 2" in printed.out

"""`trainstack init`: a first stack file from a few choices, that validates, explains every key
it sets, and never overwrites a file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainstack.commands.main import main
from trainstack.stackmodel.stackfile import load_stack


def init(tmp_path: Path, *options: str, stack: str = "team") -> tuple[int, Path]:
    out = tmp_path / f"Pulumi.{stack}.yaml"
    return main(["init", "--stack", stack, *options, "--out", str(out)]), out


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ((), {"chief": "n1-standard-8"}),
        (("--gpu", "nvidia-tesla-t4:1", "--workers", "2", "--spot"), {"chief": "n1-standard-8", "workers": 2}),
        (("--gpu", "nvidia-tesla-a100:8", "--workers", "1"), {"chief": "a2-highgpu-8g", "workers": 1}),
        (("--gpu", "nvidia-l4:1", "--spot"), {"chief": "g2-standard-4"}),
        (
            (
                "--gpu",
                "nvidia-h100-80gb:8",
            ),
            {"chief": "a3-highgpu-8g"},
        ),
        (("--gpu", "nvidia-tesla-v100:2", "--region", "europe-west4"), {"chief": "n1-standard-16"}),
        (
            (
                "--tpu",
                "v5litepod-8",
            ),
            {"tpu": "v5litepod-8"},
        ),
        (("--tpu", "v2-8", "--spot"), {"tpu": "v2-8"}),
        (("--notebook", "--gpu", "nvidia-tesla-t4:2"), {"notebook": "n1-standard-16"}),
    ],
)
def test_every_choice_writes_a_stack_that_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...], expected: dict[str, object]
) -> None:
    code, out = init(tmp_path, *options)
    assert code == 0, capsys.readouterr().err
    cfg, _ = load_stack(out)
    settings = cfg.settings
    if "chief" in expected:
        assert settings.cluster is not None
        assert settings.cluster.chief.machine_type == expected["chief"]
        assert settings.cluster.worker_count == expected.get("workers", 0)
        if "--spot" in options and settings.cluster.worker_count:
            assert settings.cluster.workers is not None
            assert settings.cluster.workers.spot
    if "tpu" in expected:
        assert settings.tpu is not None
        assert settings.tpu.accelerator_type == expected["tpu"]
        assert settings.tpu.spot == ("--spot" in options)
    if "notebook" in expected:
        assert settings.notebook is not None
        assert settings.notebook.machine_type == expected["notebook"]
    if "--gpu" in options:
        gpu = options[options.index("--gpu") + 1].split(":")[0]
        assert gpu in out.read_text()


def test_every_key_it_sets_is_explained_and_the_file_names_how_to_check_it(tmp_path: Path) -> None:
    code, out = init(tmp_path, "--gpu", "nvidia-tesla-t4:1", "--workers", "1", "--spot")
    assert code == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# Written by `trainstack init --stack team --gpu nvidia-tesla-t4:1")
    assert f"validate --stack-file {out}" in lines[1]
    top_level = [line for line in lines if line.startswith("  ") and not line.startswith("   ")]
    assert top_level, top_level
    assert all("# " in line for line in top_level), top_level
    assert yaml.safe_load(out.read_text())["config"]["trainstack:cluster"]["workers"]["spot"] is True


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (("--gpu", "nvidia-tesla-k80"), "no such GPU type to create; types: nvidia-a100-80gb"),
        (("--gpu", "nvidia-tesla-t4:3"), "N1 machines take 1, 2, 4 of them"),
        (("--gpu", "nvidia-tesla-t4:x"), "a whole number from 1"),
        (("--gpu", "nvidia-tesla-a100:3"), "in counts of 1, 2, 4, 8, 16"),
        (("--tpu", "v2-9"), "v2 slices are v2-8, v2-32"),
        (("--tpu", "tpu-9000"), "not a TPU type; e.g. v2-8"),
        (("--tpu", "v3-8", "--workers", "2"), "a TPU VM runs alone"),
        (("--notebook", "--workers", "2"), "a notebook is one machine"),
        (("--region", "us-central9"), "--region 'us-central9': not a region"),
        (("--gpu", "nvidia-h100-80gb:8", "--region", "southamerica-east1"), "--all-regions"),
    ],
)
def test_a_choice_that_cannot_be_made_names_the_option_and_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...], words: str
) -> None:
    code, out = init(tmp_path, *options)
    assert code == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert words in err, err
    assert "Traceback" not in err, err


def test_an_existing_file_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "Pulumi.team.yaml"
    out.write_text("# the team's own\n")
    assert main(["init", "--stack", "team", "--out", str(out)]) == 1
    assert out.read_text() == "# the team's own\n"
    assert "exists" in capsys.readouterr().err


def test_a_stack_name_pulumi_would_refuse_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--stack", "a/b", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "--stack a/b" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (("--project", "a; rm -rf /"), "--project 'a; rm -rf /': not a Google Cloud project id"),
        (("--project", "my-project\n  trainstack:evil: 1"), "not a Google Cloud project id"),
        (("--gpu", "nvidia-tesla-t4:1\n"), "--gpu 'nvidia-tesla-t4:1\\n'"),
        (("--region", "a" * 5000), "(5000 characters)"),
    ],
)
def test_a_hostile_value_writes_nothing_and_is_echoed_on_one_short_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...], words: str
) -> None:
    code, out = init(tmp_path, *options)
    err = capsys.readouterr().err
    assert code == 2
    assert not out.exists()
    assert words in err, err
    assert len(err.splitlines()) == 1, err
    assert len(err) < 400, err


def test_validate_says_the_project_init_wrote_is_a_placeholder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: `init` writes gcp:project: your-gcp-project, and validate said it was valid and no more."""
    code, out = init(tmp_path, "--gpu", "nvidia-tesla-t4:1")
    assert code == 0
    capsys.readouterr()
    assert main(["validate", "--stack-file", str(out)]) == 0
    assert (
        "note: placeholder: gcp:project is your-gcp-project, an example value; replace it with your own before "
        "`pulumi up`"
    ) in capsys.readouterr().err

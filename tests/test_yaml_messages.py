"""YAML a stack file, or a job file `import` reads, may not use, answered in the stack's words:
the file, the line and column, the key, what to write instead. Never PyYAML's own wording
(`could not determine a constructor for the tag ...`) nor a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainstack.commands.main import main

BASE = """config:
  gcp:project: test-project-123
  gcp:region: us-central1
  trainstack:zone: us-central1-a
"""
MERGE_REFUSED = "YAML merge keys (<<:) are not supported: write the keys out"
TAG_ADVICE = "is not supported: write plain values (text, numbers, true or false, lists, mappings)"
PYYAML_WORDS = ("could not determine a constructor", "tag:yaml.org,2002", "Traceback")


def validate_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> str:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(BASE + text)
    assert main(["validate", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert not any(words in err for words in PYYAML_WORDS), err
    return err.replace(str(path), "Pulumi.x.yaml")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        # The anchor comes first: the merge key is still what is named.
        ("  x:base: &b {team: a}\n  trainstack:labels:\n    <<: *b\n", "line 7, column 5"),
        ("  trainstack:labels:\n    owner: b\n    <<: {team: a}\n", "line 7, column 5"),
        ("  trainstack:labels: {owner: b, <<: [{team: a}]}\n", "line 5, column 33"),
    ],
    ids=["alias", "mapping", "list"],
)
def test_a_merge_key_is_named_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str) -> None:
    err = validate_error(tmp_path, capsys, text)
    assert f"Pulumi.x.yaml: not accepted in a stack file: {where}: {MERGE_REFUSED}" in err, err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("  trainstack:name: !Ref team-a\n", "line 5, column 20: trainstack:name: the tag '!Ref'"),
        (
            "  trainstack:labels: !!python/object/apply:os.system [id]\n",
            "line 5, column 22: trainstack:labels: the tag '!!python/object/apply:os.system'",
        ),
        (
            "  trainstack:job:\n    name: j\n    args: [--a, !<tag:example.com,2000:x> b]\n",
            "line 7, column 17: trainstack:job.args[1]: the tag 'tag:example.com,2000:x'",
        ),
        ("  trainstack:cluster: !custom\n    chief: {}\n", "line 5, column 23: trainstack:cluster: the tag '!custom'"),
    ],
    ids=["local-tag", "python-tag", "verbatim-tag", "tag-on-a-mapping"],
)
def test_a_tag_is_named_as_written_with_its_key_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    err = validate_error(tmp_path, capsys, text)
    assert f"Pulumi.x.yaml: not accepted in a stack file: {words} {TAG_ADVICE}" in err, err


def test_a_plain_equals_sign_is_answered_with_how_to_quote_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = validate_error(tmp_path, capsys, "  trainstack:job: {name: j, args: [--a, =]}\n")
    assert "line 5, column 41: trainstack:job.args[1]: a plain = is a special value in YAML 1.1: quote it ('=')" in err


@pytest.mark.parametrize(
    "text", ["  x:base: &b {team: a}\n", "  x:base: &b {team: a}\n  x:other: *b\n"], ids=["anchor", "alias"]
)
def test_anchors_and_aliases_are_still_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    err = validate_error(tmp_path, capsys, text)
    assert "line 5, column 11: YAML anchors and aliases (&name, *name) are not supported" in err, err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("trainingInput:\n  <<: {scaleTier: BASIC}\n", f"line 2, column 3: {MERGE_REFUSED}"),
        (
            "trainingInput:\n  scaleTier: !!python/object/apply:os.system [id]\n",
            f"line 2, column 14: trainingInput.scaleTier: the tag '!!python/object/apply:os.system' {TAG_ADVICE}",
        ),
    ],
    ids=["merge-key", "python-tag"],
)
def test_an_imported_job_file_is_answered_the_same_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    source = tmp_path / "config.yaml"
    source.write_text(text)
    out = tmp_path / "Pulumi.imported.yaml"
    assert main(["import", str(source), "--stack", "imported", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{source}: not accepted: {words}" in err, err
    assert not any(pyyaml in err for pyyaml in PYYAML_WORDS), err
    assert not out.exists()


CLUSTER = "  trainstack:cluster:\n    chief: {machine_type: n1-standard-4}\n    strategy: one_device\n"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # Defect: "Input should be a valid number (got '1e12')" for what the user wrote as one.
        ("1e12", "trainstack:cluster.max_run_hours: '1e12' is out of range: this key takes a number >= 0.01 and <= 2880"),
        ("2e1", "'2e1' is read as text in YAML (an exponent needs a dot: 2.0e+01); this key takes a number >= 0.01 and <= 2880"),
        ("'twelve'", "trainstack:cluster.max_run_hours: Input should be a valid number (got 'twelve')"),
    ],
)  # fmt: skip
def test_a_number_yaml_reads_as_text_is_named_with_the_keys_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    err = validate_error(tmp_path, capsys, f"{CLUSTER}    max_run_hours: {value}\n")
    assert message in err

"""`trainstack local --fresh` deletes only a work directory it made itself."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.workdir import WORKDIR_MARKER, WorkdirError, clear_workdir

REPO = Path(__file__).resolve().parent.parent
DEV_STACK = (REPO / "stacks" / "Pulumi.dev.yaml").read_text()


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The repository's tracked files, copied: a test that deletes the wrong thing deletes this."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    copy = tmp_path / "repo"
    for name in files:
        target = copy / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return copy


def tree(root: Path) -> list[Path]:
    """Every path under ``root``, but the interpreter's bytecode caches: those the copy's own
    modules get where PYTHONDONTWRITEBYTECODE is unset are not a user's files."""
    return sorted(p.relative_to(root) for p in root.rglob("*") if "__pycache__" not in p.parts)


def trainstack(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainstack", *args], cwd=copy, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_a_stack_file_named_dot_dot_cannot_make_fresh_delete_the_repository(repo_copy: Path) -> None:
    """Defect: `local --fresh` with stacks/Pulumi....yaml (stack "..") ran rmtree on the repository."""
    (repo_copy / "stacks" / "Pulumi....yaml").write_text(DEV_STACK)
    before = tree(repo_copy)
    for args in (["--stack-file", "stacks/Pulumi....yaml"], ["--stack", ".."]):
        result = trainstack(repo_copy, "local", *args, "--fresh")
        assert result.returncode == 1, result.stderr
        assert "'..' is not a stack name" in result.stderr
        assert "Traceback" not in result.stderr
    assert tree(repo_copy) == before


@pytest.mark.slow
@pytest.mark.parametrize("workdir", [".", "..", "stacks"])
def test_fresh_refuses_a_workdir_it_did_not_make(repo_copy: Path, workdir: str) -> None:
    before = tree(repo_copy.parent)
    result = trainstack(repo_copy, "local", "--stack", "dev", "--workdir", workdir, "--fresh")
    assert result.returncode == 1
    assert "not deleting it" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree(repo_copy.parent) == before


def test_fresh_deletes_a_workdir_it_made(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    (workdir / "bucket").mkdir(parents=True)
    (workdir / WORKDIR_MARKER).write_text("made by trainstack local\n")
    clear_workdir(workdir)
    assert not workdir.exists()


def test_fresh_refuses_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / WORKDIR_MARKER).write_text("")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(WorkdirError):
        clear_workdir(tmp_path / "link")
    assert target.exists()


def test_local_overrides_replace_every_occurrence_of_a_flag() -> None:
    """Defect: `local --epochs` replaced only the first of several --epochs in the arguments."""
    args = ["--epochs", "500", "--model", "cnn", "--epochs=7", "--seed", "1"]
    assert TrainerOverrides({"--epochs": "2"}).apply(args) == ["--model", "cnn", "--seed", "1", "--epochs", "2"]


@pytest.mark.slow
def test_a_non_empty_directory_it_did_not_make_is_never_adopted(repo_copy: Path, tmp_path: Path) -> None:
    """Defect: the first run planted its marker in a user's non-empty directory, and a later
    --fresh then deleted the user's files in it."""
    mine = tmp_path / "my-notes"
    mine.mkdir()
    (mine / "thesis.tex").write_text("months of work\n")
    result = trainstack(repo_copy, "local", "--stack", "dev", "--workdir", str(mine))
    assert result.returncode == 1, result.stderr
    assert "is not empty and trainstack local did not make it" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]
    again = trainstack(repo_copy, "local", "--stack", "dev", "--workdir", str(mine), "--fresh")
    assert again.returncode == 1
    assert (mine / "thesis.tex").read_text() == "months of work\n"


def test_an_empty_or_new_directory_is_adopted(tmp_path: Path) -> None:
    from trainstack.localrun.workdir import check_adoptable

    (tmp_path / "empty").mkdir()
    check_adoptable(tmp_path / "empty")
    check_adoptable(tmp_path / "new")
    made = tmp_path / "made"
    made.mkdir()
    (made / WORKDIR_MARKER).write_text("")
    (made / "bucket").mkdir()
    check_adoptable(made)

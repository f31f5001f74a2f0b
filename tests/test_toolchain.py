"""The project's own checks: the pre-commit hooks run the tools CI runs, and the repository's
scripts pass shellcheck (the boot scripts are checked rendered, in tests/test_scripts.py)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOOLS = Path(sys.executable).parent
CONFIG = ROOT / ".pre-commit-config.yaml"


def hooks() -> list[dict[str, object]]:
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_the_pre_commit_configuration_is_valid() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", str(CONFIG)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_hook_runs_a_tool_of_the_environment_or_a_script_of_the_repository() -> None:
    for hook in hooks():
        words = shlex.split(str(hook["entry"]))
        if words[0] == "bash":
            assert (ROOT / words[1]).is_file(), hook["id"]
        else:
            assert words[0].startswith(".venv/bin/"), hook["id"]
            assert (TOOLS / words[0].removeprefix(".venv/bin/")).is_file(), hook["id"]


def test_the_hooks_cover_the_linters_the_type_checks_and_the_fast_tests() -> None:
    ids = {str(hook["id"]) for hook in hooks()}
    assert {"ruff-check", "ruff-format", "shellcheck", "hadolint", "mypy", "fast-tests"} <= ids
    fast = next(hook for hook in hooks() if hook["id"] == "fast-tests")
    assert '-m "not slow"' in (ROOT / str(fast["entry"]).split()[1]).read_text(encoding="utf-8")


def test_ci_and_the_hooks_type_check_with_the_same_script() -> None:
    assert "bash scripts/typecheck" in (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    assert next(hook for hook in hooks() if hook["id"] == "mypy")["entry"] == "bash scripts/typecheck"


def test_the_repository_scripts_pass_shellcheck() -> None:
    scripts = [*sorted((ROOT / "scripts").iterdir()), ROOT / ".ci" / "run"]
    result = subprocess.run(
        [str(TOOLS / "shellcheck"), *map(str, scripts)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout

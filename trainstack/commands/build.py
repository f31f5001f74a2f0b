"""``python -m trainstack build``: the built-in trainer's image, built and pushed to the stack's registry.

:func:`build_commands` says what would run (pure, so the tests check the exact commands
without Docker or Google Cloud); :func:`run_build` prints or runs them.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.base.project import PROJECT_ROOT
from trainstack.commands.parsers import pattern_argument
from trainstack.commands.stackargs import add_stack_arguments, load_resolved
from trainstack.jobcode.image import DOCKERFILE, content_tag, image_uri

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack


DOCKER = "docker"
CLOUD_BUILD = "cloud-build"
BUILDERS = (CLOUD_BUILD, DOCKER)

# Docker's tag grammar (https://docs.docker.com/reference/cli/docker/image/tag/).
TAG_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def docker_tag(text: str) -> str:
    """argparse type for --tag: a valid Docker tag, matched whole (a trailing newline is refused)."""
    return pattern_argument(
        text,
        TAG_PATTERN,
        f"{text!r} is not a Docker tag: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'",
    )


def build_commands(stack: ResolvedStack, tag: str, builder: str) -> list[list[str]]:
    """The commands that build the image and push it to the stack's registry, run from the
    repository root in order."""
    uri = image_uri(stack.registry_url, tag)
    if builder == DOCKER:
        registry_host = stack.registry_url.split("/", 1)[0]
        return [
            ["docker", "build", "--file", DOCKERFILE, "--tag", uri, "."],
            # Lets docker push authenticate to Artifact Registry with the gcloud account.
            ["gcloud", "auth", "configure-docker", registry_host, "--quiet"],
            ["docker", "push", uri],
        ]
    if builder == CLOUD_BUILD:
        return [["gcloud", "builds", "submit", "--project", stack.project, "--region", stack.region, "--tag", uri, "."]]
    raise ValueError(f"unknown builder {builder!r}: use one of {', '.join(BUILDERS)}")


def default_builder() -> str:
    """Local Docker when it is installed (no upload of the source), else Cloud Build."""
    return DOCKER if shutil.which("docker") else CLOUD_BUILD


def _missing_tool_message(tool: str, builder: str, chosen_by_default: bool) -> str:
    if chosen_by_default:
        # Cloud Build was picked because docker is missing: neither way works.
        return "neither docker nor gcloud found: install Docker or the Google Cloud CLI"
    if tool == "docker":
        return "docker not found: install Docker, or use --builder cloud-build"
    if builder == DOCKER:
        return "gcloud not found: install the Google Cloud CLI (docker push authenticates through it)"
    return "gcloud not found: install the Google Cloud CLI, or use --builder docker"


def _run(commands: Sequence[Sequence[str]], executables: dict[str, str], root: Path) -> int:
    for argv in commands:
        shown = shlex.join(argv)
        try:
            # The path shutil.which found, so a gcloud.cmd on Windows runs as well.
            result = subprocess.run([executables[argv[0]], *argv[1:]], cwd=root, check=False)
        except OSError as error:
            print(f"trainstack: build: `{shown}` could not start: {error.strerror or error}", file=sys.stderr)
            return 1
        if result.returncode != 0:
            local_build = tuple(argv[:2]) == ("docker", "build")
            hint = " (is the Docker daemon running? or use --builder cloud-build)" if local_build else ""
            print(f"trainstack: build: `{shown}` failed with exit code {result.returncode}{hint}", file=sys.stderr)
            # A command killed by a signal has a negative code; the build failed all the same.
            return result.returncode if result.returncode > 0 else 1
    return 0


def run_build(
    stack: ResolvedStack,
    *,
    tag: str | None = None,
    builder: str | None = None,
    dry_run: bool = False,
    root: Path = PROJECT_ROOT,
) -> int:
    """Build and push the trainer image for a resolved stack (or, with dry_run, print the
    commands and run nothing); returns the exit status."""
    chosen = builder or default_builder()
    tag = tag or content_tag(root)
    commands = build_commands(stack, tag, chosen)
    uri = image_uri(stack.registry_url, tag)
    if dry_run:
        for argv in commands:
            print(shlex.join(argv))
    else:
        executables: dict[str, str] = {}
        for tool in dict.fromkeys(argv[0] for argv in commands):
            found = shutil.which(tool)
            if found is None:
                print(f"trainstack: {_missing_tool_message(tool, chosen, builder is None)}", file=sys.stderr)
                return 1
            executables[tool] = found
        status = _run(commands, executables, root)
        if status != 0:
            return status
    print(f"{'Would build' if dry_run else 'Built and pushed'} {uri} ({chosen})")
    print(
        "To train with it, put this line under trainstack:job: in the stack file; the image runs "
        "`python -m trainer.task`, so the built-in trainer's settings (model, epochs, ...) move to job.args "
        '(e.g. args: ["--model", "cnn", "--epochs", "10"]):'
    )
    print(f"  image: {uri}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:

    # _load applies the catalog's checks, as `validate` does; the boot scripts are not needed.
    resolved = load_resolved(args)
    return run_build(resolved, tag=args.tag, builder=args.builder, dry_run=args.dry_run)


def register(subparsers: Any) -> None:
    build = subparsers.add_parser("build", help="build the trainer image and push it to the stack's Artifact Registry")
    add_stack_arguments(build)
    build.add_argument("--tag", type=docker_tag, help="image tag (default: a hash of the Dockerfile and trainer/)")
    build.add_argument("--dry-run", action="store_true", help="print the commands and run nothing")
    build.add_argument(
        "--builder", choices=BUILDERS, help="default: docker when it is installed, else cloud-build (gcloud)"
    )
    build.set_defaults(func=cmd_build)

"""The README's and docs/'s examples work as written.

- every ```yaml block that starts with `config:` is a stack file that validates, and every
  indented `trainstack:` fragment validates once merged into a shipped stack;
- every `.venv/bin/trainstack` command in a ```bash block runs and exits 0, or with the code a
  trailing `# exits N` comment names. Commands run in-process, block by block, in a temporary
  directory holding a copy of stacks/ (so `import` and `> FILE` write there, never into the
  repository). Commands that need the cloud (`status`, `logs` without `--local` or
  `--print-query`; `build`, `start`, `stop` without `--dry-run`) and those that need a local run
  first (`status --local`, `logs --local`) are parsed only, and so are `submit`, `jobs` and
  `cancel` without `--local` and `tune` (a study runs until its trials have run on a cluster);
  `local` goes through every check
  its command makes before it starts the nodes, and stops there;
- inline `.venv/bin/trainstack ...` spans name a verb and flags that exist;
- the command is spelled one way, and every relative link and anchor leads somewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from wheel_index import wheel

import trainstack.localrun.run
import trainstack.stackmodel.stackfile
from trainstack.commands.main import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = ".venv/bin/trainstack"
# A trailing comment that says the command is shown failing, and how.
EXPECTED_EXIT = re.compile(r"#\s*exits\s+(\d+)")
# Files the examples read from the repository (the seeds' job files, the example package).
READ_ONLY_INPUTS = ("tests", "examples")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    lang: str | None = None
    start = 0
    body: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), number, []
            else:
                blocks.append(Block(path, start, lang, "\n".join(body) + "\n"))
                lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"{path.relative_to(ROOT)}:{start}: a code block is never closed"
    return blocks


ALL_BLOCKS = [block for path in DOCS for block in fenced_blocks(path)]
YAML_BLOCKS = [block for block in ALL_BLOCKS if block.lang == "yaml"]
BASH_BLOCKS = [block for block in ALL_BLOCKS if block.lang == "bash" and COMMAND in block.text]


def prose(path: Path) -> str:
    """A page without its fenced code blocks."""
    return re.sub(r"^```.*?^```[^\n]*$", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)


def validate(config_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", "--stack-file", str(config_path)])
    return code, capsys.readouterr().err


# --- (a) stack examples --------------------------------------------------------------------------
@pytest.mark.parametrize("block", YAML_BLOCKS, ids=[b.where for b in YAML_BLOCKS])
def test_every_yaml_example_validates(block: Block, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Pulumi.example.yaml"
    if block.text.startswith("config:"):
        path.write_text(block.text, encoding="utf-8")
    else:
        # A few keys shown on their own, indented as under config: (access, an image job).
        fragment = yaml.safe_load(textwrap.dedent(block.text))
        assert isinstance(fragment, dict), (
            f"{block.where}: a yaml example is a stack file (`config:` first) or trainstack: keys"
        )
        assert all(str(key).startswith("trainstack:") for key in fragment), (
            f"{block.where}: a yaml example is a stack file (`config:` first) or trainstack: keys"
        )
        base = yaml.safe_load((ROOT / "stacks" / "Pulumi.multiworker.yaml").read_text(encoding="utf-8"))
        base["config"].update(fragment)
        path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    code, err = validate(path, capsys)
    assert code == 0, f"{block.where}: the example does not validate:\n{err}"


def test_the_readmes_first_stack_example_is_the_one_the_hook_checks() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```yaml\n(config:.*?)```", text, re.S)
    assert match is not None, "README.md shows no stack file"
    assert any(b.path.name == "README.md" and b.text == match.group(1) for b in YAML_BLOCKS)


def test_the_readme_starts_with_the_two_set_up_commands() -> None:
    first = fenced_blocks(ROOT / "README.md")[0]
    lines = first.text.splitlines()
    assert first.lang == "bash"
    assert len(lines) == 2
    assert lines[0].startswith(f"bash scripts/bootstrap && {COMMAND} local --stack multiworker --fresh")
    assert lines[1].startswith("bash scripts/test ")


# --- (b) commands --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    where: str
    text: str
    argv: tuple[str, ...]  # after .venv/bin/trainstack, without a redirection
    stdout_to: str | None
    expected: int


def logical_lines(block: Block) -> list[tuple[int, str]]:
    """Lines with their backslash continuations joined, numbered as in the file."""
    lines: list[tuple[int, str]] = []
    pending = ""
    first = 0
    for offset, line in enumerate(block.text.splitlines(), start=1):
        if not pending:
            first = block.line + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append((first, pending + line))
        pending = ""
    return lines


def steps(block: Block) -> list[Command | tuple[str, str]]:
    """The block's trainstack commands and `echo TEXT > FILE` lines, in order; other commands
    (pulumi, gcloud, bash scripts) are not this test's."""
    found: list[Command | tuple[str, str]] = []
    for number, line in logical_lines(block):
        for part in line.strip().split(" && "):
            part = part.strip()
            where = f"{block.path.relative_to(ROOT)}:{number}"
            assert not re.match(r"(python3? -m trainstack|trainstack)\b(?!\.)", part), (
                f"{where}: spell the command {COMMAND}: {part}"
            )
            tokens = shlex.split(part, comments=True)
            if not tokens:
                continue
            if tokens[0] == "echo" and len(tokens) == 4 and tokens[2] == ">":
                found.append((tokens[3], tokens[1]))
                continue
            if tokens[0] != COMMAND:
                continue
            stdout_to = None
            if ">" in tokens:
                at = tokens.index(">")
                assert at == len(tokens) - 2, f"{where}: only `> FILE` at the end is understood: {part}"
                stdout_to = tokens[-1]
                tokens = tokens[:at]
            expected = EXPECTED_EXIT.search(part)
            found.append(Command(where, part, tuple(tokens[1:]), stdout_to, int(expected.group(1)) if expected else 0))
    return found


class LocalWouldStart(Exception):
    """Raised in place of starting the nodes of a `local` run."""


def _local_would_start(*args: Any, **kwargs: Any) -> Any:
    raise LocalWouldStart


def how_to_check(argv: tuple[str, ...]) -> str:
    """'run', 'local' (run up to the nodes' start) or 'parse' (needs the cloud or a local run)."""
    if "--help" in argv or "-h" in argv or not argv:
        return "run"
    verb = argv[0]
    if verb == "local":
        return "local"
    if verb in ("build", "start", "stop"):
        return "run" if "--dry-run" in argv else "parse"
    if verb in ("status", "logs"):
        return "run" if "--print-query" in argv and "--local" not in argv else "parse"
    if verb in ("submit", "jobs", "cancel"):
        return "run" if "--local" in argv else "parse"
    if verb in ("tune", "quota") or tuple(argv[:2]) == ("catalog", "refresh"):
        return "parse"
    return "run"


def flag_problems(words: tuple[str, ...] | list[str], verbs: dict[str, argparse.ArgumentParser]) -> list[str]:
    """What is wrong with a command's verb and flags. argparse takes a prefix of a flag
    (`--run-hour` for `--run-hours`); a page spells every flag whole."""
    if not words or words[0].startswith("-"):
        return []
    verb = " ".join(words[:2]) if words[0] == "export" and len(words) > 1 else words[0]
    if verb not in verbs:
        return [f"no verb {verb!r} (verbs: {', '.join(sorted(verbs))})"]
    actions = verbs[verb]._option_string_actions
    problems = []
    value_next = False
    for word in words[len(verb.split()) :]:
        if value_next:
            value_next = False
            continue
        if not word.startswith("--"):
            continue
        flag, has_value, _ = word.partition("=")
        if flag not in actions:
            problems.append(f"{verb} has no {flag}")
        elif not has_value and actions[flag].nargs != 0:
            value_next = True  # its value may start with -- too: --args "--epochs 1"
    return problems


def parse_only(command: Command) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(list(command.argv))
    except SystemExit as exit_:
        pytest.fail(f"{command.where}: does not parse (exit {exit_.code}): {command.text}\n{err.getvalue()}")


def run(command: Command, workdir: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(command.argv))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except LocalWouldStart:
        code = 0
    assert code == command.expected, (
        f"{command.where}: exit {code}, expected {command.expected}: {command.text}\n"
        f"{err.getvalue()[-2000:]}{out.getvalue()[-1000:]}"
    )
    if command.stdout_to is not None:
        (workdir / command.stdout_to).write_text(out.getvalue(), encoding="utf-8")


WRITING_OPTIONS = {"--out", "--sdist-dir", "--chart", "--workdir"}
# Verbs that change what later commands of the block see (a stack file, the queue).
WRITING_VERBS = {("import",), ("submit",), ("cancel",)}
# Commands already run by an earlier block (read-only ones only): plans are the slow part.
_already_run: set[tuple[tuple[str, ...], int]] = set()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wheel_index: Path) -> Path:
    """A directory like the repository root, whose stacks/ is a copy. The requirements files
    the pages' examples name are locked offline (conftest), against a wheel of each name they
    require in the test's own index."""
    wheel(wheel_index, "cloudml-hypertune", "0.1.0.dev6")
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    for stack_file in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(stack_file, stacks / stack_file.name)
    for name in READ_ONLY_INPUTS:
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.setattr(trainstack.stackmodel.stackfile, "STACKS_DIR", stacks)
    monkeypatch.setattr(trainstack.localrun.run, "run_local", _local_would_start)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("block", BASH_BLOCKS, ids=[b.where for b in BASH_BLOCKS])
def test_every_documented_command_works(block: Block, workdir: Path) -> None:
    commands = steps(block)
    assert any(isinstance(c, Command) for c in commands)
    verbs = subcommand_parsers()
    for step in commands:
        if isinstance(step, tuple):
            name, text = step
            (workdir / name).write_text(text + "\n", encoding="utf-8")
            continue
        problems = flag_problems(step.argv, verbs)
        assert not problems, f"{step.where}: {'; '.join(problems)}: {step.text}"
        how = how_to_check(step.argv)
        if how == "parse":
            parse_only(step)
            continue
        writes = step.stdout_to is not None or step.argv[:1] in WRITING_VERBS or WRITING_OPTIONS & set(step.argv)
        key = (step.argv, step.expected)
        if not writes and key in _already_run:
            continue
        run(step, workdir)
        if not writes:
            _already_run.add(key)


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each verb's parser (`export vertex` and `export tfplan` under their two words)."""

    def choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    verbs = choices(build_parser())
    for target, parser in choices(verbs["export"]).items():
        verbs[f"export {target}"] = parser
    return verbs


def test_inline_commands_name_verbs_and_flags_that_exist() -> None:
    verbs = subcommand_parsers()
    problems: list[str] = []
    spans = 0
    for path in DOCS:
        for span in re.findall(r"`(\.venv/bin/trainstack[^`]*)`", prose(path)):
            spans += 1
            problems += [f"{path.relative_to(ROOT)}: `{span}`: {p}" for p in flag_problems(span.split()[1:], verbs)]
    assert not problems, "\n".join(problems)
    assert spans > 10


def test_the_command_is_spelled_one_way() -> None:
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"(?<![\w/.])python3? -m trainstack(?![\w.])", text):
            line = text.count("\n", 0, match.start()) + 1
            pytest.fail(f"{path.relative_to(ROOT)}:{line}: write {COMMAND}, not `{match.group(0)}`")


# --- links ---------------------------------------------------------------------------------------
def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", prose(path), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def test_every_relative_link_and_anchor_leads_somewhere() -> None:
    problems: list[str] = []
    links = 0
    for path in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(path)):
            if re.match(r"[a-z]+:", target):
                continue
            links += 1
            file_part, _, anchor = target.partition("#")
            destination = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}: ({target})"
            if not destination.exists():
                problems.append(f"{where}: no such file")
            elif anchor and (destination.suffix != ".md" or anchor not in anchors(destination)):
                problems.append(f"{where}: no heading gives #{anchor}")
    assert not problems, "\n".join(problems)
    assert links > 10

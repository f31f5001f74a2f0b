"""Every rule two parts of the house share has one definition, in trainstack_contract.

The program (trainstack/), the node agent, the built-in trainer and the policy pack each read
the contract's patterns, role lists and TPU rules rather than write their own: a copy would
drift (a job name the stack accepts and the node refuses, a role the pack lets through). This
scan reads every module of those packages and fails on a copy of a contract rule, naming the
file and line. (The program's metadata reads back through the agent's reader in
tests/agent/test_settings.py.)
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import trainstack_contract
from trainstack_contract import METADATA_KEYS, tpu

ROOT = Path(__file__).resolve().parents[1]
# Everything that ships: the library, the agent, the trainer and the policy pack.
PACKAGES = ("trainstack", "trainstack_agent", "trainer", "policies/trainstack_policies")
EXTRA_FILES = ("__main__.py", "policies/__main__.py")
# Marks the contract defines as plain text (a pattern's text is found by type).
CONTRACT_MARKS = {tpu.POD_RUNTIME_MARK: "trainstack_contract.tpu.POD_RUNTIME_MARK"}


def contract_modules() -> list[ModuleType]:
    names = [info.name for info in pkgutil.iter_modules(trainstack_contract.__path__)]
    return [trainstack_contract, *(importlib.import_module(f"trainstack_contract.{name}") for name in names)]


def imported_names(module: ModuleType) -> set[str]:
    """The names a module binds by importing them: a rule is named where it is defined."""
    source = Path(module.__file__ or "").read_text(encoding="utf-8")
    return {
        alias.asname or alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def contract_rules() -> tuple[dict[str, str], dict[frozenset[str], str]]:
    """The contract's patterns by their text, and its lists of names (two or more) by their members."""
    patterns: dict[str, str] = {}
    collections: dict[frozenset[str], str] = {}
    for module in contract_modules():
        imported = imported_names(module)
        for attribute, value in vars(module).items():
            if attribute in imported:
                continue
            where = f"{module.__name__}.{attribute}"
            if isinstance(value, re.Pattern):
                patterns.setdefault(value.pattern, where)
            elif (
                isinstance(value, (tuple, frozenset))
                and len(value) > 1
                and all(isinstance(item, str) for item in value)
                and not attribute.startswith("_")
            ):
                collections.setdefault(frozenset(value), where)
    return patterns, collections


def shipped_files() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted(path for path in (ROOT / package).rglob("*.py") if ".venv" not in path.parts)
    for name in EXTRA_FILES:
        yield ROOT / name


def _strings(node: ast.AST) -> frozenset[str] | None:
    """The members of a literal collection of strings ({...}, [...], (...), Literal[...]), or None."""
    if not isinstance(node, (ast.Set, ast.List, ast.Tuple)) or len(node.elts) < 2:
        return None
    members = [item.value for item in node.elts if isinstance(item, ast.Constant) and isinstance(item.value, str)]
    return frozenset(members) if len(members) == len(node.elts) else None


def copies(source: str, patterns: dict[str, str], collections: dict[frozenset[str], str]) -> list[tuple[int, str]]:
    """(line, what) for each copy of a contract rule in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in patterns:
                found.append((node.lineno, f"the pattern of {patterns[node.value]}"))
            elif node.value in CONTRACT_MARKS:
                found.append((node.lineno, CONTRACT_MARKS[node.value]))
        members = _strings(node)
        if members is not None and members in collections:
            found.append((getattr(node, "lineno", 0), collections[members]))
    return found


def test_no_shipped_module_writes_its_own_copy_of_a_contract_rule() -> None:
    patterns, collections = contract_rules()
    found = [
        f"{path.relative_to(ROOT)}:{line}: a copy of {what}"
        for path in shipped_files()
        for line, what in copies(path.read_text(encoding="utf-8"), patterns, collections)
    ]
    assert not found, "import these from trainstack_contract instead:\n" + "\n".join(found)


# Metadata key names live in trainstack_contract/metadata.py alone (METADATA_KEYS, which the
# NodeMetadata model reads and writes by); elsewhere, text equal to a key that is not a key.
METADATA_HOME = ROOT / "trainstack_contract" / "metadata.py"
NOT_METADATA = {
    ("trainstack_agent/main.py", METADATA_KEYS.agent): "the agent's program name in its --help",
    ("trainstack/cloud/components/cluster.py", METADATA_KEYS.role): "a VM label of the node's role",
}


def key_literals(source: str) -> list[tuple[int, str]]:
    """(line, key) for each string in ``source`` that is a metadata key's name."""
    keys = {getattr(METADATA_KEYS, field.name) for field in dataclasses.fields(METADATA_KEYS)}
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in keys
    ]


def test_no_module_but_the_contracts_metadata_writes_a_metadata_keys_name() -> None:
    """A key written out elsewhere would be a second place to rename it, and a way past the model."""
    files = [
        *shipped_files(),
        *(path for path in sorted((ROOT / "trainstack_contract").glob("*.py")) if path != METADATA_HOME),
    ]
    found = [
        f"{path.relative_to(ROOT)}:{line}: {key}"
        for path in files
        for line, key in key_literals(path.read_text(encoding="utf-8"))
        if (str(path.relative_to(ROOT)), key) not in NOT_METADATA
    ]
    assert not found, "read it from trainstack_contract.METADATA_KEYS or the NodeMetadata model:\n" + "\n".join(found)


def test_the_key_scan_finds_a_key_written_out() -> None:
    assert key_literals('value = metadata.attribute("trainstack-secrets")') == [(1, "trainstack-secrets")]
    assert key_literals('label = "trainstack-secret"') == []


def test_the_contract_defines_each_pattern_once() -> None:
    """Within the contract too, a pattern's text is written once (``re`` hands two compiles of one
    text the same object, so the scan reads the sources)."""
    patterns, _ = contract_rules()
    written: dict[str, list[str]] = {}
    for path in sorted((ROOT / "trainstack_contract").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in patterns:
                written.setdefault(node.value, []).append(f"{path.name}:{node.lineno}")
    assert not {text: places for text, places in written.items() if len(places) > 1}


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ('JOB = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")', "trainstack_contract.names.JOB_NAME"),
        ('ROLES = frozenset({"roles/viewer", "roles/owner", "roles/editor"})', "PRIMITIVE_ROLES"),
        ('pod = [r for r in runtimes if "-pod-" not in r]', "POD_RUNTIME_MARK"),
        ('OnFinish = Literal["stop", "delete", "keep"]', "ON_FINISH_CHOICES"),
    ],
)
def test_the_scan_finds_a_copy_however_it_is_written(source: str, what: str) -> None:
    patterns, collections = contract_rules()
    [(line, found)] = copies(source, patterns, collections)
    assert line == 1
    assert what in found


def test_the_primitive_roles_are_googles_basic_roles() -> None:
    from trainstack_contract.iam import PRIMITIVE_ROLES

    # The one pin of the list, against https://cloud.google.com/iam/docs/roles-overview#basic.
    assert {role.removeprefix("roles/") for role in PRIMITIVE_ROLES} == {"owner", "editor", "viewer"}

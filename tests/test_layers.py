"""The house's shape: the library's folders by layer, imports that only point down, no circle
in any package, and units a reader can hold in mind.

A newcomer finds each part from the folder names alone (README's module map); these tests
keep that true as code is added, including imports made inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
PACKAGE = REPOSITORY / "trainstack"
# Every package of the house: the library, the built-in trainer, the node agent, the contract
# they share and the policy pack. Each is imported by its folder's name.
PACKAGES = (
    PACKAGE,
    REPOSITORY / "trainer",
    REPOSITORY / "trainstack_agent",
    REPOSITORY / "trainstack_contract",
    REPOSITORY / "policies" / "trainstack_policies",
)

# Bottom to top: a module may import its own folder and the folders before it, never after.
LAYERS = (
    "base",
    "catalog",
    "jobcode",
    "stackmodel",
    "jobstate",
    "jobqueue",
    "tuning",
    "cloud",
    "localrun",
    "interop",
    "experiments",
    "commands",
)
ENTRY_POINTS = {"__init__.py", "__main__.py"}


def modules_of(package: Path) -> dict[str, Path]:
    """The package's modules by their dotted name (a folder's ``__init__.py`` by the folder's)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(path: Path) -> set[str]:
    """Every module of the house's packages the file imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in PACKAGE_NAMES:
                # `from trainstack.x import y` may name a module y or a name in x.
                for alias in node.names:
                    candidate = f"{node.module}.{alias.name}"
                    found.add(candidate if candidate in ALL_MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in PACKAGE_NAMES)
    return found


PACKAGE_NAMES = {package.name for package in PACKAGES}
MODULES = modules_of(PACKAGE)
ALL_MODULES = {name: path for package in PACKAGES for name, path in modules_of(package).items()}


def layer_of(module: str) -> int:
    return LAYERS.index(module.split(".")[1])


def test_only_the_entry_points_sit_at_the_top_of_the_package() -> None:
    assert {p.name for p in PACKAGE.glob("*.py")} == ENTRY_POINTS


def test_every_folder_is_a_layer_with_a_one_line_docstring() -> None:
    folders = {p.parent for p in PACKAGE.rglob("*.py")} - {PACKAGE}
    assert {f.relative_to(PACKAGE).parts[0] for f in folders} == set(LAYERS)
    for folder in folders:
        docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
        assert docstring, f"{folder} has no docstring"
        assert len(docstring.splitlines()) == 1, f"{folder}'s docstring is more than one line"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[1:2] and m.split(".")[1] in LAYERS))
def test_imports_point_down_the_layers(module: str) -> None:
    library = sorted(target for target in imported_modules(MODULES[module]) if target.startswith("trainstack."))
    upward = [target for target in library if layer_of(target) > layer_of(module)]
    assert upward == [], f"{module} imports a layer above its own ({LAYERS[layer_of(module)]})"


@pytest.mark.parametrize("package", [package.name for package in PACKAGES])
def test_no_import_circle(package: str) -> None:
    """No circle in what the package's modules import, followed into the other packages too
    (so a circle that leaves the package and comes back is found)."""
    graph = {m: {t for t in imported_modules(p) if t in ALL_MODULES and t != m} for m, p in ALL_MODULES.items()}
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(m for m in graph if m.split(".")[0] == package):
        if module not in state:
            visit(module, [module])
    assert circles == []


# The one module that packages the node agent (its files, for the bucket the nodes fetch it from).
AGENT_PACKAGING = "trainstack.jobcode.artifacts"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != AGENT_PACKAGING))
def test_the_library_shares_with_the_agent_only_through_the_contract(module: str) -> None:
    """What the command line and the node agent both use (the local run's variables, the job's
    user, the time scale, the token exchange) lives in trainstack_contract; the library
    imports the agent nowhere but where it packages it."""
    agent = sorted(target for target in imported_modules(MODULES[module]) if target.split(".")[0] == "trainstack_agent")
    assert agent == [], f"{module} imports the node agent"


def verb_modules() -> list[str]:
    """The modules that register a command (``trainstack.commands.main.VERBS``)."""
    from trainstack.commands.main import VERBS

    return sorted(verb.__name__ for verb in VERBS)


@pytest.mark.parametrize("module", verb_modules())
def test_a_command_imports_no_other_commands_names(module: str) -> None:
    """A verb parses its arguments and prints; what two verbs share is in the experiments layer
    below them (submit, cancel, waking a cluster, listing jobs) or in the command line's own
    helpers (its parsers and options), never in another verb."""
    others = set(verb_modules()) - {module}
    borrowed = sorted(target for target in imported_modules(MODULES[module]) if target in others)
    assert borrowed == [], f"{module} imports another command's module"


def test_the_readme_module_map_names_every_folder() -> None:
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    missing = [layer for layer in LAYERS if f"| `trainstack/{layer}/` |" not in readme]
    assert missing == []


# --- the data flow: below the checks, only the resolved model ------------------------------------
# The modules that take a checked config and resolve it, handing the resolved stack on.
HAND_OFF = {"trainstack.cloud.prepare", "trainstack.cloud.program"}
BELOW_THE_CHECKS = ("cloud", "localrun", "jobstate", "jobqueue", "interop")


def raw_config_reads(path: Path) -> list[str]:
    """Where the file names the typed config (StackConfig) or reads a ``.settings`` or
    ``.config`` attribute: each is a read of the stack file's config, not of the resolved model."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and any(a.name == "StackConfig" for a in node.names):
            found.append(f"line {node.lineno}: imports StackConfig")
        elif isinstance(node, ast.Attribute) and node.attr in {"settings", "config"}:
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


@pytest.mark.parametrize(
    "module",
    sorted(
        m
        for m in MODULES
        if m not in HAND_OFF
        and ((m.split(".")[1:2] and m.split(".")[1] in BELOW_THE_CHECKS) or m == "trainstack.stackmodel.cost")
    ),
)
def test_below_the_checks_no_module_reads_the_raw_config(module: str) -> None:
    assert raw_config_reads(MODULES[module]) == []


def test_the_resolved_model_does_not_carry_the_raw_config() -> None:
    import dataclasses

    from trainstack.stackmodel.resolved import ResolvedCluster, ResolvedStack

    for model in (ResolvedStack, ResolvedCluster):
        assert {"config", "settings"}.isdisjoint(f.name for f in dataclasses.fields(model))


# --- units a reader can hold in mind -------------------------------------------------------------
MAX_UNIT_LINES = 120


def long_units(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_UNIT_LINES:
                    found.append(f"{path.relative_to(root.parent)}: {node.name} ({lines} lines)")
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.name)
def test_no_function_or_class_is_longer_than_a_screenful_or_two(package: Path) -> None:
    assert long_units(package) == []

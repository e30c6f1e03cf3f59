"""The import graph drawn from the code: no cycle, no upward import.

Every ``import`` of every module of ``dpaudit/``, ``canaries/`` (``dpaudit.canaries``) and ``trainers/``
(``dpaudit.trainers``) is read with ``ast``, function-level and ``TYPE_CHECKING`` imports included (a
lazy import is still an arrow), plus the attack registry's ``"module:Class"`` strings. The root
``dpaudit/__init__.py`` is the public door (``dpaudit.inject``, ``dpaudit.attack``, ``dpaudit.report``,
``__version__``): it imports nothing at module level and, lazily, only the stages (the API,
:mod:`dpaudit.stages.api`) and the report package it makes callable, so it is left out of the cycle search.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"dpaudit": "dpaudit", "canaries": "dpaudit.canaries", "trainers": "dpaudit.trainers"}
#: Packages one floor below the report, the command line and the stages: they never import those.
LOWER = ("dpaudit.attacks", "dpaudit.scoring", "dpaudit.audit", "dpaudit.verdict.headline")
UPPER = ("dpaudit.report", "dpaudit.cli", "dpaudit.stages", "dpaudit.demo")


@cache
def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module the distribution installs."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


def _known(name: str) -> str | None:
    """``name`` or its nearest enclosing module that is one of ours (None: a third-party or stdlib name)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path) -> set[str]:
    """Our modules that ``name`` imports anywhere in its file (module level, functions, TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets: Iterable[str] = (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            targets = (f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base for a in node.names)
        else:
            continue
        for target in targets:
            module = _known(target)
            if module is not None and module != name:
                found.add(module)
    return found


@cache
def graph() -> dict[str, frozenset[str]]:
    edges = {name: set(imports_of(name, path)) for name, path in modules().items()}
    from dpaudit.attacks.registry import available_attacks  # plug-ins named by string are arrows too

    edges["dpaudit.attacks.registry"] |= {
        ep.value.split(":")[0] for ep in available_attacks().values() if ep.value.startswith("dpaudit.")
    }
    return {name: frozenset(targets - {"dpaudit"}) for name, targets in edges.items() if name != "dpaudit"}


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def unit(module: str) -> str:
    """The package a module belongs to: ``dpaudit.attacks``, ``dpaudit.verdict.headline``, ``dpaudit.trainers.rgp``."""
    parts = module.split(".")
    depth = 3 if parts[1:2] == ["trainers"] and len(parts) > 2 else 2
    return ".".join(parts[:depth])


def test_the_walker_sees_lazy_and_string_imports():
    # a function-level import (the stage renders the page) and a registry string are arrows
    assert "dpaudit.report.render" in graph()["dpaudit.stages.attack"]
    assert "dpaudit.attacks.shokri" in graph()["dpaudit.attacks.registry"]
    assert cycles({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}) == [
        ["a", "b", "c"]
    ]


def test_the_root_package_is_only_a_door():
    tree = ast.parse(modules()["dpaudit"].read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert top == [], "dpaudit/__init__.py imports at module level"
    lazy = imports_of("dpaudit", modules()["dpaudit"])
    assert lazy and all(m.startswith("dpaudit.stages") or m == "dpaudit.report" for m in lazy), lazy
    assert "dpaudit.stages.api" in lazy  # the doors: inject, attack, report


def test_no_module_imports_itself_around_a_cycle():
    assert cycles(graph()) == []


def package_cycles() -> list[list[str]]:
    packages: dict[str, set[str]] = {}
    for module, targets in graph().items():
        packages.setdefault(unit(module), set()).update(unit(t) for t in targets if unit(t) != unit(module))
    return cycles({k: frozenset(v) for k, v in packages.items()})


def test_no_package_cycle_through_the_attack_side():
    mine = (
        "dpaudit.attacks",
        "dpaudit.report",
        "dpaudit.scoring",
        "dpaudit.audit",
        "dpaudit.verdict.headline",
        "dpaudit.stages",
        "dpaudit.demo",
    )
    assert [c for c in package_cycles() if any(p in mine for p in c)] == []


def test_no_package_cycle():
    assert package_cycles() == []


def test_attacks_scoring_and_audit_never_import_the_report_the_cli_or_the_stages():
    upward = sorted(
        (module, target)
        for module, targets in graph().items()
        if module.startswith(LOWER)
        for target in targets
        if target.startswith(UPPER)
    )
    assert upward == []
    report = sorted(
        (module, target)
        for module, targets in graph().items()
        if module.startswith("dpaudit.report")
        for target in targets
        if target.startswith(("dpaudit.cli", "dpaudit.stages", "dpaudit.demo"))
    )
    assert report == []


# -- the floors of docs/architecture.md ------------------------------------------------------------


def documented_floors() -> dict[str, int]:
    """``docs/architecture.md``'s floor list: package (``dpaudit.X``) -> its floor."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Floors", 1)[1]
    floors: dict[str, int] = {}
    for line in section.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "floor" and parts[1].isdigit():
            for name in parts[2:]:
                assert f"dpaudit.{name}" not in floors, f"{name} is on two floors"
                floors[f"dpaudit.{name}"] = int(parts[1])
    return floors


def top_package(module: str) -> str:
    """``dpaudit.attacks.lira`` -> ``dpaudit.attacks`` (``dpaudit.trainers.rgp.config`` -> ``dpaudit.trainers``)."""
    return ".".join(module.split(".")[:2])


def test_every_package_stands_on_a_documented_floor():
    floors = documented_floors()
    assert floors, "docs/architecture.md has no floor list under '## Floors'"
    packages = {top_package(m) for m in modules()} - {"dpaudit", "dpaudit.__main__"}
    # a folder of data only (word lists, templates) holds no module: nothing to place
    assert sorted(packages - set(floors)) == [], "packages docs/architecture.md does not place on a floor"
    assert sorted(set(floors) - packages) == [], "floors name packages the code does not have"


def test_every_import_goes_down_the_documented_floors():
    """An import between two packages goes to a lower floor: never sideways (the same floor), never up."""
    floors = documented_floors()
    wrong = sorted(
        (module, target, floors.get(top_package(module)), floors.get(top_package(target)))
        for module, targets in graph().items()
        if top_package(module) in floors
        for target in targets
        if top_package(target) in floors
        and top_package(target) != top_package(module)
        and floors[top_package(target)] >= floors[top_package(module)]
    )
    assert wrong == [], "imports that go sideways or up (module, target, floor, target floor)"

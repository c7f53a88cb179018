"""Arrows point down only: no two modules of the package import each other, nor does any longer cycle.

Every module under src/cpugpu_conformance is parsed (never imported), and each import of
``cpugpu_conformance.*`` it makes, relative or absolute, at the top, inside a function or under
``if TYPE_CHECKING:``, is an edge. A type hint that needs the other module is still a dependency:
the two modules cannot be read, tested or moved one without the other.

An edge goes to the module named: ``from .results.text import last_line`` is an edge to
results/text.py, not to results/__init__.py, although Python runs the package first (a package
that re-exports its modules would otherwise be in a cycle with each of them). Imports spelt as
strings (``importlib.import_module(f"...")``) are not read: the dispatcher's table and the testing
package's lazy names are by design.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

PACKAGE = "cpugpu_conformance"
SOURCE = Path(__file__).resolve().parents[1] / "src" / PACKAGE


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ROOT (a package's name is its __init__.py)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (itself left out). ``from X import y`` is an edge
    to X.y where that is a module, else to X (where y is defined)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        here = module.split(".") if is_package else module.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                origin = node.module or ""
                if node.level:  # from .x / from ..x: up level - 1 packages from this module's own
                    if node.level > len(here):
                        raise AssertionError(f"{path}:{node.lineno}: a relative import above the top package")
                    base = here[: len(here) - (node.level - 1)]
                    origin = ".".join([*base, node.module] if node.module else base)
                for alias in node.names:
                    submodule = f"{origin}.{alias.name}"
                    if submodule in modules:
                        targets.add(submodule)
                    elif origin in modules:
                        targets.add(origin)
        targets.discard(module)
        graph[module] = targets
    return graph


def pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each pair of modules that import each other, once, sorted."""
    return sorted({tuple(sorted((a, b))) for a, targets in graph.items() for b in targets if a in graph.get(b, ())})


def pairs_message(found: list[tuple[str, str]]) -> str:
    return "modules that import each other (one must stand below the other): " + "; ".join(
        f"{a} <-> {b}" for a, b in found
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each sorted: every
    module in one reaches every other, so none of them stands below the rest."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


# ---------------------------------------------------------------- the package


def test_the_package_is_read():
    """The graph is of the real package: a test that read nothing would pass on anything."""
    graph = import_graph(module_files(SOURCE))
    assert len(graph) > 50
    assert f"{PACKAGE}.results.rule" in graph[f"{PACKAGE}.results.model"]  # from . import rule
    assert f"{PACKAGE}.runner.cell_spec" in graph[f"{PACKAGE}.runner.answer"]  # absolute
    assert f"{PACKAGE}.testing.buffer.contract" in graph[f"{PACKAGE}.testing.plugin"]  # inside a function


def test_no_two_modules_import_each_other():
    found = pairs(import_graph(module_files(SOURCE)))
    assert not found, pairs_message(found)


def cycles_message(found: list[list[str]]) -> str:
    return "modules in an import cycle (each reaches the others): " + "; ".join(
        "{" + ", ".join(c) + "}" for c in found
    )


def test_no_longer_cycles():
    found = cycles(import_graph(module_files(SOURCE)))
    assert not found, cycles_message(found)


# ---------------------------------------------------------------- testing/: the rooms

TESTING = f"{PACKAGE}.testing"
# What each room of testing/ may import of the others: the buffer contract's areas and the
# engine-object checks use the shared parts; the verdict reads the evidence they leave (through
# shared/marks.py and stamps.py) and imports no area. Only the entry points above the rooms
# (plugin.py, collected.py, __init__.py, strategies.py) reach into several.
ROOMS = {
    "shared": set(),
    "buffer": {"shared"},
    "engine": {"shared"},
    "verdict": {"shared"},
}


def room_of(module: str) -> str | None:
    """The room of a module of testing/ ("" for the modules above the rooms), None outside testing/."""
    if module != TESTING and not module.startswith(TESTING + "."):
        return None
    parts = module[len(TESTING) + 1:].split(".") if module != TESTING else []
    return parts[0] if len(parts) > 1 or (parts and parts[0] in ROOMS) else ""


def crossings(graph: dict[str, set[str]]) -> list[str]:
    """Each import that goes from one room of testing/ into another the table does not allow, and
    each import of testing/ by the rest of the package (the library stands above the tooling)."""
    found = []
    for module, targets in sorted(graph.items()):
        here = room_of(module)
        for target in sorted(targets):
            there = room_of(target)
            if here is None:
                if there is not None:
                    found.append(f"{module} -> {target} (the package outside testing/ imports none of it)")
                continue
            if there is None or here == "" or there == here:
                continue
            if there == "" or there not in ROOMS[here]:
                found.append(f"{module} -> {target} ({here}/ may import {sorted(ROOMS[here]) or 'no other room'})")
    return found


def test_testing_is_in_its_rooms():
    """Every module of testing/ is in a room, or is one of the entry points above them."""
    modules = module_files(SOURCE)
    above = {m for m in modules if room_of(m) == ""}
    assert above == {TESTING, f"{TESTING}.plugin", f"{TESTING}.collected", f"{TESTING}.strategies"}
    rooms = {room_of(m) for m in modules if room_of(m)}
    assert rooms == set(ROOMS)
    assert f"{TESTING}.buffer.contract" in modules and f"{TESTING}.verdict.recording" in modules


def test_the_rooms_import_one_way():
    found = crossings(import_graph(module_files(SOURCE)))
    assert not found, "imports across the rooms of testing/ that the table forbids: " + "; ".join(found)


def test_a_crossing_is_found_and_named():
    graph = {
        f"{TESTING}.verdict.judge": {f"{TESTING}.buffer.base", f"{TESTING}.shared.marks"},
        f"{TESTING}.buffer.base": {f"{TESTING}.shared.marks"},
        f"{TESTING}.plugin": {f"{TESTING}.buffer.base", f"{TESTING}.verdict.judge"},
        f"{PACKAGE}.results.model": {f"{TESTING}.verdict.judge"},
        f"{TESTING}.engine.walk": {f"{TESTING}.plugin"},
    }
    assert crossings(graph) == [
        f"{PACKAGE}.results.model -> {TESTING}.verdict.judge (the package outside testing/ imports none of it)",
        f"{TESTING}.engine.walk -> {TESTING}.plugin (engine/ may import ['shared'])",
        f"{TESTING}.verdict.judge -> {TESTING}.buffer.base (verdict/ may import ['shared'])",
    ]


def test_the_public_names_are_where_docs_library_md_says():
    """The rooms moved the modules; a team's tests import what they imported before."""
    import importlib

    testing = importlib.import_module(TESTING)
    for name in testing.__all__:
        assert getattr(testing, name) is not None, name
    strategies = importlib.import_module(f"{TESTING}.strategies")
    assert testing.strategies is strategies and strategies.sizes is not None
    assert importlib.import_module(f"{TESTING}.plugin").pytest_configure


# ---------------------------------------------------------------- no module too long to read

MAX_LINES = 450
REPO = SOURCE.parents[1]
# Every Python file of the project: the package, its tools, benchmarks, shipped suite and tests.
READ_WHOLE = ("src", "tools", "benchmarks", "conformance", "tests")
# observe.py is a table of torch probes, one short function each: read one at a time, not whole.
LONGER_BY_DESIGN = {"src/cpugpu_conformance/observe.py"}


def project_files() -> list[Path]:
    return [REPO / "noxfile.py", *(path for top in READ_WHOLE for path in sorted((REPO / top).rglob("*.py")))]


def test_no_module_is_too_long_to_read():
    files = project_files()
    assert len(files) > 100 and REPO / "tools" / "gpu_check.py" in files, "the project's files were not found"
    long = {name: n for path in files for name in [path.relative_to(REPO).as_posix()]
            for n in [len(path.read_text(encoding="utf-8").splitlines())]
            if n > MAX_LINES and name not in LONGER_BY_DESIGN}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): " + ", ".join(
        f"{name} ({n})" for name, n in long.items())


# ---------------------------------------------------------------- the reader, on a made-up package


def write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return package


# Made-up packages with one pair of modules that import each other, by a kind of import the reader
# must count as an edge: each is written, read, and the pair found.
ONE_PAIR = {
    "a-type-checking-import": ({
        "__init__.py": "",
        "a.py": "from .b import B\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
    }, ("pkg.a", "pkg.b")),
    "an-import-inside-a-function": ({
        "__init__.py": "",
        "sub/__init__.py": "",
        "sub/a.py": "import pkg.sub.b\n",
        "sub/b.py": "def f():\n    from ..sub import a\n    return a\n",
    }, ("pkg.sub.a", "pkg.sub.b")),
    "a-name-imported-from-the-package": ({
        "__init__.py": "",
        "results/__init__.py": "from .model import M\n",
        "results/model.py": "from . import helper\nfrom pkg.results import OTHER\n",
    }, ("pkg.results", "pkg.results.model")),
}


@pytest.mark.parametrize(("files", "pair"), ONE_PAIR.values(), ids=ONE_PAIR.keys())
def test_each_kind_of_import_is_an_edge(tmp_path, files, pair):
    package = write_package(tmp_path, files)
    assert pairs(import_graph(module_files(package))) == [pair]


def test_relative_and_absolute_spellings_resolve_alike(tmp_path):
    package = write_package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/x.py": "from pkg.high.y import Y\n",
        "high/__init__.py": "",
        "high/y.py": "from ..low import x\nfrom ..low.x import X\n",
    })
    graph = import_graph(module_files(package))
    assert graph["pkg.high.y"] == {"pkg.low.x"}
    assert graph["pkg.low.x"] == {"pkg.high.y"}
    assert pairs(graph) == [("pkg.high.y", "pkg.low.x")]


def test_a_package_and_its_modules_are_no_cycle_by_themselves(tmp_path):
    """results/__init__.py re-exports results.model; model importing results.text is no edge to the package."""
    package = write_package(tmp_path, {
        "__init__.py": "",
        "results/__init__.py": "from .model import M\nfrom .text import t\n",
        "results/model.py": "from .text import t\nfrom ..results.text import t as u\n",
        "results/text.py": "t = 1\n",
    })
    graph = import_graph(module_files(package))
    assert graph["pkg.results"] == {"pkg.results.model", "pkg.results.text"}
    assert graph["pkg.results.model"] == {"pkg.results.text"}
    assert pairs(graph) == [] and cycles(graph) == []


def test_a_longer_cycle_is_found_and_named(tmp_path):
    package = write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from . import b\n",
        "b.py": "from . import c\n",
        "c.py": "def f():\n    from . import a\n",
        "d.py": "from . import a\n",
    })
    graph = import_graph(module_files(package))
    assert pairs(graph) == []
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert cycles_message(cycles(graph)).endswith(": {pkg.a, pkg.b, pkg.c}")


def test_a_relative_import_above_the_top_is_named(tmp_path):
    package = write_package(tmp_path, {"__init__.py": "", "a.py": "from .. import outside\n"})
    with pytest.raises(AssertionError, match=r"a\.py:1: a relative import above the top package"):
        import_graph(module_files(package))


@pytest.mark.parametrize("level", [1, 2])
def test_the_failure_message_names_the_pair(tmp_path, level):
    dots = "." * level
    package = write_package(tmp_path, {
        "__init__.py": "",
        "inner/__init__.py": "",
        "inner/one.py": f"from {dots}{'inner.' if level == 2 else ''}two import T\n",
        "inner/two.py": "from pkg.inner.one import O\n",
    })
    found = pairs(import_graph(module_files(package)))
    assert found == [("pkg.inner.one", "pkg.inner.two")]
    assert pairs_message(found).endswith(": pkg.inner.one <-> pkg.inner.two")

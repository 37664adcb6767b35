"""The architecture holds: the import contracts (pyproject.toml, ``[tool.importlinter]``), no import circle between
any two modules, and no module too long to read.

Imports count wherever they are written: at the top, inside a function, under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests import REPO

PACKAGES = ("pipelines", "trainer", "storage_kernels")
#: Lines a module may have; a longer one must say why in its docstring, on a line starting with "Long:".
MAX_LINES = 700


def _lint_imports() -> Path:
    script = Path(sys.executable).with_name("lint-imports")
    if not script.exists():
        pytest.skip(f"import-linter is not installed beside {sys.executable} (pip install -e '.[dev]')")
    return script


def test_the_import_contracts_hold() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([str(_lint_imports()), "--no-cache"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_no_import_circle_between_modules() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    circles = _circles(graph)
    assert not circles, "import circles (each a set of modules that import one another):\n" + "\n".join(
        " <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_circles() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z", "b"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.z")
    graph.add_import(importer="a.z", imported="a.x")
    graph.add_import(importer="b", imported="a.x")
    assert _circles(graph) == [["a.x", "a.y", "a.z"]]


def _says_why_long(text: str) -> bool:
    """Whether the module docstring has a line starting ``Long: `` (why the module stays long)."""
    return text.startswith('"""') and "\nLong: " in text.split('"""', 2)[1]


def test_no_module_is_too_long_to_read() -> None:
    long = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text()
            lines = text.count("\n")
            if lines > MAX_LINES and not _says_why_long(text):
                long.append(f"{path.relative_to(REPO)}: {lines} lines")
    assert not long, (f"modules over {MAX_LINES} lines (split them by job, or say in the module docstring why on a "
                      "line starting 'Long: '):\n" + "\n".join(long))


def test_the_architecture_page_shows_every_part_of_pipelines() -> None:
    """docs/ARCHITECTURE.md's tree names every subpackage and top-level module of pipelines (the picture matches
    the tree)."""
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    tree = page.split("## Packages and the direction of imports", 1)[1].split("```", 2)[1]
    parts = sorted(p.name + "/" if p.is_dir() else p.name for p in (REPO / "pipelines").iterdir()
                   if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py"))
    missing = [p for p in parts if p not in tree]
    assert not missing, f"docs/ARCHITECTURE.md's tree does not name {missing}"


@pytest.mark.parametrize("doc, limit", [("README.md", 8 * 1024), ("BENCHMARKS.md", 30 * 1024)])
def test_the_front_docs_stay_short(doc: str, limit: int) -> None:
    size = len((REPO / doc).read_bytes())
    assert size <= limit, f"{doc} expected at most {limit} bytes, to be read in minutes (got {size})"

"""The house has floors and no circles: engine is the ground floor, a3r stands on it, vibe on both; no module
imports one on a higher floor, and no group of modules imports itself round in a circle.

The graph is read from the source (nothing is imported): every `import`/`from ... import`, at module level or
inside a function or an `if TYPE_CHECKING:` block, is an edge, because each still ties the modules together.
A package's `__init__` re-exporting its own submodules is not an edge. Client templates (`templates/`) are
code for generated clients, not modules of the packages, and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("engine", "a3r", "vibe")  # lowest first


def module_files(root: Path, packages: tuple[str, ...] = FLOORS) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of `packages` under `root`."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            if "templates" in path.parts or "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` (at `path`) imports, each resolved to the longest known module name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb level-1 packages from this module's package
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            targets += [f"{base}.{a.name}" for a in node.names] + [base]
    found = set()
    for t in targets:
        while t and t not in known:
            t = t.rpartition(".")[0]
        own_submodule = path.name == "__init__.py" and t.startswith(name + ".")
        if t and t != name and not name.startswith(t + ".") and not own_submodule:
            found.add(t)
    return found


def import_graph(root: Path, packages: tuple[str, ...] = FLOORS) -> nx.DiGraph:
    """Module -> module edges of every import among `packages` under `root`."""
    known = module_files(root, packages)
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, path in known.items():
        graph.add_edges_from((name, t) for t in _imported(name, path, known))
    return graph


def circles(graph: nx.DiGraph) -> list[list[str]]:
    """Each group of modules that import each other round in a circle (strongly connected, more than one)."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def upward(graph: nx.DiGraph, floors: tuple[str, ...] = FLOORS) -> list[tuple[str, str]]:
    """Imports from a module into a package on a higher floor."""
    level = {p: i for i, p in enumerate(floors)}
    return sorted((a, b) for a, b in graph.edges if level[b.split(".")[0]] > level[a.split(".")[0]])


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph(ROOT)


def test_no_module_imports_itself_round_a_circle(graph):
    assert circles(graph) == [], "import circles (break them with a module both sides import, or one above both)"


def test_no_package_imports_a_higher_floor(graph):
    assert upward(graph) == [], f"imports against the floors {' < '.join(FLOORS)}"


def test_the_graph_is_the_real_one(graph):
    """Guards the guard: the reader finds the imports we know of (a reader that saw none would pass above)."""
    assert graph.has_edge("engine.launch", "engine.teams.train")
    assert graph.has_edge("a3r.leader.factory", "a3r.leader.llm")  # an import inside a function counts
    assert graph.number_of_edges() > 500


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_planted_circle_and_upward_import_are_caught(tmp_path):
    _write(
        tmp_path,
        {
            "engine/__init__.py": "",
            "engine/a.py": "from engine import b\n",
            "engine/b.py": "def f():\n    from .a import x  # inside a function, relative\n",
            "engine/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a3r.top import T\n",
            "engine/templates/t.py": "import a3r.top\n",  # templates are not modules
            "a3r/__init__.py": "from a3r import top\n",  # a package re-exporting its own submodule
            "a3r/top.py": "import engine.a\n",
            "vibe/__init__.py": "",
        },
    )
    g = import_graph(tmp_path)
    assert circles(g) == [["engine.a", "engine.b"]]
    assert upward(g) == [("engine.c", "a3r.top")]

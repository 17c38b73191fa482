"""The rooms of the code base keep their doors: product code never imports the benchmarks
(``hub.bench``), and the pure parts (core, wire, errors) never import the server. Read from
the source with ``ast``, so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

HUB = Path(__file__).resolve().parents[1] / "hub"

#: Where ``agui-hub bench`` is dispatched: the command line may start a benchmark.
ENTRY_POINTS = {"server/cli.py"}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules(*rooms: str) -> list[Path]:
    return [p for room in rooms for p in sorted((HUB / room).rglob("*.py"))]


def test_product_code_never_imports_the_benchmarks() -> None:
    offenders = [
        f"{path.relative_to(HUB)}: {name}"
        for path in sorted(HUB.rglob("*.py"))
        if "bench" not in path.relative_to(HUB).parts[:1]
        and str(path.relative_to(HUB)) not in ENTRY_POINTS
        for name in imports(path)
        if name == "hub.bench" or name.startswith("hub.bench.")
    ]
    assert offenders == []


def test_the_pure_parts_never_import_the_server() -> None:
    offenders = [
        f"{path.relative_to(HUB)}: {name}"
        for path in modules("core", "wire")
        for name in imports(path)
        if name.split(".")[:2] in (["hub", "server"], ["hub", "store"], ["hub", "bench"])
    ]
    assert offenders == []


def module_name(path: Path) -> str:
    parts = list(path.relative_to(HUB.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_two_modules_import_each_other_round_a_circle() -> None:
    """A circle of imports (lazy ones included) is a room that should be one, or a door in
    the wrong wall: hub.server.receipts and its HTTP routes used to import each other."""
    paths = sorted(HUB.rglob("*.py"))
    names = {module_name(p) for p in paths}
    graph = {
        module_name(p): {n for n in imports(p) if n in names and n != module_name(p)} for p in paths
    }
    # Packages' __init__ re-exporting their own modules are not circles of design.
    for name, deps in graph.items():
        graph[name] = {
            d for d in deps if not (name.startswith(d + ".") or d.startswith(name + "."))
        }
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        seen[name] = 1
        for dep in sorted(graph[name]):
            if seen.get(dep) == 1:
                circles.append([*path[path.index(dep) :], dep])
            elif dep not in seen:
                visit(dep, [*path, dep])
        seen[name] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name, [name])
    assert circles == []

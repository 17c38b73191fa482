"""The rooms of the code base keep their doors: product code never imports the benchmarks
(``hub.bench``), the pure parts (core, wire, errors, and the validation of an event:
validation, limits, secrets_scan) never import the server, and the server validates an event
through the validation's one entry point. Read from
the source with ``ast``, so a lazy import inside a function counts too; relative imports are
resolved to the modules they name.

The Python client carries the pure parts the client runs (:data:`CARRIED`) as
``agui_hub_client._hub`` (symlinks to these very files): so they import nothing of the hub but
each other, and that only relatively (``from ..errors import X``), which resolves to
``hub.errors`` here and to ``agui_hub_client._hub.errors`` in the client."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HUB = ROOT / "hub"
#: What the client carries of the hub, relative to ``hub/``: ``agui_hub_client/_hub`` links
#: to each (clients/python/pyproject.toml says why).
CARRIED = ("core", "wire", "errors.py", "receipts/model.py")
CLIENT_HUB = ROOT / "clients" / "python" / "agui_hub_client" / "_hub"

#: Where ``agui-hub bench`` is dispatched: the command line may start a benchmark.
ENTRY_POINTS = {"server/cli.py"}

#: The rooms below the server (folders or modules of ``hub/``): no server, stores or benchmarks.
PURE = ("core", "wire", "errors.py", "validation.py", "limits.py", "secrets_scan.py")
#: What the server takes from ``hub.validation``: its one entry point and its types.
VALIDATION_DOOR = {"EventCheck", "Checked", "ThreadView", "ACCEPTED"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(HUB.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, relative: bool = True) -> set[str]:
    """The modules ``path`` imports, relative imports resolved (``from ..errors import X`` in
    ``hub/core/patch.py`` is ``hub.errors``; ``from . import x`` names ``package.x`` too), or
    left out when not ``relative``."""
    found: set[str] = set()
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0 and relative:
            base = package[: len(package) - (node.level - 1)]
            if node.module is None:
                found.update(".".join([*base, alias.name]) for alias in node.names)
            else:
                found.add(".".join([*base, node.module]))
    return found


def modules(*rooms: str) -> list[Path]:
    """The modules of ``rooms``: folders of ``hub/`` (every module in them) or modules."""
    return [
        p
        for room in rooms
        for p in ([HUB / room] if room.endswith(".py") else sorted((HUB / room).rglob("*.py")))
    ]


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
        for path in modules(*PURE)
        for name in imports(path)
        if name.split(".")[:2] in (["hub", "server"], ["hub", "store"], ["hub", "bench"])
    ]
    assert offenders == []
    assert all(path.is_file() for path in modules(*PURE))  # a room renamed fails here


def test_the_server_validates_an_event_through_one_door() -> None:
    """hub.validation walks an event once behind one entry point (EventCheck.check): the
    server takes that and its types, never the pieces, and only the guard calls it."""
    server = modules("server")
    taken = [
        f"{path.relative_to(HUB)}: {alias.name}"
        for path in server
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and node.module == "hub.validation"
        for alias in node.names
        if alias.name not in VALIDATION_DOOR
    ]
    assert taken == []
    users = [str(p.relative_to(HUB)) for p in server if "hub.validation" in imports(p)]
    assert users == ["server/guard.py"]


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


def carried() -> list[Path]:
    return [p for c in CARRIED for p in ([HUB / c] if c.endswith(".py") else modules(c))]


def test_what_the_client_carries_imports_nothing_of_the_hub_but_itself_and_relatively() -> None:
    own = {module_name(p) for p in carried()}
    absolute = [
        f"{path.relative_to(HUB)}: {name}"
        for path in carried()
        for name in imports(path, relative=False)
        if name == "hub" or name.startswith("hub.")
    ]
    assert absolute == [], "absolute imports of the hub would not resolve in the client"
    outside = [
        f"{path.relative_to(HUB)}: {name}"
        for path in carried()
        for name in imports(path) - imports(path, relative=False)
        if name not in own and name.rsplit(".", 1)[0] not in own
    ]
    assert outside == [], "relative imports of what the client does not carry"


def test_the_client_links_to_exactly_what_it_carries() -> None:
    links = sorted(str(p.relative_to(CLIENT_HUB)) for p in CLIENT_HUB.rglob("*") if p.is_symlink())
    assert links == sorted(CARRIED)
    for name in CARRIED:
        assert (CLIENT_HUB / name).resolve() == (HUB / name).resolve(), name

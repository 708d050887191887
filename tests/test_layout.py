"""The package's layout rules: rooms of one concept, short functions, no import cycle.

The same rules hold for ``retinue/`` and for the stress suite (``stress/``):

- concepts, not line counts, decide files: a module over :data:`ADVISED_STATEMENTS`
  statements is reported (printed by the test, never failed) as a smell to discuss;
- no function (or method) is over :data:`MAX_FUNCTION_LINES` lines, except the
  declarative tables in :data:`TABLES`, each with its reason;
- no import cycle among a package's modules: every ``import`` counts, also one
  inside ``if TYPE_CHECKING:`` or inside a function (a lazy import hides a cycle
  from the interpreter, not from a reader).

What breaks a rule today because the renovation has not reached it yet is named
in :data:`PENDING` (``retinue/``) or :data:`STRESS_PENDING` (``stress/``),
printed by the test; an entry that no longer breaks its rule fails the test,
so the lists only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import retinue

PACKAGE = Path(retinue.__file__).resolve().parent
ROOT = PACKAGE.parent
STRESS = ROOT / "stress"
ADVISED_STATEMENTS = 250
MAX_FUNCTION_LINES = 80

# Functions over the limit that are declarative tables, not sequences of steps.
# Key: "<path from the checkout>:<qualified name>".
TABLES: dict[str, str] = {
    "retinue/actors/supervisor/_supervisor.py:Supervisor.dispatch": (
        "the closed command protocol's match: one case per command, ending in assert_never"
    ),
}

# Known breaks, emptied as the lead's splits land (issue 17, section 3). Keys:
# "<path>" (module size), "<path>:<qualified name>" (function size), or
# "cycle: <module> -> ... -> <module>" (an import cycle, as the test reports it).
SPLIT = "the lead's split of issue 17, section 3"
PENDING: dict[str, str] = {}


# Known breaks in stress/, keyed as PENDING is; the stress suite's rooms are split.
STRESS_PENDING: dict[str, str] = {}


def modules(package: Path = PACKAGE) -> Iterator[tuple[str, Path]]:
    """Yield ``(dotted module name, file)`` for every module of ``package`` (a folder)."""
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def where(path: Path) -> str:
    """Return a file's path from the checkout, with forward slashes."""
    return path.relative_to(ROOT).as_posix()


def long_functions(path: Path) -> Iterator[tuple[str, int]]:
    """Yield ``(qualified name, lines)`` of every function in ``path`` over the limit."""

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    size = (child.end_lineno or child.lineno) - start + 1
                    if size > MAX_FUNCTION_LINES:
                        yield name, size
                yield from visit(child, f"{name}.")
            else:
                yield from visit(child, prefix)

    yield from visit(ast.parse(path.read_text()), "")


def imported(module: str, path: Path, known: set[str]) -> set[str]:
    """Return the package's modules that ``module`` imports, anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return {name for name in found if name in known and name != module}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return one cycle (a closed list of modules) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def strongconnect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                strongconnect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return [shortest_cycle(graph, component) for component in components]


def shortest_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """Return the shortest cycle through the component's first module (breadth first)."""
    start = min(component)
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for other in sorted(graph[node] & component):
                if other == start:
                    return [*paths[node], start]
                if other not in paths:
                    paths[other] = [*paths[node], other]
                    following.append(other)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - Tarjan found one


def breaks(package: Path = PACKAGE) -> dict[str, str]:
    """Return every break of the layout rules in ``package``: key (as in :data:`PENDING`) -> why."""
    found: dict[str, str] = {}
    files = dict(modules(package))
    for path in files.values():
        for name, lines in long_functions(path):
            key = f"{where(path)}:{name}"
            if key not in TABLES:
                found[key] = f"{lines} lines (limit {MAX_FUNCTION_LINES})"
    graph = {name: imported(name, path, set(files)) for name, path in files.items()}
    for cycle in cycles(graph):
        found["cycle: " + " -> ".join(cycle)] = "an import cycle"
    return found


def statements(path: Path) -> int:
    """Return how many statements a module holds (its docstrings and blank lines aside)."""
    return sum(isinstance(node, ast.stmt) for node in ast.walk(ast.parse(path.read_text())))


def advisory(package: Path = PACKAGE) -> dict[str, int]:
    """Return the modules of ``package`` over :data:`ADVISED_STATEMENTS` statements."""
    counts = {where(path): statements(path) for _, path in modules(package)}
    return {key: n for key, n in sorted(counts.items()) if n > ADVISED_STATEMENTS}


def test_large_modules_are_reported_not_refused() -> None:
    """A large module is a smell to discuss, not a rule: the report is printed (pytest -s)."""
    for package in (PACKAGE, STRESS):
        for key, count in advisory(package).items():
            print(f"advisory: {key} holds {count} statements (advised {ADVISED_STATEMENTS})")
    assert statements(Path(__file__)) > 0


def check_layout(found: dict[str, str], pending: dict[str, str], name: str) -> None:
    """Fail on a break not in ``pending`` (named ``name``), and on an entry that holds now."""
    if pending:
        print(f"Known layout breaks still pending (tests/test_layout.py {name}):")
        for key, why in sorted(pending.items()):
            print(f"  {key}: {found.get(key, 'fixed')} -- {why}")
    new = {key: why for key, why in found.items() if key not in pending}
    assert not new, "layout rules broken (split the module or function, or break the cycle):\n" + (
        "\n".join(f"  {key}: {why}" for key, why in sorted(new.items()))
    )
    fixed = sorted(set(pending) - set(found))
    assert not fixed, f"these {name} entries hold now: remove them from {name}: {fixed}"


def test_the_package_keeps_its_layout_rules() -> None:
    check_layout(breaks(), PENDING, "PENDING")


def test_the_stress_suite_keeps_its_layout_rules() -> None:
    """The stress suite's modules follow the package's rules (its own cycles, its own PENDING)."""
    assert dict(modules(STRESS)), "no stress module found"
    check_layout(breaks(STRESS), STRESS_PENDING, "STRESS_PENDING")


def test_the_table_exceptions_are_real() -> None:
    """Every exception in TABLES names a function that exists and is over the limit."""
    over = {
        f"{where(path)}:{name}"
        for package in (PACKAGE, STRESS)
        for _, path in modules(package)
        for name, _ in long_functions(path)
    }
    assert not set(TABLES) - over, f"stale TABLES entries: {sorted(set(TABLES) - over)}"


def test_the_checks_see_what_they_must(tmp_path: Path) -> None:
    """The checks themselves: a long function, a nested one, and a cycle are each found."""
    source = tmp_path / "m.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    nested = body.replace("\n", "\n    ")
    source.write_text(f"def long():\n{body}\n\nclass C:\n    def method(self):\n    {nested}\n")
    assert [name for name, _ in long_functions(source)] == ["long", "C.method"]
    imports = tmp_path / "i.py"
    imports.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "if TYPE_CHECKING:\n    from p.c import Thing\n"
        "def later():\n    import p.d\n"
    )
    assert imported("p.a", imports, {"p", "p.a", "p.b", "p.c", "p.d"}) == {"p.b", "p.c", "p.d"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []

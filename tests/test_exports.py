"""The faces use the package as its users do: public names only (after trio's test_exports).

The faces (``cli``, ``web``, ``mcp``, ``metrics``, ``cluster``) sit on top of
the runtime. Whatever they import from the rest of ``retinue`` must be public:
no private module (a ``_x`` part of its dotted path), no private name, and,
where the module curates an ``__all__``, a name it lists (a submodule of a
package counts too). A face that needs more asks the owning folder to export
it, so the folder's ``__init__`` keeps saying what the rest may use.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "retinue"
FACES = ("cli", "web", "mcp", "metrics", "cluster")


def _face_files(face: str) -> list[Path]:
    single = PACKAGE / f"{face}.py"
    return [single] if single.exists() else sorted((PACKAGE / face).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str, str | None]]:
    """Return (line, module, name) for each absolute import of ``retinue`` in ``path``."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names]
    return [(line, module, name) for line, module, name in found if module.startswith("retinue")]


def _problem(face: str, module: str, name: str | None) -> str | None:
    """Say what is private about importing ``name`` from ``module``, or None."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] == face:
        return None  # the face's own modules
    if any(part.startswith("_") for part in parts):
        return f"{module} is a private module"
    if name is None:
        return None
    if name.startswith("_"):
        return f"{name} is a private name of {module}"
    exported = getattr(importlib.import_module(module), "__all__", None)
    if exported is None or name in exported:
        return None
    if importlib.util.find_spec(f"{module}.{name}") is not None:
        return None  # a public submodule
    return f"{name} is not in {module}.__all__"


@pytest.mark.parametrize("face", FACES)
def test_a_face_imports_only_public_names(face: str) -> None:
    problems = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {problem}"
        for path in _face_files(face)
        for line, module, name in _imports(path)
        if (problem := _problem(face, module, name)) is not None
    ]
    assert not problems, "\n".join(problems)


def test_the_check_sees_private_imports() -> None:
    assert _problem("cli", "retinue.actors.supervisor._world", "World") is not None
    assert _problem("cli", "retinue.errors", "_private") is not None
    assert _problem("cli", "retinue.errors", "StoreLocked") is None
    assert _problem("web", "retinue.web.app", "_anything") is None

"""The curated public API: sorted, importable, lazy about litellm, errors drawn in one tree."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
import typing
from pathlib import Path

import msgspec

import retinue
import retinue.errors as errors


def test_all_is_sorted_and_unique() -> None:
    assert list(retinue.__all__) == sorted(retinue.__all__)
    assert len(set(retinue.__all__)) == len(retinue.__all__)


# Exported type aliases: they have no __module__ of ours, their members do.
TYPE_ALIASES = {"Event", "Runner"}


def test_star_import_gives_exactly_all_and_each_name_is_ours() -> None:
    namespace: dict[str, object] = {}
    exec("from retinue import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(retinue.__all__)
    for name in sorted(set(retinue.__all__) - TYPE_ALIASES):
        obj = getattr(retinue, name)
        # Defined in retinue and exported under its own name (not a re-export of a
        # third-party object, nor a renamed one).
        assert obj.__module__.startswith("retinue."), (name, obj.__module__)
        assert obj.__name__ == name, (name, obj)
    # Every kind of event is exported (a subscriber matches on it) and tagged on the wire.
    for kind in typing.get_args(retinue.Event):
        assert getattr(retinue, kind.__name__) is kind, kind
        assert issubclass(kind, msgspec.Struct) and kind.__struct_config__.tag, kind
    turn_arg = typing.get_args(retinue.Runner)[0][0]
    assert turn_arg in ("Turn", retinue.Turn)


def test_every_error_is_exported_and_rooted() -> None:
    # The classes live in retinue.errors' private modules by theme: every one is
    # published as retinue.errors.<Name> (where users import it and pickles find it).
    modules = [errors] + [
        importlib.import_module(f"{errors.__name__}.{info.name}")
        for info in pkgutil.iter_modules(errors.__path__)
    ]
    classes = {
        obj
        for module in modules
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__.startswith(errors.__name__)
    }
    assert len(classes) == len(errors.__all__) - 1  # all but TurnInterrupted, a BaseException
    for cls in classes:
        assert cls.__module__ == errors.__name__, cls
        assert getattr(errors, cls.__name__) is cls, cls
        assert issubclass(cls, errors.RetinueError), cls
        assert cls.__name__ in errors.__all__, cls
        assert cls.__name__ in retinue.__all__, cls
        assert cls.__name__ in (errors.__doc__ or ""), f"{cls.__name__} missing from the tree"


def test_the_stub_keeps_its_old_import_path() -> None:
    from retinue.llm.stub import OpenAIStub as Old
    from retinue.testing import OpenAIStub

    assert Old is OpenAIStub


def test_usage_errors_subclass_the_matching_builtin() -> None:
    assert issubclass(errors.InvalidAgentPath, ValueError)
    assert issubclass(errors.InvalidLimits, ValueError)
    assert issubclass(errors.ArgumentTypeError, TypeError)
    assert issubclass(errors.UnknownAgent, LookupError)
    assert issubclass(errors.UnknownProfile, LookupError)
    assert issubclass(errors.WaitTimeout, TimeoutError)


def test_import_retinue_does_not_import_litellm() -> None:
    code = "import sys, retinue, retinue.runtime, retinue.cli\nprint('litellm' in sys.modules)\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_import_retinue_imports_no_optional_extra() -> None:
    extras = [
        "starlette",
        "uvicorn",
        "prometheus_client",
        "opentelemetry",
        "retinue.web",
        "retinue.metrics",
        "retinue.tracing",
    ]
    code = (
        "import sys, retinue, retinue.runtime, retinue.cli\n"
        f"print([m for m in {extras!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


LAYERS = [
    "errors",
    "protocol",
    "persistence",
    "actors",
    "llm",
    "tracing",
    "team",
    "control",
    "runtime",
    "testing",
    "serving",
    "metrics",
    "web",
    "mcp",
    "cluster",
    "cli",
]
# Compatibility aliases that re-export what moved up a layer (and nothing else).
ALIASES = {"retinue.llm.stub": {"retinue.testing.stub"}}


def _layer(module: str) -> int:
    part = module.split(".")[1] if module.count(".") else ""
    return LAYERS.index(part) if part in LAYERS else -1


def test_layers_import_downwards_only() -> None:
    root = Path(retinue.__file__).parent
    for source in sorted(root.rglob("*.py")):
        rel = source.relative_to(root.parent).with_suffix("")
        module = ".".join(rel.parts)
        if module in ("retinue.__init__", "retinue"):
            continue
        own = _layer(module)
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.startswith("retinue.") and name not in ALIASES.get(module, ()):
                    assert _layer(name) <= own, f"{module} imports {name} from a higher layer"

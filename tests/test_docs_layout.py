"""The docs name paths that exist: the Layout block, the design note, every page.

The Layout block (CONTRIBUTING.md) names every package and its layers in order;
docs/design.md, the README, CONTRIBUTING.md and the pages under docs/ name only
paths of the checkout that exist.

Found: the Layout block lacked ``retinue/tracing/`` and its layer line left
tracing out, while ``tests/test_api.py::LAYERS`` has llm <- tracing <- team.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_api import LAYERS

ROOT = Path(__file__).resolve().parent.parent
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()
PACKAGE = ROOT / "retinue"
ENTRY = re.compile(r"^( {0,2})([\w.]+(?:/|\.py))\s")
SUBFOLDER = re.compile(r"(?<![\w/.])((?:\w+/)+)(?=[\s:,;)]|$)")


def _layout() -> list[str]:
    """Return the lines of CONTRIBUTING.md's Layout code block."""
    section = CONTRIBUTING.split("\n## Layout\n", 1)[1]
    return section.split("```\n", 2)[1].splitlines()


def _entries() -> dict[Path, str]:
    """Return each entry of the Layout block (its path) with its description."""
    entries: dict[Path, str] = {}
    current: Path | None = None
    for line in _layout():
        found = ENTRY.match(line)
        if found is not None:
            indent, name = found.groups()
            current = (PACKAGE if indent else ROOT) / name.rstrip("/")
            entries[current] = line[found.end() :]
        elif current is not None:
            entries[current] += " " + line.strip()
    return entries


def test_every_layout_entry_exists_and_every_package_has_one() -> None:
    entries = _entries()
    assert [p for p in entries if not p.exists()] == []
    listed = {p.name for p in entries if p.parent == PACKAGE}
    modules = {
        p.name
        for p in PACKAGE.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.name != "__init__.py")
    }
    assert sorted(modules - listed) == []


def test_the_folders_and_files_a_layout_entry_names_exist() -> None:
    missing = []
    for entry, text in _entries().items():
        named = SUBFOLDER.findall(text) + re.findall(r"\b\w+\.py\b", text)
        for name in named:
            top = entry if entry.is_dir() else entry.parent
            if not any(str(p).endswith("/" + name.rstrip("/")) for p in [top, *top.rglob("*")]):
                missing.append(f"{entry.name}: {name}")
    assert missing == []


def test_the_layer_line_lists_the_layers_in_order() -> None:
    line = CONTRIBUTING.split("Layers import downwards only: ", 1)[1].split(";")[0]
    text = " ".join(line.split())
    named = [name.strip() for part in text.split("<-") for name in part.split(",")]
    assert named == LAYERS


def test_every_path_docs_design_names_exists() -> None:
    text = (ROOT / "docs" / "design.md").read_text()
    files = [p for base in ("retinue", "tests", "stress", "docs") for p in (ROOT / base).rglob("*")]
    known = {p.relative_to(ROOT).as_posix() + ("/" if p.is_dir() else "") for p in files}
    known |= {"retinue/", "tests/", "stress/", "docs/"}
    missing = [
        name
        for name in sorted(set(re.findall(r"`([\w./-]+(?:\.py|/))`", text)))
        if not any(path == name or path.endswith("/" + name) for path in known)
    ]
    assert missing == []


TOP = ("retinue/", "tests/", "stress/", "docs/", "examples/", ".ci/")
# Backquoted names that look like paths and are not: the offline models' names, the folder
# stress writes its runs to (git-ignored), a placeholder, and a folder of the OpenTelemetry
# semantic conventions' repository.
NOT_PATHS = {"retinue/scripted", "retinue/chaos", "stress/results/", "docs/...", "docs/gen-ai"}


def test_every_path_the_pages_name_exists() -> None:
    """A backquoted path of the checkout in a page (``retinue/llm/``, ``docs/design.md``)."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")]
    missing = []
    for page in pages:
        for name in re.findall(r"`(\.?[\w][\w./-]*)`", page.read_text()):
            if name.startswith(TOP) and name not in NOT_PATHS and not (ROOT / name).exists():
                missing.append(f"{page.relative_to(ROOT)}: {name}")
    assert missing == []

"""Every ```python block of the docs runs, each as a test of its own, twice in a row.

The blocks of README.md, CONTRIBUTING.md and docs/**/*.md are collected one by
one (a test's id is ``file:line``, the line of the block's opening fence). Each
runs as a script in a fresh interpreter, in a temporary folder of its own, under
a timeout, twice (its store persists between the two runs, as a reader's would
when they run an example again). A block that cannot run here says so on the line
before it, ``<!-- not-run: the reason -->``, and skips with that reason; a block
that imports what an optional extra brings skips, naming it, where the extra is
not installed (CI installs them).
"""

from __future__ import annotations

import importlib.util
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from cliutil import python_script

from retinue.team import Team

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.+?)\s*-->")
RUN_TIMEOUT_S = 300.0

# What an example imports -> the package its optional extra brings.
EXTRAS = {
    "prometheus_client": "prometheus_client",
    "retinue.metrics": "prometheus_client",
    "retinue.web": "starlette",
    "opentelemetry.sdk.trace": "opentelemetry.sdk",
    "opentelemetry.sdk.trace.export": "opentelemetry.sdk",
    "opentelemetry.sdk.trace.export.in_memory_span_exporter": "opentelemetry.sdk",
    "hypothesis": "hypothesis",
    "retinue.cluster": "ray",
}


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page: where it is, its language, its code."""

    page: Path
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def id(self) -> str:
        """``file:line`` of the block's opening fence, relative to the checkout."""
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"


def blocks(language: str, pages: list[Path] = PAGES) -> list[Block]:
    """Return every block of ``language`` in ``pages``, in page order."""
    found = []
    for page in pages:
        text = page.read_text()
        for fence in FENCE.finditer(text):
            if fence.group(2) != language:
                continue
            before = text[: fence.start()].rstrip().rsplit("\n", 1)[-1]
            marker = NOT_RUN.fullmatch(before.strip())
            line = text.count("\n", 0, fence.start()) + 1
            code = textwrap.dedent(fence.group(3))
            found.append(Block(page, line, language, code, marker.group(1) if marker else None))
    return found


def _absent_extra(code: str) -> str | None:
    """Return the package of an optional extra the code imports and this machine lacks."""
    imported = set(re.findall(r"^\s*(?:from|import) ([\w.]+)", code, re.M))
    for module, package in EXTRAS.items():
        if module in imported and importlib.util.find_spec(package) is None:
            return package
    return None


PYTHON = blocks("python")


@pytest.mark.watchdog(2 * RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_the_example_runs_twice_in_a_row(block: Block, tmp_path: Path) -> None:
    if block.not_run is not None:
        pytest.skip(f"not-run: {block.not_run}")
    missing = _absent_extra(block.code)
    if missing is not None:
        pytest.skip(f"needs the optional extra that brings {missing!r}")
    script = tmp_path / "example.py"
    script.write_text(block.code)
    for attempt in (1, 2):
        done = python_script(script, timeout=RUN_TIMEOUT_S)
        assert done.returncode == 0, f"{block.id}, run {attempt}:\n{done.stderr[-3000:]}"


def test_the_docs_have_examples_and_few_are_not_run() -> None:
    assert len(PYTHON) >= 20
    assert "README.md" in {b.page.name for b in PYTHON}
    not_run = [b for b in PYTHON if b.not_run is not None]
    assert len(not_run) <= 5, [b.id for b in not_run]


def test_blocks_are_found_with_their_lines_markers_and_indents(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```python\nprint(1)\n```\n\n<!-- not-run: needs Ray -->\n"
        "```python\nprint(2)\n```\n\n- a list item:\n\n  ```python\n  print(3)\n  ```\n"
        "```bash\nls\n```\n"
    )
    found = blocks("python", [page])
    assert [(b.line, b.code, b.not_run) for b in found] == [
        (3, "print(1)\n", None),
        (8, "print(2)\n", "needs Ray"),
        (14, "print(3)\n", None),
    ]


def test_the_team_file_example_is_a_valid_team(tmp_path: Path) -> None:
    (block,) = blocks("toml", [ROOT / "docs" / "guides" / "team-files.md"])
    team = Team.from_toml(block.code, source=tmp_path / "team.toml", environ=False)
    assert team.name == "review" and team.lead == "lead"
    assert list(team.agents) == ["lead", "security", "style"]
    assert team.setting("style", "model") == "openai/gpt-4o-mini"
    assert team.setting("security", "model") == "retinue/scripted"
    assert team.limits.depth_cap == 4
    assert {p.name for p in team.profiles()} == {"lead", "security", "style"}

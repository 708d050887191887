"""The docs site's generated parts: the benchmarks page, the root pages, the drafts' place.

mkdocs itself (the optional extra ``docs``) builds the site in ``./dev docs`` and
CI; these tests check the generators ``docs/hooks.py`` hands to it, without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from docs import gen_benchmarks, site_pages
from stress.__main__ import PARTS

ROOT = Path(__file__).resolve().parent.parent
STORED = ROOT / "docs" / "benchmarks"


def _run(folder: Path, name: str, date: str, **parts: Any) -> None:
    machine = {"python": "3.11.7", "platform": "Linux", "processor": "x86_64", "cpus": 2}
    data = {"machine": machine, "date": date, "quick": False, "seed": 1, **parts}
    (folder / name).write_text(json.dumps(data))


def test_every_stored_run_has_its_machine_and_date_and_renders() -> None:
    runs = gen_benchmarks.load_runs(STORED)
    assert len(runs) >= 5
    for run in runs:
        assert run.machine.get("cpus") and run.date[:4].isdigit() and run.parts, run.name
    page = gen_benchmarks.render(STORED)
    assert "## Group commit: durable transitions per second" in page
    assert "| retinue_group_on_per_s | 15,263 |" in page


def test_the_page_knows_every_part_stress_runs() -> None:
    assert [p.name for p in PARTS if p.name not in gen_benchmarks.PARTS] == []


def test_a_newer_run_replaces_only_the_parts_it_measured(tmp_path: Path) -> None:
    _run(tmp_path, "old.json", "2026-01-01", commit={"rate": 10}, reopen={"first_reopen_s": 1.5})
    _run(tmp_path, "new.json", "2026-02-01", commit={"rate": 20, "problems": []})
    page = gen_benchmarks.render(tmp_path)
    assert "| rate | 20 |" in page and "| rate | 10 |" not in page
    assert "| first_reopen_s | 1.5 |" in page and "| problems | 0 |" in page
    assert page.index("[`new.json`]") < page.index("[`old.json`]")


def test_a_run_as_stress_writes_it_renders_its_rows_as_tables(tmp_path: Path) -> None:
    rows = {"fsync": [{"agents": 1, "steps_per_s": 3252.0}, {"agents": 10, "steps_per_s": 5061.5}]}
    _run(tmp_path, "r.json", "2026-03-01T10:00Z", durable_steps={"rows": rows, "problems": []})
    page = gen_benchmarks.render(tmp_path)
    assert "**rows.fsync**\n\n| agents | steps_per_s |" in page
    assert "| 10 | 5,061.5 |" in page


def test_a_file_that_is_not_a_run_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"commit": {"rate": 1}}))
    with pytest.raises(ValueError, match=r"bad.json: a run needs 'machine'"):
        gen_benchmarks.load_runs(tmp_path)


def test_root_pages_get_site_links() -> None:
    text = "[a](docs/guides/mcp.md#x) [b](CONTRIBUTING.md) ![c](docs/web-view.png) [d](#y)"
    assert site_pages.site_text(text, "README.md") == (
        "[a](guides/mcp.md#x) [b](contributing.md) ![c](web-view.png) [d](#y)"
    )
    assert site_pages.site_text("[w](https://example.org/x)", "README.md").endswith("x)")


def test_a_root_page_link_outside_docs_fails_the_build() -> None:
    with pytest.raises(ValueError, match=r"README.md: the link 'pyproject.toml' leaves docs/"):
        site_pages.site_text("see [the extras](pyproject.toml)", "README.md")


def test_the_root_pages_as_they_are_have_site_links() -> None:
    for source in site_pages.ROOT_PAGES:
        site_pages.site_text((ROOT / source).read_text(), source)


def test_every_draft_has_a_place_in_the_navigation(tmp_path: Path) -> None:
    (tmp_path / "drafts").mkdir()
    for name in ("b.md", "a.md"):
        (tmp_path / "drafts" / name).write_text("# draft\n")
    nav = [{"Home": "index.md"}, {"Drafts": "drafts/*.md"}, {"Old": "old/*.md"}]
    assert site_pages.expand_nav(nav, tmp_path) == [
        {"Home": "index.md"},
        {"Drafts": ["drafts/a.md", "drafts/b.md"]},
    ]


def test_a_drafts_links_fit_the_site_and_one_without_a_page_is_unlinked() -> None:
    pages = {"index.md", "guides/operating.md", "drafts/a.md", "web-view.png"}
    text = (
        "[ops](../guides/operating.md#limits) [home](../../README.md) [gone](../guides/x.md) "
        "![shot](../web-view.png) ![old](../../shot.png) [w](https://example.org) [a](#b)\n"
        "```python\nfns[0](x)\n```\n`calls[0](y)` [src](../../retinue/__init__.py)\n"
    )
    fitted, unlinked = site_pages.draft_text(text, "drafts/a.md", pages)
    assert fitted == (
        "[ops](../guides/operating.md#limits) [home](../index.md) gone "
        "![shot](../web-view.png) old [w](https://example.org) [a](#b)\n"
        "```python\nfns[0](x)\n```\n`calls[0](y)` src\n"
    )
    assert unlinked == ["../guides/x.md", "../../shot.png", "../../retinue/__init__.py"]


def test_a_root_pages_code_is_not_read_as_links() -> None:
    text = "```python\nfns[0](pyproject.toml)\n```\n`a[1](setup.py)` [b](docs/design.md)"
    assert site_pages.site_text(text, "README.md").endswith("[b](design.md)")

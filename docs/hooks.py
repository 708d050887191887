"""mkdocs hooks (mkdocs.yml ``hooks:``): the pages made from other files.

- the home page from README.md and the contributing page from CONTRIBUTING.md,
  their links rewritten for the site (``site_pages.site_text``);
- the drafts' place in the navigation (``site_pages.expand_nav``) and their links
  (``site_pages.draft_text``: one with no page on the site is unlinked, logged at
  INFO, so a draft never fails the strict build);
- the benchmark tables, rendered from docs/benchmarks/*.json (``gen_benchmarks``)
  where docs/benchmarks.md holds the marker.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gen_benchmarks
import site_pages
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("mkdocs.hooks.drafts")


def on_config(config: Any) -> Any:
    """Expand the navigation's patterns (the drafts)."""
    config["nav"] = site_pages.expand_nav(config["nav"], Path(config["docs_dir"]))
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add the pages made from the repository's root Markdown files."""
    for source, page in site_pages.ROOT_PAGES.items():
        text = site_pages.site_text((ROOT / source).read_text(), source)
        files.append(File.generated(config, page, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Fit a draft's links to the site; put the benchmark tables where asked for."""
    source = page.file.src_uri
    if source.startswith(site_pages.DRAFTS):
        pages = {file.src_uri for file in files}
        markdown, unlinked = site_pages.draft_text(markdown, source, pages)
        for target in unlinked:
            LOG.info(
                "%s: the draft's link %r has no page on the site; shown as text", source, target
            )
    if gen_benchmarks.MARKER in markdown:
        tables = gen_benchmarks.render(Path(config["docs_dir"]) / "benchmarks")
        markdown = markdown.replace(gen_benchmarks.MARKER, tables)
    return markdown

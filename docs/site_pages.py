"""The site's pages that are not files under docs/: the README, CONTRIBUTING.md, the drafts.

The README is the repository's front door and the site's home page; CONTRIBUTING.md
is the development notes and the site's contributing page. Each is written once, at
the repository root, with links that work there (``docs/guides/mcp.md``); the site
gets a copy whose links are rewritten to work under ``docs/`` (``guides/mcp.md``).
A link to anything else in the repository has no page on the site, so it is an error
(the strict build fails on it) rather than a broken link. The drafts (``docs/drafts``)
join the navigation by a pattern, so a new draft has a place without editing
``mkdocs.yml``. ``docs/hooks.py`` hands all of this to mkdocs; nothing here imports it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["ROOT_PAGES", "expand_nav", "site_text"]

ROOT_PAGES = {"README.md": "index.md", "CONTRIBUTING.md": "contributing.md"}
"""Each repository-root Markdown file the site shows, and its page on the site."""

_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
_KEPT = ("http://", "https://", "mailto:", "#")


def site_text(text: str, source: str) -> str:
    """Return the root page ``source``'s Markdown ``text`` with its links made site links.

    ``docs/X`` becomes ``X``, and a link to another root page becomes its site page;
    web addresses and in-page anchors stay.

    Raises:
        ValueError: a link points elsewhere in the repository (no page on the site
            shows it), naming ``source`` and the link.
    """

    def rewrite(found: re.Match[str]) -> str:
        before, target, after = found.groups()
        if target.startswith(_KEPT):
            return found.group(0)
        path, _, anchor = target.partition("#")
        if path.startswith("docs/"):
            path = path.removeprefix("docs/")
        elif path in ROOT_PAGES:
            path = ROOT_PAGES[path]
        else:
            raise ValueError(
                f"{source}: the link {target!r} leaves docs/; link a page under docs/ "
                f"({', '.join(ROOT_PAGES)} or docs/...) or a web address"
            )
        return before + path + ("#" + anchor if anchor else "") + after

    return _LINK.sub(rewrite, text)


def expand_nav(nav: Any, docs_dir: Path) -> Any:
    """Return the ``nav`` of mkdocs.yml with each ``Title: pattern`` entry expanded.

    A pattern (a value with ``*``, relative to ``docs_dir``) becomes the list of the
    Markdown files it matches, in name order; a pattern matching none is left out.
    """
    if isinstance(nav, list):
        entries = [expand_nav(entry, docs_dir) for entry in nav]
        return [entry for entry in entries if entry != {}]
    if isinstance(nav, dict):
        expanded = {}
        for title, value in nav.items():
            if isinstance(value, str) and "*" in value:
                matches = sorted(
                    p.relative_to(docs_dir).as_posix() for p in docs_dir.glob(value) if p.is_file()
                )
                if matches:
                    expanded[title] = matches
            else:
                expanded[title] = expand_nav(value, docs_dir)
        return expanded
    return nav

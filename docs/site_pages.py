"""The site's pages that are not files under docs/: the README, CONTRIBUTING.md, the drafts.

The README is the repository's front door and the site's home page; CONTRIBUTING.md
is the development notes and the site's contributing page. Each is written once, at
the repository root, with links that work there (``docs/guides/mcp.md``); the site
gets a copy whose links are rewritten to work under ``docs/`` (``guides/mcp.md``).
A link to anything else in the repository has no page on the site, so it is an error
(the strict build fails on it) rather than a broken link. The drafts (``docs/drafts``)
join the navigation by a pattern, so a new draft has a place without editing
``mkdocs.yml``; a draft is built like any page, except that a link of it with no
page on the site is unlinked (its text kept, the build says so at INFO) instead of
failing the strict build: a draft is written beside work on another branch, before
the pages it may point to have their final place. ``docs/hooks.py`` hands all of
this to mkdocs; nothing here imports it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

__all__ = ["DRAFTS", "ROOT_PAGES", "draft_text", "expand_nav", "site_text"]

ROOT_PAGES = {"README.md": "index.md", "CONTRIBUTING.md": "contributing.md"}
"""Each repository-root Markdown file the site shows, and its page on the site."""

DRAFTS = "drafts/"
"""Where the drafts are, under docs/ (a page whose path starts so is a draft)."""

_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
_KEPT = ("http://", "https://", "mailto:", "#")
# Fenced blocks and inline code: a link's look-alike there (``fns[0](x)``) is code.
_CODE = re.compile(
    r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^(?P=indent)(?P=fence)[ \t]*$"
    r"|(?P<ticks>`+)[^`].*?(?P=ticks)",
    re.M | re.S,
)


def _links_outside_code(text: str, rewrite: Callable[[re.Match[str]], str]) -> str:
    """Return ``text`` with ``rewrite`` applied to each link outside its code."""
    parts, last = [], 0
    for code in _CODE.finditer(text):
        parts += [_LINK.sub(rewrite, text[last : code.start()]), code.group(0)]
        last = code.end()
    return "".join([*parts, _LINK.sub(rewrite, text[last:])])


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

    return _links_outside_code(text, rewrite)


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


def draft_text(text: str, source: str, pages: Collection[str]) -> tuple[str, list[str]]:
    """Return a draft's Markdown ``text`` with its links fitted to the site, and what was unlinked.

    ``source`` is the draft's path under docs/ (``drafts/web-view.md``) and ``pages``
    the paths under docs/ of every file the site has. A link to a root page from the
    repository's point of view (``../../README.md``) becomes its site page; a link
    whose target the site lacks becomes its text (an image its alt text). Web
    addresses and in-page anchors stay.
    """
    here = posixpath.dirname(source)
    unlinked: list[str] = []

    def fit(found: re.Match[str]) -> str:
        before, target, after = found.groups()
        if target.startswith(_KEPT):
            return found.group(0)
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(here, path))
        root = resolved.removeprefix("../")
        if resolved.startswith("../") and root in ROOT_PAGES:
            resolved = ROOT_PAGES[root]
        elif resolved.startswith("../docs/"):
            resolved = resolved.removeprefix("../docs/")
        if resolved in pages:
            link = posixpath.relpath(resolved, here or ".")
            return before + link + ("#" + anchor if anchor else "") + after
        unlinked.append(target)
        return before.removeprefix("!")[1:-2]

    return _links_outside_code(text, fit), unlinked

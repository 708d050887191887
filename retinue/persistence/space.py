"""How a store's data file is used: its size, the pages in use and free, the map's headroom.

LMDB never shrinks ``data.mdb``: the file reaches up to its high-water mark,
the highest page any transaction has used. Below that mark every page is
either in use (the databases' B-trees, LMDB's own tree of free pages, the
two meta pages) or free: freed by an earlier transaction (copy-on-write
replaces every page a transaction changes), for a later one to reuse. A
compacting copy (``rt.backup``, ``rt.compact(reclaim=True)``) holds the pages
in use only. The map is the address space LMDB reserves for the file; the
store's writer doubles it when a commit needs more.

:func:`measure` reads these figures inside one read transaction: the
databases' own counts (``stat``) and, for the tree of free pages, which
py-lmdb does not expose, the meta page of that transaction read from the
file (:mod:`retinue.persistence.integrity`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from retinue.persistence.integrity import DATA_FILE, read_meta_pages
from retinue.protocol.provider_limits import LimitSnapshot

__all__ = ["Diagnostics", "StoreSpace", "map_watch", "measure"]

_META_PAGES = 2
_D = TypeVar("_D")


class StoreSpace(msgspec.Struct, frozen=True, kw_only=True):
    """How one store's data file is used, at one committed transaction.

    ``pages`` is the high-water mark (the file never shrinks below it);
    ``pages_in_use`` what a compacting copy would hold; ``pages_free`` the
    pages below the mark that later commits reuse (the file grows only once
    none fits). ``map_headroom_bytes`` is how far the file can grow before the
    writer must grow the map; ``disk_free_bytes`` what the file system has left
    for it. ``databases`` counts the pages of each named database.
    """

    file_bytes: int
    page_size: int
    pages: int
    pages_in_use: int
    pages_free: int
    map_bytes: int
    map_headroom_bytes: int
    disk_free_bytes: int
    txnid: int = 0
    databases: dict[str, int] = msgspec.field(default_factory=dict)

    @property
    def used_bytes(self) -> int:
        """Bytes up to the high-water mark (``pages`` times ``page_size``)."""
        return self.pages * self.page_size

    @property
    def in_use_bytes(self) -> int:
        """Bytes of the pages in use: about the size of a compacting copy."""
        return self.pages_in_use * self.page_size

    @property
    def free_bytes(self) -> int:
        """Bytes of the free pages below the high-water mark."""
        return self.pages_free * self.page_size

    @property
    def map_used_ratio(self) -> float:
        """Share of the map below the high-water mark (0.0 for an unknown map)."""
        return self.used_bytes / self.map_bytes if self.map_bytes else 0.0


def _pages(stat: Mapping[str, int]) -> int:
    return int(stat["branch_pages"]) + int(stat["leaf_pages"]) + int(stat["overflow_pages"])


def measure(env: Any, txn: Any, databases: Mapping[str, Any], folder: Path) -> StoreSpace:
    """Return how ``env``'s data file is used, as of the read transaction ``txn``.

    ``databases`` maps names to the open handles of ``env``. The tree of free
    pages is counted from the meta page of ``txn`` when it is still in the
    file (a writer may have rewritten it meanwhile: then from the newest).

    Raises:
        lmdb.Error: LMDB refused a statistic.
        OSError: the data file cannot be read.
    """
    path = folder / DATA_FILE
    info = env.info()
    main = env.stat()
    metas = read_meta_pages(path)
    txnid = txn.id()
    meta = next((m for m in metas if m.txnid == txnid), None)
    if meta is None and metas:
        meta = max(metas, key=lambda m: m.txnid)
    page_size = int(main["psize"])
    pages = (meta.last_page if meta is not None else int(info["last_pgno"])) + 1
    named = {name: _pages(txn.stat(db)) for name, db in databases.items()}
    free_tree = meta.free_tree_pages if meta is not None else 0
    in_use = min(pages, _META_PAGES + free_tree + _pages(main) + sum(named.values()))
    map_bytes = int(info["map_size"])
    try:
        disk_free = shutil.disk_usage(folder).free
    except OSError:
        disk_free = 0
    return StoreSpace(
        file_bytes=os.stat(path).st_size,
        page_size=page_size,
        pages=pages,
        pages_in_use=in_use,
        pages_free=pages - in_use,
        map_bytes=map_bytes,
        map_headroom_bytes=max(0, map_bytes - pages * page_size),
        disk_free_bytes=disk_free,
        txnid=txnid,
        databases=named,
    )


def map_watch(
    env: Callable[[], Any],
    space: Callable[[], StoreSpace],
    share: float,
    warn: Callable[[StoreSpace], None],
    size: Callable[[], int] | None = None,
) -> Callable[[], None]:
    """Return what the writer calls after a commit grew the file: ``warn`` past ``share``.

    ``warn(space())`` is called once the high-water mark of ``env()`` (the
    store's environment, which a reclaim replaces) reaches ``share`` of its
    map; once per map size (the writer doubles a full map, and the share can
    be passed again).

    ``size()``, if given, is the data file's size as the writer last saw it:
    the high-water mark is not past the file's end (LMDB writes the pages up to
    it, but for the few a transaction freed again before its commit), so while
    the file is smaller than ``share`` of the map as last read, the growth is
    let pass with no look at the environment (an ``info`` and a ``stat``,
    ~12,000 instructions, at every growth: about every third commit of a store
    that keeps adding agents); the warning comes at the growth that passes it
    (at worst the next one). The map only grows, so a share read before the
    map doubled is passed no later than the true one.
    """
    warned = [0]  # the map size warned about
    below = [0.0]  # share of the map as last read: a file smaller is not past it

    def grew() -> None:
        if size is not None and size() < below[0]:
            return
        now = env()
        info = now.info()
        used = (int(info["last_pgno"]) + 1) * int(now.stat()["psize"])
        map_bytes = int(info["map_size"])
        below[0] = share * map_bytes
        if map_bytes != warned[0] and used >= share * map_bytes:
            warned[0] = map_bytes
            warn(space())

    return grew


class Diagnostics(list[_D]):
    """What ``rt.diagnostics`` returns: restore's diagnostics, and the store's space.

    It is the list of :class:`~retinue.persistence.restore.Diagnostic` that
    restore found (what it skipped or repaired), as before; ``store`` is how
    the data file was used when it was read (:class:`StoreSpace`; None once
    the runtime is closed); ``provider_limits`` each provider limit's figures
    (:class:`~retinue.protocol.provider_limits.LimitSnapshot`) and
    ``admission_waiting`` the paths of the agents whose model call waits for
    admission (both empty without provider limits).
    """

    def __init__(
        self,
        found: Iterable[_D] = (),
        store: StoreSpace | None = None,
        provider_limits: tuple[LimitSnapshot, ...] = (),
        admission_waiting: tuple[str, ...] = (),
    ) -> None:
        """Hold ``found`` (restore's diagnostics), ``store`` and the provider limits' figures."""
        super().__init__(found)
        self.store = store
        self.provider_limits = provider_limits
        self.admission_waiting = admission_waiting

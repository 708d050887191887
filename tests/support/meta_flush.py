"""The moment of an LMDB commit between its meta page and its readers, made by hand.

LMDB writes a commit's meta page into the data file before it lets readers
see the commit (the shared lock file's transaction id moves last; a durable
commit flushes the meta page in between). A poller that keys its reads on
the file's newest meta page can take a commit as read in that moment while
its read missed it.
"""

from __future__ import annotations

from pathlib import Path

from retinue import Runtime
from retinue.control import RemoteRuntime
from retinue.persistence.integrity import DATA_FILE, rebase_meta_pages, store_usage

__all__ = ["free_pages", "meta_page_ahead"]


def free_pages(remote: RemoteRuntime) -> None:
    """Run 30 ``echo`` agents through the writer of ``remote`` (the control tests' writer),
    so that its store has free pages: a later small commit reuses them and leaves the data
    file's size (the other half of a poller's marker) as it was."""
    for n in range(30):
        remote.spawn("echo", "x" * 2_000, name=f"e{n}")


def meta_page_ahead(store: Path, reader: Runtime) -> int:
    """Make ``store``'s newest meta page one transaction ahead of what ``reader`` (a
    read-only runtime on it) sees; return the transaction it still sees.

    The store's writer (another process, holding the lock file) must be idle: its
    next commit writes that transaction's own meta page over the one made here,
    as LMDB would have.
    """
    usage = store_usage(store)
    assert usage is not None, f"no meta page in {store}"
    rebase_meta_pages(store / DATA_FILE, usage.txnid + 1)
    space = reader.diagnostics.store
    assert space is not None and space.txnid == usage.txnid, "the reader sees the file's newest"
    return usage.txnid

"""The moment of an LMDB commit between its meta page and its readers, made by hand.

LMDB writes a commit's meta page into the data file before it lets readers
see the commit (the shared lock file's transaction id moves last; a durable
commit flushes the meta page in between). A poller that keys its reads on
the file's newest meta page can take a commit as read in that moment while
its read missed it.
"""

from __future__ import annotations

from pathlib import Path

from retinue.persistence.integrity import DATA_FILE, rebase_meta_pages, store_usage

__all__ = ["meta_page_ahead"]


def meta_page_ahead(store: Path) -> int:
    """Make ``store``'s newest meta page one transaction ahead of what its readers see.

    The store's writer (another process, holding the lock file) must be idle: its
    next commit writes that transaction's own meta page over the one made here,
    as LMDB would have. Returns the transaction readers still see.
    """
    usage = store_usage(store)
    assert usage is not None, f"no meta page in {store}"
    rebase_meta_pages(store / DATA_FILE, usage.txnid + 1)
    return usage.txnid

"""Damaged stores: truncated, emptied, deleted or zeroed files end in ``StoreCorrupted``.

A damaged ``data.mdb`` must never kill the process (LMDB maps the file and a
read past its end is SIGBUS) and never reopen silently as an empty store.
Every open of a damaged store runs in a child process, so a signal shows up
as a negative return code instead of killing the test run.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from retinue import Profile, Runtime
from retinue.persistence.integrity import MARKER_FILE, read_meta_pages

from . import CHILD_ENV, PROMPT_S, REPO

OPEN_CHILD = r"""
import sys
from retinue import Profile, Runtime, RetinueError
mode, path = sys.argv[1], sys.argv[2]
try:
    if mode == "readonly":
        rt = Runtime.open(path, readonly=True)
    else:
        extra = {"create": True} if mode == "create" else {}
        rt = Runtime.open(path, profiles=[Profile("worker", runner=lambda turn: "ok")], **extra)
    try:
        agents = rt.agents(include_closed=True)
        print("OK", len(agents), len(rt.diagnostics), flush=True)
    finally:
        rt.shutdown()
except RetinueError as exc:
    print("ERR", type(exc).__name__, str(exc).replace("\n", " "), flush=True)
"""

PAGE_FLAGS_AT = struct.calcsize("P") + 2
P_BRANCH = 0x01


def run_child(mode: str, store: Path) -> tuple[int, str]:
    """Open ``store`` in a child process; return its exit code and first output line."""
    done = subprocess.run(
        [sys.executable, "-c", OPEN_CHILD, mode, str(store)],
        capture_output=True,
        text=True,
        env=dict(CHILD_ENV, PYTHONPATH=str(REPO)),
        timeout=PROMPT_S * 3,
        check=False,
    )
    return done.returncode, (done.stdout.strip().splitlines() or [done.stderr.strip()])[0]


def make_store(folder: Path, agents: int = 30) -> None:
    """Create a store holding ``agents`` settled agents, each with a long task."""
    with Runtime.open(folder, profiles=[Profile("worker", runner=lambda turn: "ok")]) as rt:
        for i in range(agents):
            info = rt.spawn("worker", f"task {i} " + "x" * 300, name=f"a{i}")
            rt.wait(info.id, timeout=PROMPT_S)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One healthy store with enough agents that its tree has branch pages."""
    folder = tmp_path_factory.mktemp("pristine") / "store"
    make_store(folder, agents=120)
    return folder


def copy_store(pristine: Path, tmp_path: Path) -> Path:
    """Copy the files of the pristine store into a fresh folder."""
    target = tmp_path / "store"
    target.mkdir()
    for item in pristine.iterdir():
        (target / item.name).write_bytes(item.read_bytes())
    return target


def test_the_meta_reader_agrees_with_the_file(pristine: Path) -> None:
    metas = read_meta_pages(pristine / "data.mdb")
    assert len(metas) == 2
    newest = max(metas, key=lambda m: m.txnid)
    assert newest.page_size == 4096 or newest.page_size >= 512
    assert newest.required_bytes == (pristine / "data.mdb").stat().st_size


@pytest.mark.parametrize("mode", ["writer", "readonly"])
def test_a_truncated_data_file_is_refused_not_a_sigbus(
    pristine: Path, tmp_path: Path, mode: str
) -> None:
    store = copy_store(pristine, tmp_path)
    data = store / "data.mdb"
    os.truncate(data, data.stat().st_size // 2)  # cuts pages the trees use
    code, line = run_child(mode, store)
    assert code == 0, f"the open died with signal {-code}: {line}"
    assert line.startswith("ERR StoreCorrupted"), line
    assert "truncated" in line and str(store) in line
    assert "backup" in line  # says how to restore


def test_retinue_tree_on_a_truncated_store_prints_a_typed_error(
    pristine: Path, tmp_path: Path
) -> None:
    store = copy_store(pristine, tmp_path)
    data = store / "data.mdb"
    os.truncate(data, data.stat().st_size // 2)
    done = subprocess.run(
        [sys.executable, "-m", "retinue.cli", "tree", str(store)],
        capture_output=True,
        text=True,
        env=dict(CHILD_ENV, PYTHONPATH=str(REPO)),
        timeout=PROMPT_S * 3,
        check=False,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "StoreCorrupted" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("damage", ["empty", "deleted"])
@pytest.mark.parametrize("mode", ["writer", "readonly"])
def test_a_store_that_lost_its_data_file_is_refused(
    pristine: Path, tmp_path: Path, damage: str, mode: str
) -> None:
    store = copy_store(pristine, tmp_path)
    data = store / "data.mdb"
    if damage == "empty":
        os.truncate(data, 0)
    else:
        data.unlink()
    code, line = run_child(mode, store)
    assert code == 0, line
    assert line.startswith("ERR StoreCorrupted"), line
    if mode == "writer":  # a refused writer must not have created a new data file
        assert not data.exists() or data.stat().st_size == 0


def test_create_true_starts_a_new_store_where_the_data_was_lost(
    pristine: Path, tmp_path: Path
) -> None:
    store = copy_store(pristine, tmp_path)
    (store / "data.mdb").unlink()
    code, line = run_child("create", store)
    assert (code, line) == (0, "OK 0 0")
    code, line = run_child("writer", store)  # and it is a store again from then on
    assert (code, line) == (0, "OK 0 0")


def test_a_new_folder_just_works_and_is_marked(tmp_path: Path) -> None:
    store = tmp_path / "fresh"
    with Runtime.open(store, profiles=[Profile("worker", runner=lambda turn: "ok")]) as rt:
        assert rt.agents() == []
    assert (store / MARKER_FILE).exists()
    with Runtime.open(store, profiles=[Profile("worker", runner=lambda turn: "ok")]) as rt:
        assert rt.agents() == []


def test_an_older_store_without_a_marker_gets_one_on_open(tmp_path: Path) -> None:
    store = tmp_path / "store"
    make_store(store, agents=2)
    (store / MARKER_FILE).unlink()
    with Runtime.open(store, profiles=[Profile("worker", runner=lambda turn: "ok")]) as rt:
        assert len(rt.agents()) == 2
    assert (store / MARKER_FILE).exists()


def branch_pages(data: Path) -> list[int]:
    """Return the numbers of the B-tree branch pages of a data file."""
    raw = data.read_bytes()
    page = read_meta_pages(data)[0].page_size
    found = []
    for number in range(2, len(raw) // page):
        (flags,) = struct.unpack_from("=H", raw, number * page + PAGE_FLAGS_AT)
        if flags == P_BRANCH:
            found.append(number)
    return found


def zero_branch_pages(data: Path) -> None:
    """Overwrite every branch page (some are free pages of older trees) with zeros."""
    pages = branch_pages(data)
    assert pages, "the pristine store should have branch pages"
    page = read_meta_pages(data)[0].page_size
    with data.open("r+b") as handle:
        for number in pages:
            handle.seek(number * page)
            handle.write(bytes(page))


def test_zeroed_branch_pages_are_a_typed_store_error(pristine: Path, tmp_path: Path) -> None:
    store = copy_store(pristine, tmp_path)
    zero_branch_pages(store / "data.mdb")
    for mode in ("writer", "readonly"):
        code, line = run_child(mode, store)
        assert code == 0, line
        assert line.startswith("ERR StoreCorrupted"), line
        assert str(store) in line


READ_AFTER_DAMAGE = r"""
import sys
from pathlib import Path
from retinue import StoreError
from retinue.persistence.store import Store
sys.path.insert(0, sys.argv[2])
from persistence.test_damage import zero_branch_pages
folder = Path(sys.argv[1])
reader = Store(folder, readonly=True)  # healthy when opened: the check passes
zero_branch_pages(folder / "data.mdb")  # damaged under the open reader
for name, read in [
    ("snapshot", lambda: reader.snapshot()),
    ("get", lambda: [reader.get("agents", str(i).encode()) for i in range(500)]),
    ("backup", lambda: reader.backup(folder.parent / "copy")),
]:
    try:
        read()
        print(name, "OK", flush=True)
    except StoreError as exc:
        print(name, type(exc).__name__, exc.path == str(folder), flush=True)
reader.close()
"""


def test_reads_of_a_store_damaged_after_open_raise_typed_errors_with_the_path(
    pristine: Path, tmp_path: Path
) -> None:
    store = copy_store(pristine, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", READ_AFTER_DAMAGE, str(store), str(REPO / "tests")],
        capture_output=True,
        text=True,
        env=dict(CHILD_ENV, PYTHONPATH=str(REPO)),
        timeout=PROMPT_S * 3,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "snapshot StoreCorrupted True"
    assert lines[1] == "get StoreCorrupted True"
    assert lines[2] == "backup StoreCorrupted True"


BACKUP_AFTER_TRUNCATION = r"""
import os, sys
from pathlib import Path
from retinue import StoreError
from retinue.persistence.store import Store
folder = Path(sys.argv[1])
reader = Store(folder, readonly=True)
data = folder / "data.mdb"
os.truncate(data, data.stat().st_size // 2)  # damaged under the open reader
try:
    reader.backup(folder.parent / "copy")
    print("backup OK", flush=True)
except StoreError as exc:
    print("backup", type(exc).__name__, flush=True)
"""


def test_a_backup_of_a_store_truncated_since_open_is_refused_not_a_sigbus(
    pristine: Path, tmp_path: Path
) -> None:
    store = copy_store(pristine, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", BACKUP_AFTER_TRUNCATION, str(store)],
        capture_output=True,
        text=True,
        env=dict(CHILD_ENV, PYTHONPATH=str(REPO)),
        timeout=PROMPT_S * 3,
        check=False,
    )
    assert done.returncode == 0, f"signal {-done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.strip() == "backup StoreCorrupted"
    assert not (tmp_path / "copy" / "data.mdb").exists()


def test_a_backup_is_a_marked_store(pristine: Path, tmp_path: Path) -> None:
    with Runtime.open(pristine, readonly=True) as rt:
        copy = rt.backup(tmp_path / "copy")
    assert (copy / MARKER_FILE).exists()
    with Runtime.open(copy, readonly=True) as rt:
        assert len(rt.agents(include_closed=True)) == 120


COMMIT_ON_DAMAGE = r"""
import struct, sys
from pathlib import Path
from retinue import StoreError
from retinue.persistence.store import Store
folder = Path(sys.argv[1])
store = Store(folder)
store.write_now([("agents", f"k{i}".encode(), b"v" * 200) for i in range(300)])
data = folder / "data.mdb"
raw = data.read_bytes()
at = struct.calcsize("P") + 2
with data.open("r+b") as handle:  # every tree page zeroed under the open writer
    for n in range(2, len(raw) // 4096):
        (flags,) = struct.unpack_from("=H", raw, n * 4096 + at)
        if flags in (1, 2):
            handle.seek(n * 4096)
            handle.write(bytes(4096))
for attempt in range(2):
    try:
        store.write_now([("agents", b"new", b"x")])
        print("OK", flush=True)
    except StoreError as exc:
        print(type(exc).__name__, exc.path == str(folder), str(exc).count("is damaged"), flush=True)
store.close()
"""


def test_a_commit_on_a_store_damaged_under_the_writer_is_store_corrupted_with_the_path(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    done = subprocess.run(
        [sys.executable, "-c", COMMIT_ON_DAMAGE, str(store)],
        capture_output=True,
        text=True,
        env=dict(CHILD_ENV, PYTHONPATH=str(REPO)),
        timeout=PROMPT_S * 3,
        check=False,
    )
    assert done.returncode == 0, f"{done.returncode}: {done.stderr[-2000:]}"
    # The failed commit (LMDB says MDB_BAD_TXN; the page check finds the damage),
    # then every later one: StoreCorrupted, with the path, said once.
    assert done.stdout.split("\n")[:2] == ["StoreCorrupted True 1", "StoreCorrupted True 1"]

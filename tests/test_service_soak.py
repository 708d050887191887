"""The service soak's own parts: its acknowledged-versus-stored check finds what it must, its
drift pools the lives of the process, its ledger folds every life's lines.

The soak itself runs in ``python -m stress --quick`` (one minute, one kill);
these tests show that its verdict is not vacuous: a store that lost a close,
a completion handed out twice, a spawn made twice are each reported.
"""

from __future__ import annotations

from pathlib import Path

from retinue import Profile, Runtime
from retinue.testing import echo
from stress.parts import Options
from stress.service_soak.check import check
from stress.service_soak.drift import drift, last_life, slope_per_hour
from stress.service_soak.ledger import LedgerWriter, note_open_trees, open_trees, read_trees
from stress.service_soak.plan import Plan
from stress.service_soak.team import task_of


def _store_of_two_trees(folder: Path) -> dict[str, str]:
    """A store where tree 0.0.1 was closed and tree 0.0.2 is open; its ledger says so."""
    rt = Runtime.open(folder / "store", profiles=[Profile("py_lead", runner=echo)])
    ledger = LedgerWriter(folder, 0)
    ids = {}
    try:
        for key in ("0.0.1", "0.0.2"):
            ledger.write("intent", key=key, profile="py_lead")
            info = rt.spawn("py_lead", task_of(key), idempotency_key=key)
            ledger.write("spawn", key=key, id=info.id, retry=False)
            done = rt.wait(info.id, timeout=30)
            ledger.write("got", key=key, id=info.id, gen=1, cid=done.id, status=str(done.status))
            ids[key] = info.id
        closed = rt.close_tree(ids["0.0.1"])
        ledger.write("closed", key="0.0.1", ids=[c.id for c in closed])
        rt.spawn("py_lead", task_of("0.0.2"))  # a second agent for one tree: no key given
    finally:
        ledger.close()
        rt.shutdown()
    return ids


def test_the_check_passes_a_store_that_keeps_what_was_acknowledged(tmp_path: Path) -> None:
    rt = Runtime.open(tmp_path / "store", profiles=[Profile("py_lead", runner=echo)])
    ledger = LedgerWriter(tmp_path, 0)
    info = rt.spawn("py_lead", task_of("0.0.1"), idempotency_key="0.0.1")
    ledger.write("spawn", key="0.0.1", id=info.id, retry=False)
    done = rt.wait(info.id, timeout=30)
    ledger.write("got", key="0.0.1", id=info.id, gen=1, cid=done.id, status=str(done.status))
    ledger.close()
    rt.shutdown()
    verdict = check(tmp_path / "store", tmp_path)
    assert verdict.problems == []
    assert (verdict.acknowledged_spawns, verdict.acknowledged_receipts) == (1, 1)


def test_the_check_reports_a_lost_close_a_double_receipt_and_a_double_spawn(
    tmp_path: Path,
) -> None:
    ids = _store_of_two_trees(tmp_path)
    lies = LedgerWriter(tmp_path, 1)
    lies.write("closed", key="0.0.2", ids=[ids["0.0.2"]])  # the store has it open
    lies.write(
        "got", key="0.0.1", id=ids["0.0.1"], gen=1, cid=f"{ids['0.0.1']}:1", status="completed"
    )
    lies.write("spawn", key="0.0.3", id="f" * 32, retry=False)  # never stored
    lies.close()
    verdict = check(tmp_path / "store", tmp_path)
    assert (verdict.lost, verdict.received_twice, verdict.duplicate_spawns) == (2, 1, 1)
    text = "\n".join(verdict.problems)
    assert "acknowledged close" in text
    assert "handed to the host 2 times" in text
    assert "tree 0.0.2 was spawned 2 times" in text
    assert "acknowledged spawn ffff" in text


def test_the_ledger_folds_every_life_and_hands_open_trees_to_the_next(tmp_path: Path) -> None:
    first = LedgerWriter(tmp_path, 0)
    first.write("intent", key="0.0.1", profile="py_lead")
    first.write("spawn", key="0.0.1", id="a", retry=False)
    first.write("intent", key="0.1.1", profile="model_lead")
    first.close()
    with (tmp_path / "ledger-0.jsonl").open("a") as cut:
        cut.write('{"op": "got", "key": "0.0')  # a line cut short by a kill
    assert [t.key for t in open_trees(tmp_path, 1)] == []
    assert note_open_trees(tmp_path, 1) == 2
    assert {t.key: t.agent_id for t in open_trees(tmp_path, 1)} == {"0.0.1": "a", "0.1.1": None}
    second = LedgerWriter(tmp_path, 1)
    second.write("spawn", key="0.0.1", id="a", retry=True)
    second.write("got", key="0.0.1", id="a", gen=1, cid="a:1", status="interrupted", recovered=True)
    second.write("closed", key="0.0.1", ids=["a"])
    second.close()
    tree = read_trees(tmp_path)["0.0.1"]
    assert (tree.spawns, tree.repeated, tree.recovered, tree.closed) == (2, 1, True, True)
    assert tree.failed_unkilled == 0


def test_drift_pools_the_lives_of_the_process_and_spans_them_for_the_store() -> None:
    samples = []
    for life, (rss, start) in enumerate([(100.0, 0.0), (200.0, 600.0)]):
        for i in range(10):  # each life flat, the second higher; the store grows throughout
            t = start + 60.0 * i
            samples.append({"life": life, "t": t, "life_t": 60.0 * i, "rss_mib": rss, "pages": t})
    table = drift(samples, warmup_s=0.0, life_warmup_s=0.0)
    assert table["rss_mib"]["per_hour"] == 0.0  # a restart is not a trend
    assert table["pages"]["per_hour"] == 3600.0
    assert slope_per_hour([[(0.0, 1.0)]]) is None


def test_the_last_lifes_drift_leaves_out_its_warm_up_and_the_earlier_lives() -> None:
    first = range(5)  # a short first life that climbs steeply
    samples = [{"life": 0, "t": 10.0 * i, "life_t": 10.0 * i, "rss_mib": 50.0 * i} for i in first]
    for i in range(20):  # the last life: climbs for its first 100 s, then flat
        life_t = 10.0 * i
        rss = 300.0 + min(life_t, 100.0)
        samples.append({"life": 1, "t": 100.0 + life_t, "life_t": life_t, "rss_mib": rss})
    table = last_life(samples, warmup_s=100.0)
    assert table["rss_mib"]["per_hour"] == 0.0
    assert table["rss_mib"]["samples"] == 10
    assert last_life(samples, warmup_s=1000.0) == {}
    assert last_life([], warmup_s=0.0) == {}


def test_the_quick_plan_is_one_minute_with_one_kill() -> None:
    plan = Plan.of(Options(quick=True))
    assert (plan.seconds, plan.kills, plan.trees) == (60.0, 1, 10)
    assert 0 < plan.kill_times()[0] < plan.seconds
    assert Plan.loads(plan.dumps()) == plan

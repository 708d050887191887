"""The cluster's own stores and specs, each on its own: directory, request log, profiles as data.

No Ray: these are plain Python over real LMDB environments in ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import clusterlib
import msgspec
import pytest

from retinue import ConfigurationError, Limits, Profile, Restart, TeamFileError
from retinue.cluster.directory import Directory
from retinue.cluster.requests import RequestLog
from retinue.cluster.specs import (
    ProfileSpec,
    config_digest,
    profile_of,
    runner_path,
    shard_config,
    spec_of,
)

# -- the directory ----------------------------------------------------------------------


def test_new_names_go_to_the_least_loaded_shard_and_stay_there(tmp_path: Path) -> None:
    directory = Directory(tmp_path / "directory", 3)
    placed = [directory.place(f"n{i}") for i in range(7)]
    assert placed == [0, 1, 2, 0, 1, 2, 0]
    assert directory.place("n1") == 1  # sticky
    assert directory.lookup("n4") == 1
    assert directory.lookup("never") is None
    assert directory.record("agent_abc", 2) == 2
    assert directory.record("agent_abc", 0) == 2  # recorded already: kept
    assert directory.pick() == 1  # counts: 0 -> 3, 1 -> 2, 2 -> 3 (agent_abc)
    assert directory.place_key("k") == directory.place_key("k")
    directory.set_node(0, "10.0.0.7")
    directory.close()
    again = Directory(tmp_path / "directory", 4)  # a cluster may grow
    assert [again.lookup(f"n{i}") for i in range(7)] == placed
    assert again.nodes() == {0: "10.0.0.7"}
    assert again.place("fresh") == 3  # the new, empty shard
    again.close()
    with pytest.raises(ConfigurationError, match="has 4 shards; it can grow, not shrink to 2"):
        Directory(tmp_path / "directory", 2)


# -- the request log --------------------------------------------------------------------


def test_recorded_answers_survive_a_reopen(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests")

    async def record() -> None:
        await asyncio.gather(*(log.record(f"r{i}", f"answer {i}".encode()) for i in range(50)))
        await log.record("r1", b"a second answer is ignored")

    asyncio.run(record())
    assert log.get("r1") == b"answer 1"
    assert log.get("missing") is None
    log.close()
    again = RequestLog(tmp_path / "requests")
    assert len(again) == 50
    assert again.get("r49") == b"answer 49"
    again.close()


def test_the_log_prunes_old_and_excess_entries(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests", ttl_s=0.3, max_entries=5)

    async def record(prefix: str, count: int) -> None:
        for i in range(count):
            await log.record(f"{prefix}{i}", b"x")

    asyncio.run(record("old", 3))
    time.sleep(1.1)  # past the ttl and the prune interval
    asyncio.run(record("new", 8))
    time.sleep(1.1)
    asyncio.run(record("last", 1))
    assert all(log.get(f"old{i}") is None for i in range(3))
    assert len(log) <= 5
    assert log.get("last0") == b"x"
    log.close()


# -- profiles, teams and limits as data ---------------------------------------------


def local_runner(turn: object) -> str:
    return "x"


class NotARunner:
    def __call__(self, turn: object) -> str:
        return "x"


def test_a_runner_goes_by_its_import_path() -> None:
    assert runner_path(clusterlib.echo, "p") == "clusterlib:echo"
    assert runner_path(local_runner, "p") == f"{__name__}:local_runner"

    def inner(turn: object) -> str:
        return "x"

    for bad in (lambda turn: "x", inner, NotARunner()):
        with pytest.raises(ConfigurationError, match="cannot reach the cluster's workers"):
            runner_path(bad, "p")


def test_a_profile_crosses_as_data_and_comes_back_the_same() -> None:
    profile = Profile(
        "lead",
        subagents=["leaf"],
        runner=clusterlib.lead,
        instructions="split it",
        wake_on_completion=False,
        tools=["read_file"],
        turn_timeout_s=30.0,
        restart=Restart(max_restarts=2, backoff_s=0.5, on=("failed", "lost")),
        approve=["read_file"],
        priority=2.5,
    )
    spec = spec_of(profile)
    assert spec.runner == "clusterlib:lead"
    assert profile_of(spec) == profile
    crossed = msgspec.msgpack.decode(msgspec.msgpack.encode(spec), type=ProfileSpec)
    assert profile_of(crossed) == profile  # the bytes a shard gets: the policy and approvals too
    assert (crossed.restart, crossed.approve) == (profile.restart, ("read_file",))
    assert crossed.priority == 2.5  # the fair share of its calls under provider limits
    with pytest.raises(ConfigurationError, match="does not import on this worker"):
        profile_of(ProfileSpec(name="x", runner="no_such_module:f"))
    odd = Profile("m", model="openai/x", model_settings={"client": object()})
    with pytest.raises(ConfigurationError, match="model_settings must be plain data"):
        spec_of(odd)


def test_the_shard_config_is_checked_on_the_host(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[agents.lead]\nrunner = "clusterlib:echo"\n')
    config = shard_config(profiles=None, team=team, limits=Limits(depth_cap=3))
    assert config.team is not None and config.team.source == str(team.resolve())
    assert config_digest(config) == config_digest(
        shard_config(profiles=None, team=team, limits=Limits(depth_cap=3))
    )
    other = shard_config(profiles=None, team=team, limits=None)
    assert config_digest(config) != config_digest(other)
    team.write_text("[agents.lead]\nmodle = 1\n")
    with pytest.raises(TeamFileError, match="modle"):
        shard_config(profiles=None, team=team, limits=None)
    with pytest.raises(ConfigurationError, match="Profile objects"):
        shard_config(profiles=["lead"], team=None, limits=None)  # type: ignore[list-item]

"""The Ray-free parts of elastic execution: worker ranges, node back-off, shard order."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mixscope.config import RuntimeSpec, load_spec
from mixscope.corpus.plan import Shard
from mixscope.errors import SpecError
from mixscope.runtime.node_health import NodeHealth
from mixscope.runtime.scheduling import order_shards, shard_sizes


def test_worker_range_keeps_a_single_number_exact():
    assert RuntimeSpec(workers=3).worker_range() == (3, 3)
    assert RuntimeSpec(max_workers=8).worker_range() == (1, 8)
    assert RuntimeSpec(min_workers=2, max_workers=8).worker_range() == (2, 8)
    assert RuntimeSpec(workers=4, min_workers=2).worker_range() == (2, 4)
    assert RuntimeSpec(workers=1, min_workers=3).worker_range() == (3, 3)


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        ({"runtime.min_workers": 4, "runtime.max_workers": 2}, "runtime.min_workers"),
        ({"runtime.max_workers": 0}, "runtime.max_workers"),
        ({"runtime.min_workers": 0}, "runtime.min_workers"),
        ({"runtime.node_max_failures": 0}, "runtime.node_max_failures"),
        ({"runtime.shard_order": "random"}, "runtime.shard_order"),
        ({"runtime.shards_in_flight": 0}, "runtime.shards_in_flight"),
        ({"runtime.shards_in_flight": 9}, "runtime.shards_in_flight"),
    ],
)
def test_bad_worker_ranges_are_one_line_spec_errors(sets, key, tmp_path):
    base = {"corpus.paths": [str(tmp_path)], "out": str(tmp_path)}
    with pytest.raises(SpecError) as err:
        load_spec(None, {**base, **sets})
    assert key in str(err.value) and "\n" not in str(err.value)


def test_a_node_is_backed_off_then_given_up_and_a_success_resets_it():
    h = NodeHealth(max_failures=3, backoff=10.0)
    h.failed("n", "died", now=100.0)
    assert not h.usable("n", now=105.0) and h.usable("n", now=110.0)  # 10 s
    h.failed("n", "died", now=110.0)
    assert not h.usable("n", now=129.0) and h.usable("n", now=130.0)  # then 20 s
    h.succeeded("n")
    assert h.usable("n", now=130.0) and h.failures == {}
    for t in (200.0, 300.0, 400.0):
        h.failed("n", "died", now=t)
    assert "n" in h.lost and not h.usable("n", now=10_000.0)  # reported, never again
    assert h.deaths["n"] == 5


def test_largest_shards_go_first_and_the_plan_is_unchanged(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("x" * 1000)
    b.write_text("y" * 300)
    shards = [
        Shard(0, str(a), 0, 0, 4),  # bytes 0-400
        Shard(1, str(a), 400, 4, 4),  # 400-1000: the largest
        Shard(2, str(b), 0, 8, 2),  # the whole of b: 300
    ]
    assert shard_sizes(shards) == {0: 400.0, 1: 600.0, 2: 300.0}
    assert [s.shard_id for s in order_shards(shards)] == [1, 0, 2]
    assert [s.shard_id for s in order_shards(shards, "plan")] == [0, 1, 2]


def test_status_actors_shows_the_pool_of_a_run(tmp_path):
    from mixscope.cli import main
    from mixscope.status import pool_tables

    state = {
        "ray_start_s": 1.5,
        "first_actor_ready_s": 4.0,
        "requested_bundles": 0,
        "tail_idle_actor_s": 2.25,
        "actors": [
            {"actor": "a1", "node": "node-one-abcdef", "state": "busy", "shard": 3,
             "shards": 2, "tokens": 500, "tok/s": 250, "start_s": 4.0, "load_s": 1.0,
             "error": ""},
        ],
        "nodes": [{"node": "node-two", "address": "10.0.0.2", "alive": False, "actors": 1,
                   "actor_deaths": 1, "lost": "node died"}],
        "lost_nodes": ["node-two"],
    }  # fmt: skip
    (actors, rows), (nodes, nrows) = pool_tables(state)
    assert rows[0][actors.index("node")] == "node-one-abc" and rows[0][actors.index("tok/s")] == 250
    assert nrows[0][nodes.index("lost")] == "node died"
    # a run without Ray says so; the table of a real run is in tests/test_elastic.py
    result = CliRunner().invoke(main, ["status", str(tmp_path), "--actors"])
    assert result.exit_code != 0 and "no runs" in result.output
    json.dumps(state)


def test_status_json_actors_carries_the_pool_of_each_run(tmp_path):
    """``status --json --actors``: each run's ``pool`` is its ``actors.json`` (actors, nodes,
    requested bundles, lost nodes), None for a run without one; without ``--actors`` the
    document has no ``pool`` and the tables still print from the same state."""
    from mixscope.cli import main
    from mixscope.store.layout import Layout

    layout = Layout.open(str(tmp_path))
    for run_id in ("r1", "r2"):
        record = {"run_id": run_id, "status": "complete", "shards_total": 0}
        layout.write_json(layout.run_record_path(run_id), record)
    state = {
        "ray_start_s": 1.5,
        "first_actor_ready_s": 4.0,
        "requested_bundles": 3,
        "actors": [
            {"actor": "a1", "node": "node-one", "state": "busy", "shard": 3, "shards": 2,
             "tokens": 500, "tok/s": 250, "start_s": 4.0, "load_s": 1.0, "error": ""},
        ],
        "nodes": [{"node": "node-two", "address": "10.0.0.2", "alive": False, "actors": 1,
                   "actor_deaths": 2, "lost": "gave up after 2 actor deaths"}],
        "lost_nodes": ["node-two"],
    }  # fmt: skip
    layout.write_json(layout.actors_path("r1"), state)

    result = CliRunner().invoke(main, ["status", str(tmp_path), "--json", "--actors"])
    assert result.exit_code == 0, result.output
    pools = {r["run_id"]: r["pool"] for r in json.loads(result.stdout)["runs"]}
    assert pools == {"r1": state, "r2": None}
    assert pools["r1"]["requested_bundles"] == 3 and pools["r1"]["lost_nodes"] == ["node-two"]
    assert pools["r1"]["actors"][0]["shard"] == 3 and pools["r1"]["nodes"][0]["actor_deaths"] == 2

    plain = CliRunner().invoke(main, ["status", str(tmp_path), "--json"])
    assert plain.exit_code == 0 and all("pool" not in r for r in json.loads(plain.stdout)["runs"])
    tables = CliRunner().invoke(main, ["status", str(tmp_path), "--actors", "--run", "r1"])
    assert tables.exit_code == 0, tables.output
    assert "asking the autoscaler for 3 bundles" in tables.output
    assert "r1 node node-two lost" in tables.output and "node-one" in tables.output

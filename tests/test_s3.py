"""Results and corpora on S3 (issue 14), against a real HTTP endpoint (moto's server).

The same tiny job is written to a local folder and to ``s3://bucket/prefix``; everything
read back from S3 (commit records, status, SQL, named queries, the report, a resume) must
equal the local answers exactly. The exclusive-create and lease primitives are raced for
real against the endpoint's conditional writes.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.config import load_spec
from mixscope.errors import MixscopeError
from mixscope.runtime.driver import run_job
from mixscope.sql.named import run_query
from mixscope.sql.views import connect
from mixscope.status import run_status
from mixscope.store import generations, manifest, objectstore
from mixscope.store.layout import Layout
from mixscope.store.lease import Lease
from s3_server import AWS_ENV, moto_server, new_bucket, objects, s3_client

DEMO = Path(__file__).parents[1] / "jobs" / "data" / "demo.txt"
TABLES = ("tokens", "occurrences", "layer_stats", "token_stats", "frequencies", "runs")


@pytest.fixture(scope="session")
def s3_endpoint():
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def s3(s3_endpoint):
    """(endpoint, botocore client) with the AWS variables pointing at the endpoint."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**AWS_ENV, "AWS_ENDPOINT_URL": s3_endpoint}.items():
            mp.setenv(k, v)
        for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
            mp.delenv(k, raising=False)
        mp.delenv(objectstore.DUCKDB_S3_ENV, raising=False)
        yield s3_endpoint, s3_client(s3_endpoint)


def _spec(model: str, out: str, corpus: list[str] | None = None, **extra):
    return load_spec(
        None,
        {
            "model": model,
            "corpus.paths": corpus or [str(DEMO)],
            "out": out,
            "analysis.max_length": 32,
            "analysis.mask_rate": 0.25,
            "runtime.executor": "local",
            "runtime.docs_per_shard": 4,
            "runtime.batch_size": 4,
            "output.detail": "full",
            **extra,
        },
    )


@pytest.fixture(scope="module")
def roots(s3, tiny_bert_dir, tmp_path_factory):
    """The same job written locally and to S3."""
    _, client = s3
    bucket = new_bucket(client)
    local = str(tmp_path_factory.mktemp("local-out"))
    remote = f"s3://{bucket}/results/run-a"
    for out in (local, remote):
        summary = run_job(_spec(tiny_bert_dir, out))
        assert summary.status == "complete", summary.errors
    return {"local": local, "s3": remote, "bucket": bucket, "client": client}


def _counts(root: str) -> dict[str, int]:
    con = connect(root)
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def test_job_on_s3_commits_the_same_rows_as_locally(roots):
    local, remote = Layout.open(roots["local"]), Layout.open(roots["s3"])
    assert remote.is_s3 and not remote.is_local
    (run_id,) = local.list_dirs(local.runs_dir())
    assert remote.list_dirs(remote.runs_dir()) == [run_id]  # same identity, same run
    lc, rc = manifest.commits(local, run_id), manifest.commits(remote, run_id)
    assert sorted(lc) == sorted(rc) and len(lc) >= 2
    for shard in lc:
        for kind, entry in lc[shard].files.items():
            assert rc[shard].files[kind].rows == entry.rows, (shard, kind)
            assert rc[shard].files[kind].path == entry.path  # relative to the root
    # no temporary names and no folder markers: only final objects, data before commits
    keys = objects(roots["client"], roots["bucket"], "results/run-a/")
    assert keys and not [k for k in keys if k.endswith((".tmp", "/"))]
    # every data file a commit names exists with the recorded size; the statistics
    # partials were consolidated (then deleted) into the files the newest record names
    for rec in rc.values():
        for kind in ("tokens", "documents"):
            entry = rec.files[kind]
            info = remote.fs.get_file_info(remote.absolute(entry.path))
            assert info.size == entry.bytes
    gen = generations.latest(remote, run_id)
    assert gen.shards == frozenset(rc) and gen.files
    for entry in gen.files.values():
        assert remote.fs.get_file_info(remote.absolute(entry["path"])).size == entry["bytes"]
    assert not [k for k in keys if "/_partial/" in k]


def test_status_sql_and_named_queries_equal_local(roots):
    (st_local,), (st_s3,) = run_status(roots["local"]), run_status(roots["s3"])
    for key in ("run_id", "status", "done", "failed", "pending", "rows"):
        assert st_s3[key] == st_local[key], key
    assert st_s3["status"] == "complete" and st_s3["pending"] == 0

    counts = _counts(roots["local"])
    assert counts["tokens"] > 0 and counts["runs"] == 1
    assert _counts(roots["s3"]) == counts

    lcon, rcon = connect(roots["local"]), connect(roots["s3"])
    for name in ("summary", "layer_profile", "top_tokens"):
        a = run_query(lcon, name, {}).fetchall()
        b = run_query(rcon, name, {}).fetchall()
        assert a and sorted(map(repr, a)) == sorted(map(repr, b)), name
    sql = "SELECT layer, avg(attnres_n), sum(position) FROM tokens GROUP BY layer ORDER BY 1"
    assert rcon.execute(sql).fetchall() == lcon.execute(sql).fetchall()

    # the CLI on the s3:// URI answers the same
    cli = CliRunner().invoke(main, ["sql", roots["s3"], "SELECT count(*) AS n FROM tokens"])
    assert cli.exit_code == 0, cli.output
    assert str(counts["tokens"]) in cli.output
    q_local = CliRunner().invoke(main, ["query", roots["local"], "summary", "--format", "json"])
    q_s3 = CliRunner().invoke(main, ["query", roots["s3"], "summary", "--format", "json"])
    assert q_s3.exit_code == 0, q_s3.output
    assert q_s3.output == q_local.output
    status = CliRunner().invoke(main, ["status", roots["s3"]])
    assert status.exit_code == 0, status.output
    assert "complete" in status.output


def test_duckdb_reads_s3_without_network_and_stays_read_only(roots, tmp_path):
    import duckdb

    try:  # httpfs is used when it is installed; nothing may download it here
        probe = duckdb.connect()
        probe.execute("SET autoinstall_known_extensions = false")
        probe.execute("LOAD httpfs")
        expected = "httpfs"
    except duckdb.Error:
        expected = "fsspec"
    assert objectstore.duckdb_attach(duckdb.connect(), roots["s3"]) == expected

    con = connect(roots["s3"])
    secret = tmp_path / "secret.txt"
    secret.write_text("x\n")
    other = f"s3://{roots['bucket']}/results/other/x.parquet"
    for path in (str(secret), other):  # outside the root: refused, local or on S3
        with pytest.raises(duckdb.Error, match=r"(?i)permission|disabled|not allowed"):
            con.execute(f"SELECT * FROM read_csv('{path}')").fetchall()


def test_httpfs_forced_without_the_extension_is_a_clear_error(roots, monkeypatch):
    import duckdb

    try:
        duckdb.connect().execute("LOAD httpfs")
        pytest.skip("httpfs is installed here")
    except duckdb.Error:
        pass
    monkeypatch.setenv(objectstore.DUCKDB_S3_ENV, "httpfs")
    with pytest.raises(MixscopeError, match="httpfs"):
        connect(roots["s3"])
    monkeypatch.setenv(objectstore.DUCKDB_S3_ENV, "fsspec")
    assert connect(roots["s3"]).execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_report_from_s3(roots, tmp_path):
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", roots["s3"], "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    local = tmp_path / "local.html"
    assert CliRunner().invoke(main, ["report", roots["local"], "-o", str(local)]).exit_code == 0
    assert len(html) > 1000
    (run_id,) = Layout.open(roots["local"]).list_dirs(Layout.open(roots["local"]).runs_dir())
    assert run_id[:8] in html and run_id[:8] in local.read_text(encoding="utf-8")


def test_rerun_on_s3_resumes_and_writes_nothing(roots, tiny_bert_dir):
    client, bucket = roots["client"], roots["bucket"]
    before = objects(client, bucket, "results/run-a/")
    layout = Layout.open(roots["s3"])
    (run_id,) = layout.list_dirs(layout.runs_dir())
    commits_before = manifest.commits(layout, run_id)
    summary = run_job(_spec(tiny_bert_dir, roots["s3"]))
    assert summary.status == "complete"
    after = objects(client, bucket, "results/run-a/")
    # the run record notes the invocation; every data object and commit record is untouched
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed <= {f"results/run-a/_mixscope/runs/{run_id}/run.json"}, changed
    assert manifest.commits(layout, run_id) == commits_before
    assert _counts(roots["s3"]) == _counts(roots["local"])


def test_scrub_on_s3_finds_names_and_repairs_a_flipped_byte(roots, tiny_bert_dir, tmp_path):
    """``status --verify`` over ``s3://``: a detail object with one flipped byte (same
    size: the plain status cannot tell) is named with its shard, exit 1; SQL that reads it
    fails on one line naming it; ``run --repair`` redoes that shard alone and the answers
    equal the local root's."""
    from run_helpers import flip_unreadable

    client, bucket = roots["client"], roots["bucket"]
    for key in objects(client, bucket, "results/run-a/"):  # a copy: the fixture stays clean
        dest = key.replace("results/run-a/", "results/scrub/", 1)
        client.copy_object(Bucket=bucket, Key=dest, CopySource={"Bucket": bucket, "Key": key})
    root = f"s3://{bucket}/results/scrub"
    layout = Layout.open(root)
    (run_id,) = layout.list_dirs(layout.runs_dir())
    shard = max(manifest.commits(layout, run_id))
    rel = manifest.commits(layout, run_id)[shard].files["tokens"].path
    local = tmp_path / "part.parquet"
    local.write_bytes(client.get_object(Bucket=bucket, Key=f"results/scrub/{rel}")["Body"].read())
    flip_unreadable(local, names_file=False)
    client.put_object(Bucket=bucket, Key=f"results/scrub/{rel}", Body=local.read_bytes())

    assert CliRunner().invoke(main, ["status", root]).exit_code == 0  # sizes match
    verified = CliRunner().invoke(main, ["status", root, "--verify", "--json", "--no-progress"])
    assert verified.exit_code == 1, verified.output
    (run,) = json.loads(verified.stdout)["runs"]
    assert [(d["shard"], d["file"]) for d in run["damaged"]] == [(shard, rel)]
    assert f"run {run_id}: shard {shard}" in verified.stderr
    result = CliRunner().invoke(main, ["sql", root, "SELECT * FROM tokens"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: cannot read {rel} (shard {shard} of run {run_id})")
    assert f"mixscope status {root} --verify" in line

    repaired = run_job(_spec(tiny_bert_dir, root), repair=True)
    assert repaired.status == "complete" and repaired.shards_done - repaired.shards_skipped == 1
    again = CliRunner().invoke(main, ["status", root, "--verify", "--no-progress"])
    assert again.exit_code == 0, again.output
    assert _counts(root) == _counts(roots["local"])
    sql = "SELECT layer, avg(attnres_n), sum(position) FROM tokens GROUP BY layer ORDER BY 1"
    assert connect(root).execute(sql).fetchall() == connect(roots["local"]).execute(sql).fetchall()


def test_corpus_read_from_s3_is_the_same_corpus(s3, roots, tiny_bert_dir, tmp_path):
    _, client = s3
    bucket = roots["bucket"]
    client.put_object(Bucket=bucket, Key="corpus/a/demo.txt", Body=DEMO.read_bytes())
    client.put_object(Bucket=bucket, Key="corpus/a/.hidden.txt", Body=b"never read\n")
    client.put_object(Bucket=bucket, Key="corpus/b/notes.md", Body=b"not matched\n")
    out = str(tmp_path / "from-s3")
    spec = _spec(tiny_bert_dir, out, corpus=[f"s3://{bucket}/corpus/**/*.txt"])
    assert run_job(spec).status == "complete"
    # same file name and bytes: the same corpus fingerprint, hence the same run and rows
    assert Layout.open(out).list_dirs(Layout.open(out).runs_dir()) == Layout.open(
        roots["local"]
    ).list_dirs(Layout.open(roots["local"]).runs_dir())
    assert _counts(out) == _counts(roots["local"])
    # a prefix names every (non-hidden) object under it; a missing key is a clear error
    from mixscope.corpus.sources import expand_paths

    assert expand_paths([f"s3://{bucket}/corpus/a"]) == [f"s3://{bucket}/corpus/a/demo.txt"]
    with pytest.raises(MixscopeError, match="does not exist"):
        expand_paths([f"s3://{bucket}/corpus/missing.txt"])
    with pytest.raises(MixscopeError, match="matches no files"):
        expand_paths([f"s3://{bucket}/corpus/*.jsonl"])


def test_exclusive_create_has_one_winner(s3):
    _, client = s3
    layout = Layout.open(f"s3://{new_bucket(client)}/x")
    path = f"{layout.base}/_mixscope/runs/r/stats/000001.json"
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def race(k: int) -> None:
        barrier.wait()
        if layout.write_json_exclusive(path, {"writer": k}):
            wins.append(k)

    threads = [threading.Thread(target=race, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert layout.read_json(path) == {"writer": wins[0]}
    assert not layout.write_json_exclusive(path, {"writer": 99})
    assert layout.read_json(path) == {"writer": wins[0]}


def test_lease_on_s3_is_exclusive_expires_and_is_never_held_twice(s3, monkeypatch):
    import mixscope.store.lease as lease_module

    clock = [time.time()]  # leases expire by this clock: advanced, never slept past
    monkeypatch.setattr(lease_module, "now", lambda: clock[0])
    _, client = s3
    folder = f"s3://{new_bucket(client)}/out/_mixscope/checkpoints/leases"
    a, b = Lease(folder, "ck", ttl=30), Lease(folder, "ck", ttl=30)
    assert a.acquire()
    assert not b.acquire()
    assert b.holder()["owner"] == a.owner
    assert a.renew() and a.held
    a.release()
    assert a.holder() is None  # released: the object is gone
    assert b.acquire()
    b.release()

    # a holder that stops renewing loses the lease once it expires; it then knows it lost
    c, d = Lease(folder, "ck2", ttl=0.6), Lease(folder, "ck2", ttl=30)
    assert c.acquire()
    c._stop.set()  # a stalled process: no more heartbeats
    assert not d.acquire()
    clock[0] += 0.8  # past c's TTL
    assert d.acquire()
    assert not c.renew() and not c.held
    c.release()  # must not remove d's lease
    assert d.holder()["owner"] == d.owner
    d.release()

    # many takers of one expired lease: exactly one wins
    e = Lease(folder, "ck3", ttl=0.2)
    assert e.acquire()
    e._stop.set()
    clock[0] += 0.4  # past e's TTL
    takers = [Lease(folder, "ck3", ttl=30) for _ in range(6)]
    got: list[bool] = []
    barrier = threading.Barrier(len(takers))

    def take(lease: Lease) -> None:
        barrier.wait()
        got.append(lease.acquire())

    threads = [threading.Thread(target=take, args=(t,)) for t in takers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got.count(True) == 1
    for t in takers:
        t.release()


def test_checkpoints_sync_to_s3(s3, tmp_path):
    import os

    import torch

    from mixscope.checkpoints.state import CheckpointState
    from mixscope.checkpoints.sync import sync_pass
    from tiny_models import build

    _, client = s3
    bucket = new_bucket(client)
    train = tmp_path / "train"
    old = time.time() - 3600
    for k, step in enumerate((100, 200)):
        folder = train / f"checkpoint-{step}"
        model, tok = build("bert", torch.float32, seed=k)
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        for p in folder.rglob("*"):
            os.utime(p, (old, old))
    probe = tmp_path / "probe.txt"
    probe.write_text("A short probe sentence.\nAnother probe sentence, a little longer.\n")
    out = f"s3://{bucket}/sweep"
    spec = load_spec(
        None,
        {
            "name": "tiny-train",
            "corpus.paths": [str(probe)],
            "out": out,
            "analysis.max_length": 32,
            "runtime.executor": "local",
            "checkpoints.quiet_seconds": 30,
        },
    )
    first = sync_pass(spec, source=str(train))
    assert [(o.step, o.status) for o in first.outcomes] == [(100, "analysed"), (200, "analysed")]
    again = sync_pass(spec, source=str(train))
    assert [(o.step, o.status) for o in again.outcomes] == [(100, "done"), (200, "done")]
    steps = connect(out).execute("SELECT step FROM runs ORDER BY step").fetchall()
    assert steps == [(100,), (200,)]
    states = CheckpointState(out).all()
    assert sorted(s.status for s in states) == ["done", "done"]
    keys = objects(client, bucket, "sweep/_mixscope/checkpoints/")
    assert len([k for k in keys if k.endswith(".json")]) == 2
    assert not [k for k in keys if k.endswith(".lease")]  # every lease released
    listing = CliRunner().invoke(main, ["checkpoints", "list", out])
    assert listing.exit_code == 0, listing.output
    assert listing.output.count("done") == 2


def test_ray_executor_writes_to_s3(ray_local, s3, roots, tiny_bert_dir):
    """Ray workers (other processes) get the endpoint and credentials and commit to S3."""
    out = f"s3://{roots['bucket']}/results/ray"
    summary = run_job(_spec(tiny_bert_dir, out, **{"runtime.executor": "ray"}))
    assert summary.status == "complete", summary.errors
    assert _counts(out) == _counts(roots["local"])
    rec = json.loads(
        roots["client"]
        .get_object(
            Bucket=roots["bucket"],
            Key=next(
                k
                for k in objects(roots["client"], roots["bucket"], "results/ray/_mixscope/runs/")
                if k.endswith("/run.json")
            ),
        )["Body"]
        .read()
    )
    assert rec["status"] == "complete"


def test_killed_ray_job_on_s3_resumes_to_the_local_rows(ray_local, s3, tiny_bert_dir, tmp_path):
    """Issue 14's round trip: a job with 2 Ray actors writing to S3 loses an actor mid-shard
    and then its driver (after that shard's retry wrote its files, before its commit
    record); rerun, it resumes, and SQL over s3:// returns exactly the rows of the same job
    on disk."""
    from run_helpers import cli_args, content_hash, driver_process, job_spec

    _, client = s3
    bucket = new_bucket(client)
    out = f"s3://{bucket}/killed"
    # the driver dies at shard 1's first result, its retry's, so always after the kill (at
    # shard 3's commit it raced the kill: the other actor could do shards 0, 2 and 3 first);
    # the retry is queued last, so other shards are committed and the tokens view exists
    faults = {
        "kill": {"shard": 1, "once": str(tmp_path / "actor-killed")},
        "crash_before_commit": {"shard": 1, "once": str(tmp_path / "driver-killed")},
    }
    args = [*cli_args(tiny_bert_dir, out), "--set", "runtime.shard_order=plan"]
    proc = driver_process(args, {"MIXSCOPE_FAULTS": json.dumps(faults)})
    log = proc.communicate(timeout=300)[0].decode(errors="replace")
    assert proc.returncode == 137, log[-2000:]
    assert (tmp_path / "actor-killed").exists() and (tmp_path / "driver-killed").exists()
    remote = Layout.open(out)
    (run_id,) = remote.list_dirs(remote.runs_dir())
    committed = manifest.commits(remote, run_id)
    assert 1 not in committed and committed  # its retry's objects written, never committed
    written = remote.relative(remote.data_file("tokens", run_id, 1))
    assert f"killed/{written}" in objects(client, bucket, "killed/")
    # nobody sees shard 1's objects (or any uncommitted shard's): exactly the committed docs
    visible = connect(out).execute("SELECT count(DISTINCT doc_id) FROM tokens").fetchone()[0]
    assert visible == sum(rec.docs for rec in committed.values())

    # S3 has no locks that die with their process: the killed driver's run lease holds the
    # run until it expires (run_lock.TTL), and a rerun before that is refused (exit 3)
    busy = CliRunner().invoke(main, ["run", *args, "--no-progress"])
    assert busy.exit_code == 3, busy.output
    assert "its lease expires at" in busy.output and len(busy.output.strip().splitlines()) == 1
    lease_key = f"killed/_mixscope/runs/{run_id}/driver.lease"
    held = json.loads(client.get_object(Bucket=bucket, Key=lease_key)["Body"].read())
    assert held["expires_at"] > time.time()
    held["expires_at"] = time.time() - 1  # as if its TTL had passed (not 60 s of waiting)
    client.put_object(Bucket=bucket, Key=lease_key, Body=json.dumps(held).encode())

    summary = run_job(job_spec(tiny_bert_dir, out), show_progress=False)
    assert summary.status == "complete", summary.errors
    assert summary.shards_skipped == len(committed)
    local = run_job(job_spec(tiny_bert_dir, tmp_path / "local"), show_progress=False)
    assert local.status == "complete"
    assert content_hash(out) == content_hash(str(tmp_path / "local"))
    keys = objects(client, bucket, "killed/")
    assert not [k for k in keys if k.endswith((".tmp", "/"))]

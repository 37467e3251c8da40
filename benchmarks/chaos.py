"""Chaos under load: a long job on a real multi-node Ray cluster, writing to an S3 root,
while a seeded schedule injects faults at random moments; then the verdict against a
clean run of the same job (issue 41).

The cluster is a head and two worker nodes (``ray start`` each, loopback, free ports, token
auth as Ray's defaults give: tests/ray_cluster.py), one actor per node; the root is a
bucket of moto's S3 server (real HTTP, conditional writes, every object version kept). The
job is a tiny random BERT over WikiText-2 paragraphs, two per shard, each shard slowed by a
sleep (``--shard-seconds``; the results are unchanged) so that the job lasts through the
schedule. The same job runs once without faults (the clean run: the reference and the wall
time), then once under the schedule's faults (benchmarks/chaos_faults.py: actor SIGKILLs,
nodes lost and restarted, driver SIGKILLs, drivers dying inside a consolidation, S3
outages), each logged with its time, driven to completion by benchmarks/chaos_job.py,
judged by benchmarks/chaos_verdict.py. Prints the faults injected and survived per kind,
the work redone (shard-seconds) and the wall-time cost against the clean run; exits 1 when
the verdict fails.

    python benchmarks/chaos.py --schedule short            # one fault of each kind (CI)
    python benchmarks/chaos.py --schedule full --save      # >= 20 of each kind

``--save`` writes benchmarks/results/chaos.md, which the test run's reliability report
(tests/reliability_report.py) puts into docs/reliability.md; ``--json PATH`` writes every
figure and the fault log.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from chaos_faults import KINDS, WHAT, Cluster, Store, schedule
from chaos_job import Job, Supervisor
from chaos_verdict import verdict, work_redone
from common import HEADING, publish, source_state, tests_module, wikitext_path

#: schedule name → (faults of each kind, documents (two per shard), seconds between faults
#: (uniform; None: at random moments between 25 and 75 % of the clean run's time, so that
#: every fault lands while the job runs, on a fast machine too), seconds each shard sleeps)
SCHEDULES: dict[str, tuple[int, int, tuple[float, float] | None, float]] = {
    "short": (1, 120, None, 0.5),
    "full": (20, 2400, (5.0, 11.0), 1.0),
}


def corpus(path: Path, docs: int) -> Path:
    """``docs`` documents: WikiText-2's paragraphs (headings skipped), 40 words each at
    most, those of 8 words or more; then the same paragraphs from their 21st word on, and
    so on, until there are enough."""
    paragraphs = [
        line.split()
        for line in wikitext_path().read_text(encoding="utf-8").splitlines()
        if line.strip() and not re.match(HEADING, line)
    ]
    lines: list[str] = []
    for skip in range(0, 10_000, 20):
        lines += [" ".join(w[skip : skip + 40]) for w in paragraphs if len(w) >= skip + 8]
        if len(lines) >= docs:
            break
    path.write_text("\n".join(lines[:docs]) + "\n", encoding="utf-8")
    return path


def tiny_model(folder: Path) -> str:
    import torch

    model, tok = tests_module("tiny_models").build("bert", torch.float32)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def job(model: str, text: Path, out: str, address: str, work: Path, slow: float, s3: dict) -> Job:
    args = [
        "--model", model, "--corpus", str(text), "--out", out, "--address", address,
        "--batch-size", "4", "--max-length", "48", "--detail", "full",
        "--set", "runtime.docs_per_shard=2", "--set", "runtime.max_workers=3",
        "--set", "runtime.max_retries=4", "--set", "runtime.node_backoff_seconds=1",
    ]  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    env = {**tests_module("ray_cluster").driver_env(), **s3}
    env["MIXSCOPE_RUN_LEASE_SECONDS"] = "6"  # a killed driver's run is free again after 6 s
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    j = Job(args, env, work)
    j.env["MIXSCOPE_FAULTS"] = j.faults_env(slow)  # slowed shards, their trace, the trigger
    return j


def survive(faults: list[Any], failures: list[tuple[float, str]], ok: bool) -> None:
    """A fault is survived when the job completed whole and exact (``ok``) and no driver
    failed on its own between it and the next fault (a failure is the last fault's)."""
    hit = sorted((f for f in faults if f.injected_at is not None), key=lambda f: f.injected_at)
    for f in hit:
        f.survived = ok
    for when, _ in failures:
        before = [f for f in hit if f.injected_at <= when]
        if before:
            before[-1].survived = False


def report(args: argparse.Namespace, res: dict[str, Any]) -> list[str]:
    v, faults = res["verdict"], res["faults"]
    lines = [
        f"Chaos run ({args.schedule} schedule, seed {args.seed}): {res['shards']} shards on a "
        f"head and 2 worker nodes (one actor each), S3 root on moto; {args.source}.",
        "",
        "| Fault | What | Injected | Survived |",
        "|---|---|---|---|",
    ]
    for kind in KINDS:
        mine = [f for f in faults if f["kind"] == kind]
        hit = [f for f in mine if f["injected_at"] is not None]
        ok = [f for f in hit if f["survived"]]
        lines.append(f"| {kind} | {WHAT[kind]} | {len(hit)} of {len(mine)} | {len(ok)} |")
    w = res["redone"]
    lines += [
        "",
        f"- verdict: **{'passed' if v['ok'] else 'FAILED'}** — "
        + ", ".join(f"{k}: {'yes' if ok else '**no**'}" for k, ok in v["checks"].items()),
        f"- `status --verify`: {v['verify']}",
        f"- drivers started: {res['drivers']} ({res['busy']} refused while a killed "
        f"driver's lease ran out, {res['unreachable']} refused in one line while the store "
        f"was down); drivers that failed on their own: {len(res['failures'])}",
        f"- work redone: {w['lost']} shard attempts lost of {w['attempts']}, "
        f"{w['seconds']:.1f} shard-seconds (each lost attempt counted until the shard's next "
        "attempt started, at most the shard's own time)",
        f"- wall time: clean run {res['clean_s']:.1f} s, chaos run {res['chaos_s']:.1f} s: "
        f"**{res['chaos_s'] / res['clean_s']:.2f}×** (+{res['chaos_s'] - res['clean_s']:.1f} s)",
        "- the whole benchmark: " + ", ".join(f"{k} {v:.0f} s" for k, v in res["phases"].items()),
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="short")
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--docs", type=int, default=None, help="documents (default: the schedule's)")
    ap.add_argument("--shard-seconds", type=float, default=None, help="sleep per shard")
    ap.add_argument("--timeout", type=float, default=None, help="give up the chaos job after")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/chaos.md")
    ap.add_argument("--source", default=None, help="the code measured (default: git's HEAD)")
    args = ap.parse_args()
    args.source = args.source or source_state()
    per_kind, docs, gap, slow = SCHEDULES[args.schedule]
    t_start = time.time()
    docs = args.docs or docs
    slow = slow if args.shard_seconds is None else args.shard_seconds
    work = Path(tempfile.mkdtemp(prefix="mx-chaos-"))
    s3_server = tests_module("s3_server")
    store = Store()
    s3 = {**s3_server.AWS_ENV, "AWS_ENDPOINT_URL": store.endpoint}
    os.environ.update(s3)  # this process reads the results too
    client = s3_server.s3_client(store.endpoint)
    bucket = s3_server.new_bucket(client)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    cluster = None
    try:
        text = corpus(work / "corpus.txt", docs)
        model = tiny_model(work / "model")
        cluster = Cluster(workers=2)
        phases = {"set-up": time.time() - t_start}
        roots = {k: f"s3://{bucket}/{k}" for k in ("clean", "chaos")}
        res: dict[str, Any] = {"schedule": args.schedule, "seed": args.seed, "shards": docs // 2}
        clean = job(model, text, roots["clean"], cluster.address, work / "clean", slow, s3)
        done = Supervisor(clean, cluster, store, [], args.seed).run(args.timeout or 3600)
        if done.failures or done.drivers != 1:
            sys.exit(f"the clean run did not complete at once: {done.failures}")
        res["clean_s"] = phases["clean run"] = done.seconds
        chaos = job(model, text, roots["chaos"], cluster.address, work / "chaos", slow, s3)
        window = (0.25 * done.seconds, 0.75 * done.seconds)
        faults = schedule(args.seed, per_kind, gap, start=gap[0] if gap else 0, within=window)
        sup = Supervisor(chaos, cluster, store, faults, args.seed, max_failures=40)
        t0 = time.time()
        out = sup.run(args.timeout or 20 * done.seconds + 600)
        res.update(chaos_s=out.seconds, drivers=out.drivers, busy=out.busy_retries)
        res["unreachable"] = out.unreachable
        res["failures"] = out.failures
        phases["chaos run"] = out.seconds
        t_verdict = time.time()
        res["verdict"] = verdict(roots["clean"], roots["chaos"], client, chaos.env)
        phases["verdict"] = time.time() - t_verdict
        res["phases"] = {k: round(v, 1) for k, v in phases.items()}
        survive(faults, out.failures, res["verdict"]["ok"])
        res["faults"] = [f.__dict__ for f in faults]
        res["redone"] = work_redone(chaos.trace, roots["chaos"], t0)
        res["log"] = chaos.log
        lines = report(args, res)
        publish("chaos", lines, args.save)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1, default=str), encoding="utf-8")
        if not res["verdict"]["ok"] or out.failures:
            print(json.dumps(res["verdict"], indent=1, default=str), file=sys.stderr)
            for when, failure in out.failures:
                print(f"[{when:7.1f} s] {failure}", file=sys.stderr)
            sys.exit(1)
    finally:
        if cluster is not None:
            cluster.shutdown()
        store.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work folder kept: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()

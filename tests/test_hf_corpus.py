"""Hugging Face datasets as a corpus (``corpus.format: hf``, corpus/hf.py): a saved dataset
gives the same documents, ids and rows as the same texts in JSONL; pairs, bad records,
sharding, resume, and the one-line error of a hub that cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

datasets = pytest.importorskip("datasets")

from mixscope.config import CorpusSpec, load_spec  # noqa: E402
from mixscope.corpus.plan import CorpusPlan, plan_corpus, read_shard  # noqa: E402
from mixscope.errors import MixscopeError, SpecError  # noqa: E402
from mixscope.runtime.driver import run_job  # noqa: E402
from mixscope.sql.views import connect  # noqa: E402
from mixscope.store import manifest  # noqa: E402
from mixscope.store.layout import Layout  # noqa: E402
from run_helpers import STATS_VIEWS, content_hash  # noqa: E402

DEMO = Path(__file__).parents[1] / "jobs" / "data" / "demo.txt"
TEXTS = [line for line in DEMO.read_text(encoding="utf-8").splitlines() if line.strip()]


def _save(path: Path, columns: dict, num_shards: int = 3) -> str:
    datasets.Dataset.from_dict(columns).save_to_disk(str(path), num_shards=num_shards)
    return str(path)


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _docs(spec: CorpusSpec, plan: CorpusPlan) -> list:
    return [(d.doc_id, d.text, d.external_id) for s in plan.shards for d in read_shard(s, spec)]


def _rows(root: str) -> list:
    """Every token row and statistic of a root's one run, without its run id."""
    con = connect(root)
    return [
        con.execute(f"SELECT * EXCLUDE (run_id) FROM {view} ORDER BY ALL").fetchall()
        for view in ("tokens", *STATS_VIEWS)
    ]


def _job(model: str, out: Path, corpus: dict, **overrides):
    base = {
        "model": model,
        **{f"corpus.{k}": v for k, v in corpus.items()},
        "out": str(out),
        "analysis.max_length": 40,
        "analysis.mask_rate": 0.25,
        "runtime.executor": "local",
        "runtime.docs_per_shard": 5,
        "runtime.batch_size": 4,
        "output.detail": "full",
    }
    return load_spec(None, {**base, **overrides})


def _documents(root: str) -> list[tuple]:
    """(doc_id, external id, segments, tokens) of every committed document."""
    rows = []
    for path in manifest.committed_files(Layout.open(root), "documents"):
        t = pq.read_table(path, columns=["doc_id", "external_id", "segments", "tokens"])
        rows += list(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))
    return sorted(rows)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """The demo texts as a saved dataset (3 Arrow files) and as JSONL, ids 100, 101, …"""
    tmp = tmp_path_factory.mktemp("hf-corpus")
    ids = [100 + k for k in range(len(TEXTS))]
    saved = _save(tmp / "saved", {"text": TEXTS, "id": ids})
    jsonl = _jsonl(
        tmp / "demo.jsonl", [{"text": t, "id": i} for t, i in zip(TEXTS, ids, strict=True)]
    )
    return saved, jsonl


@pytest.mark.parametrize("pairs", [False, True])
def test_a_saved_dataset_plans_the_documents_of_the_same_jsonl(corpora, pairs):
    saved, jsonl = corpora
    hf = CorpusSpec(paths=(saved,), format="hf", id_field="id", pairs=pairs)
    js = CorpusSpec(paths=(jsonl,), id_field="id", pairs=pairs)
    hf_plan, js_plan = plan_corpus(hf, docs_per_shard=4), plan_corpus(js, docs_per_shard=4)
    assert [Path(f).name for f in hf_plan.files] == [
        f"data-0000{k}-of-00003.arrow" for k in range(3)
    ]
    got, want = _docs(hf, hf_plan), _docs(js, js_plan)
    assert got == want and hf_plan.n_docs == js_plan.n_docs
    assert hf_plan.bad == js_plan.bad == {}  # 30 texts: 10 per Arrow file, pairs within each
    # the same dataset gives the same plan (ids, row offsets, fingerprint) on every run
    assert plan_corpus(hf, docs_per_shard=4).to_dict() == hf_plan.to_dict()


def test_rows_are_offsets_and_shards_reread_from_their_row(tmp_path):
    texts = [f"document number {k}" for k in range(23)]
    saved = _save(tmp_path / "s", {"text": texts}, num_shards=2)
    spec = CorpusSpec(paths=(saved,), format="hf")
    plan = plan_corpus(spec, docs_per_shard=5)
    assert [(Path(s.file).name[:10], s.start, s.n_docs) for s in plan.shards] == [
        ("data-00000", 0, 5),
        ("data-00000", 5, 5),
        ("data-00000", 10, 2),
        ("data-00001", 0, 5),
        ("data-00001", 5, 5),
        ("data-00001", 10, 1),
    ]
    # a shard re-read on its own (a resumed run, another worker) gives the same documents
    from_json = CorpusPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    docs = [d for s in reversed(from_json.shards) for d in read_shard(s, spec)]
    assert sorted((d.doc_id, d.text) for d in docs) == list(enumerate(texts))
    assert [d.offset for d in read_shard(plan.shards[4], spec)] == [5, 6, 7, 8, 9]


def test_a_dataset_dict_directory_and_arrow_files(tmp_path):
    train = datasets.Dataset.from_dict({"text": ["t1", "t2", "t3"]})
    test = datasets.Dataset.from_dict({"text": ["v1", "v2"]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "dd"))
    spec = CorpusSpec(paths=(str(tmp_path / "dd"),), format="hf")
    assert [d[1] for d in _docs(spec, plan_corpus(spec, 10))] == ["t1", "t2", "t3"]
    spec = CorpusSpec(paths=(str(tmp_path / "dd"),), format="hf", dataset_split="test")
    assert [d[1] for d in _docs(spec, plan_corpus(spec, 10))] == ["v1", "v2"]
    with pytest.raises(MixscopeError, match=r"no split 'dev' \(splits: train, test\)"):
        plan_corpus(CorpusSpec(paths=(str(tmp_path / "dd"),), format="hf", dataset_split="dev"), 1)
    # Arrow files themselves, by glob
    spec = CorpusSpec(paths=(str(tmp_path / "dd" / "test" / "*.arrow"),), format="hf")
    assert [d[1] for d in _docs(spec, plan_corpus(spec, 10))] == ["v1", "v2"]
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "a.txt").write_text("x\n")
    with pytest.raises(MixscopeError, match="no Arrow files"):
        plan_corpus(CorpusSpec(paths=(str(tmp_path / "none"),), format="hf"), 1)


def test_bad_records_are_counted_per_reason(tmp_path):
    texts = ["good one", None, "   ", "x" * 300, "nul\x00byte", "good two", "== Heading =="]
    saved = _save(tmp_path / "bad", {"text": texts, "id": list(range(7))}, num_shards=1)
    spec = CorpusSpec(paths=(saved,), format="hf", max_doc_bytes=200, skip_regex="^==")
    plan = plan_corpus(spec, 10)
    assert [d[1] for d in _docs(spec, plan)] == ["good one", "good two"]
    assert plan.bad == {
        "empty": 1,
        "missing_field": 1,
        "nul_bytes": 1,
        "oversized": 1,
        "skipped_by_rule": 1,
    }
    assert [(e["offset"], e["reason"]) for e in plan.bad_examples][:2] == [
        (1, "missing_field"),
        (2, "empty"),
    ]
    # the same records in JSONL are judged alike
    js = CorpusSpec(
        paths=(_jsonl(tmp_path / "bad.jsonl", [{"text": t} for t in texts]),),
        max_doc_bytes=200,
        skip_regex="^==",
    )
    assert plan_corpus(js, 10).bad == plan.bad
    # a text column that is not strings, a missing column, a file that is not Arrow
    _save(tmp_path / "ints", {"text": [1, 2, 3]}, num_shards=1)
    assert plan_corpus(CorpusSpec(paths=(str(tmp_path / "ints"),), format="hf"), 10).bad == {
        "not_text": 3
    }
    other = CorpusSpec(paths=(saved,), format="hf", text_field="body")
    assert plan_corpus(other, 10).bad == {"missing_column": 1}
    (tmp_path / "junk.arrow").write_bytes(b"not arrow at all")
    junk = CorpusSpec(paths=(str(tmp_path / "junk.arrow"),), format="hf")
    assert plan_corpus(junk, 10).bad == {"unreadable_file": 1}
    empty = _save(tmp_path / "empty", {"text": []}, num_shards=1)
    assert plan_corpus(CorpusSpec(paths=(empty,), format="hf"), 10).bad == {"empty_file": 1}


def test_a_job_on_a_dataset_equals_the_job_on_the_jsonl(corpora, tiny_bert_dir, tmp_path):
    saved, jsonl = corpora
    corpus = {"id_field": "id", "pairs": True}
    hf_out, js_out = tmp_path / "hf", tmp_path / "js"
    hf_spec = _job(tiny_bert_dir, hf_out, {"paths": [saved], "format": "hf", **corpus})
    js_spec = _job(tiny_bert_dir, js_out, {"paths": [jsonl], **corpus})
    hf_run = run_job(hf_spec, show_progress=False)
    js_run = run_job(js_spec, show_progress=False)
    assert hf_run.status == js_run.status == "complete"
    # 15 pairs, 5 per Arrow file: shards of 5 cut both corpora alike (the same float sums)
    assert hf_run.shards_total == js_run.shards_total == 3
    assert hf_run.tokens == js_run.tokens and hf_run.rows == js_run.rows
    assert _documents(str(hf_out)) == _documents(str(js_out))
    assert _rows(str(hf_out)) == _rows(str(js_out))  # every token row and statistic, exactly
    # a second run of the same job is the same run, skips every shard, changes nothing
    before = content_hash(str(hf_out))
    again = run_job(hf_spec, show_progress=False)
    assert again.run_id == hf_run.run_id and again.shards_skipped == hf_run.shards_total
    assert again.tokens == 0 and content_hash(str(hf_out)) == before


def test_a_resumed_run_reads_the_same_rows_per_shard(corpora, tiny_bert_dir, tmp_path, monkeypatch):
    """Shard 1 fails in the first run; the rerun does only it, from its recorded row."""
    from mixscope.runtime import worker

    saved, jsonl = corpora
    corpus = {"id_field": "id", "pairs": True}
    spec = _job(tiny_bert_dir, tmp_path / "hf", {"paths": [saved], "format": "hf", **corpus})
    clean = _job(tiny_bert_dir, tmp_path / "js", {"paths": [jsonl], **corpus})
    real = worker.read_shard

    def failing(shard, corpus_spec):
        if shard.shard_id == 1:
            raise RuntimeError("injected")
        return real(shard, corpus_spec)

    monkeypatch.setattr(worker, "read_shard", failing)
    first = run_job(_with(spec, max_retries=0), show_progress=False)
    assert first.status == "failed" and first.shards_failed == 1
    monkeypatch.setattr(worker, "read_shard", real)
    resumed = run_job(spec, show_progress=False)
    assert resumed.status == "complete" and resumed.run_id == first.run_id
    assert resumed.shards_skipped == 2
    assert run_job(clean, show_progress=False).status == "complete"
    assert _documents(str(tmp_path / "hf")) == _documents(str(tmp_path / "js"))
    assert _rows(str(tmp_path / "hf")) == _rows(str(tmp_path / "js"))


def _with(spec, **runtime):
    import dataclasses

    return dataclasses.replace(spec, runtime=dataclasses.replace(spec.runtime, **runtime))


def test_config_spelling_and_one_line_errors():
    spec = load_spec(
        None,
        {
            "corpus.format": "hf",
            "corpus.dataset": "wikitext",
            "corpus.dataset_config": "wikitext-2-raw-v1",
            "corpus.dataset_split": "test",
        },
    )
    assert spec.corpus.dataset == "wikitext" and spec.corpus.paths == ()
    for data, key in [
        ({"corpus.paths": ["x"], "corpus.dataset": "wikitext"}, "corpus.dataset: only with"),
        (
            {"corpus.format": "hf", "corpus.paths": ["x"], "corpus.dataset": "w"},
            "corpus.dataset: a hub dataset replaces corpus.paths",
        ),
        (
            {"corpus.format": "hf", "corpus.paths": ["x"], "corpus.dataset_config": "c"},
            "corpus.dataset_config: only for a hub dataset",
        ),
        ({"corpus.format": "hf"}, "corpus.paths: required"),
        ({"corpus.format": "arrow", "corpus.paths": ["x"]}, "corpus.format: auto|text|"),
    ]:
        with pytest.raises(SpecError, match=key) as err:
            load_spec(None, data)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["wikitext", "no-such-org/no-such-dataset"])
def test_an_unreachable_hub_is_one_line(name):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # tests/conftest.py: this machine is offline
    spec = CorpusSpec(format="hf", dataset=name, dataset_split="train")
    with pytest.raises(MixscopeError) as err:
        plan_corpus(spec, 4)
    message = str(err.value)
    assert "\n" not in message and name in message and "cannot be reached" in message


def test_no_network_is_one_line_from_the_cli(tmp_path):
    """Not offline by setting, but no hub to reach: one line from ``mixscope validate``."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf-home"))
    proc = subprocess.run(
        [
            *(sys.executable, "-c", "from mixscope.cli import main; main()", "validate"),
            *("--model", "m", "--out", str(tmp_path)),
            *("--set", "corpus.format=hf", "--set", "corpus.dataset=org/missing"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "org/missing" in lines[0] and "cannot be reached" in lines[0]
    assert "Traceback" not in proc.stderr


def test_datasets_is_imported_only_for_an_hf_corpus(tmp_path):
    code = (
        "import sys; from mixscope.config import CorpusSpec; "
        "from mixscope.corpus.plan import plan_corpus; "
        f"p = {str(tmp_path / 'a.txt')!r}; open(p, 'w').write('one\\ntwo\\n'); "
        "plan_corpus(CorpusSpec(paths=(p,)), 1); import mixscope.cli; "
        "print('datasets' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_a_streamed_dataset_shards_by_row(tmp_path, monkeypatch):
    """The hub reader (``load_dataset(streaming=True)``, rows skipped to a shard's start) on a
    local data folder, the hub's commit lookup stubbed: the documents of the same JSONL."""
    from mixscope.corpus import plan as plan_module

    folder = tmp_path / "hub"
    folder.mkdir()
    rows = [{"text": t, "id": k} for k, t in enumerate(TEXTS[:11])] + [{"text": None, "id": 99}]
    jsonl = _jsonl(folder / "train.jsonl", rows)
    monkeypatch.setattr(plan_module, "hub_digest", lambda source: "stub")
    spec = CorpusSpec(format="hf", dataset=str(folder), id_field="id", pairs=True)
    plan = plan_corpus(spec, docs_per_shard=2)
    assert plan.files == [f"hf:{folder}?split=train"]
    assert [s.start for s in plan.shards] == [0, 4, 8]  # rows of each shard's first record
    want = CorpusSpec(paths=(jsonl,), id_field="id", pairs=True)
    assert _docs(spec, plan) == _docs(want, plan_corpus(want, docs_per_shard=2))
    assert plan.bad == {"missing_field": 1, "unpaired": 1}


def test_checkpoints_list_reads_a_job_spec_on_a_hub_dataset(tmp_path):
    """``checkpoints list --job`` needs only the spec's checkpoints section: a job whose corpus
    is a hub dataset (no paths) loads there too."""
    from click.testing import CliRunner

    from mixscope.cli import main

    job = tmp_path / "job.yaml"
    job.write_text(
        "model: org/model\nout: " + str(tmp_path / "out") + "\n"
        "corpus: {format: hf, dataset: org/corpus, dataset_config: en, dataset_split: test}\n"
        "checkpoints: {quiet_seconds: 5}\n",
        encoding="utf-8",
    )
    train = tmp_path / "train"
    (train / "checkpoint-100").mkdir(parents=True)
    (train / "checkpoint-100" / "config.json").write_text("{}", encoding="utf-8")
    listing = CliRunner().invoke(
        main, ["checkpoints", "list", str(tmp_path / "out"), "-s", str(train), "-j", str(job)]
    )
    assert listing.exit_code == 0, listing.output
    assert listing.output.splitlines()[2].split()[:2] == ["100", "incomplete"]  # no weights yet

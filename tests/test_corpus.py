"""Corpus readers and the shard plan: every format, bad input counted, stable ids."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixscope.config import CorpusSpec
from mixscope.corpus.plan import plan_corpus, read_shard
from mixscope.errors import MixscopeError


def _plan(tmp_path, name, data: bytes, **kw):
    path = tmp_path / name
    path.write_bytes(data)
    spec = CorpusSpec(paths=(str(path),), **kw)
    return spec, plan_corpus(spec, docs_per_shard=2)


def _texts(spec, plan):
    return [d.text for s in plan.shards for d in read_shard(s, spec)]


def test_lines_crlf_bom_and_blank_lines(tmp_path):
    spec, plan = _plan(tmp_path, "a.txt", b"\xef\xbb\xbfFirst line\r\n\r\nSecond line\r\nThird\n")
    assert _texts(spec, plan) == ["First line", "Second line", "Third"]
    assert plan.bad == {} and plan.n_docs == 3
    assert [(s.first_doc, s.n_docs) for s in plan.shards] == [(0, 2), (2, 1)]


def test_paragraphs_and_pairs(tmp_path):
    data = b"p1 a\np1 b\n\n\np2\n\np3\n\np4\n\np5\n"
    spec, plan = _plan(tmp_path, "p.txt", data, split="paragraph")
    assert _texts(spec, plan) == ["p1 a\np1 b", "p2", "p3", "p4", "p5"]
    spec, plan = _plan(tmp_path, "p.txt", data, split="paragraph", pairs=True)
    assert _texts(spec, plan) == [("p1 a\np1 b", "p2"), ("p3", "p4")]
    assert plan.bad == {"unpaired": 1}


def test_bad_input_is_counted_not_dropped_silently(tmp_path):
    big = b"x" * (10 * 1024 * 1024)  # a 10 MB line
    data = (
        b"good one\n"
        + b"a" * 9000
        + b"\n"
        + b"\xff\xfe bad utf8\n"
        + b"nul\x00byte\n"
        + (bytes(range(1, 9)) + bytes(range(14, 32))) * 4
        + b"\n"
        + big
        + b"\ngood two\n"
    )
    spec, plan = _plan(tmp_path, "bad.txt", data)
    texts = _texts(spec, plan)
    assert texts[0] == "good one" and texts[2] == "good two" and len(texts) == 3
    assert plan.bad == {"binary": 1, "invalid_utf8": 1, "nul_bytes": 1, "oversized": 1}
    assert [e["reason"] for e in plan.bad_examples] == [
        "invalid_utf8",
        "nul_bytes",
        "binary",
        "oversized",
    ]


def test_binary_file(tmp_path):
    import random

    rnd = random.Random(0)
    _, plan = _plan(
        tmp_path, "blob.bin", bytes(rnd.randrange(256) for _ in range(20000)), format="text"
    )
    assert plan.n_docs == 0 and plan.bad == {"binary": 1}


def test_skip_regex_and_limit(tmp_path):
    spec, plan = _plan(
        tmp_path,
        "w.txt",
        b" = Title = \nbody one\n = = Sub = = \nbody two\nbody three\n",
        skip_regex=r"^\s*=.*=\s*$",
        limit=2,
    )
    assert _texts(spec, plan) == ["body one", "body two"]
    assert plan.bad == {"skipped_by_rule": 2}


def test_jsonl_gzip_and_ids(tmp_path):
    rows = [
        {"body": "alpha", "key": "a1"},
        {"body": "beta", "key": 7},
        {"nobody": 1},
        "not json at all",
    ]
    raw = "\n".join(json.dumps(r) if not isinstance(r, str) else r for r in rows).encode()
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(gzip.compress(raw))
    spec = CorpusSpec(paths=(str(path),), text_field="body", id_field="key")
    plan = plan_corpus(spec, docs_per_shard=1)
    docs = [d for s in plan.shards for d in read_shard(s, spec)]
    assert [(d.doc_id, d.text, d.external_id) for d in docs] == [
        (0, "alpha", "a1"),
        (1, "beta", "7"),
    ]
    assert plan.bad == {"invalid_json": 1, "missing_field": 1}


def test_zstd_text(tmp_path):
    path = tmp_path / "c.txt.zst"
    with pa.CompressedOutputStream(str(path), "zstd") as out:
        out.write(b"one\ntwo\nthree\n")
    spec = CorpusSpec(paths=(str(path),))
    plan = plan_corpus(spec, docs_per_shard=2)
    assert _texts(spec, plan) == ["one", "two", "three"]


def test_parquet(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(
        pa.table({"text": ["a doc", None, "another doc", ""], "id": [1, 2, 3, 4]}),
        path,
        row_group_size=2,
    )
    spec = CorpusSpec(paths=(str(path),), id_field="id")
    plan = plan_corpus(spec, docs_per_shard=1)
    docs = [d for s in plan.shards for d in read_shard(s, spec)]
    assert [(d.text, d.external_id, d.offset) for d in docs] == [
        ("a doc", "1", 0),
        ("another doc", "3", 2),
    ]
    assert plan.bad == {"empty": 1, "missing_field": 1}


def test_directories_globs_and_stable_ids(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.txt").write_text("b1\nb2\n")
    (tmp_path / "d" / "a.txt").write_text("a1\n")
    (tmp_path / "d" / "empty.txt").write_text("")
    (tmp_path / "d" / ".hidden").write_text("secret\n")
    spec = CorpusSpec(paths=(str(tmp_path / "d"),))
    first, second = plan_corpus(spec, 2), plan_corpus(spec, 2)
    assert first.to_dict() == second.to_dict()
    assert _texts(spec, first) == ["a1", "b1", "b2"]
    glob_spec = CorpusSpec(paths=(str(tmp_path / "d" / "*.txt"),))
    assert plan_corpus(glob_spec, 2).fingerprint == first.fingerprint


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        (("/no/such/file.txt",), "does not exist"),
        (("/no/such/*.txt",), "matches no files"),
        ((), "no corpus given"),
    ],
)
def test_missing_inputs_are_clear_errors(paths, message):
    with pytest.raises(MixscopeError, match=message):
        plan_corpus(CorpusSpec(paths=paths), 2)


def test_changed_file_is_detected(tmp_path):
    spec, plan = _plan(tmp_path, "a.txt", b"one\ntwo\nthree\n")
    (tmp_path / "a.txt").write_bytes(b"one\n")
    with pytest.raises(RuntimeError, match="changed since planning"):
        read_shard(plan.shards[0], spec)

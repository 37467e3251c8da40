"""Paper protocol fidelity (issue 13): pair selection, the masking count rule, and the
frequency analysis ranking a masked occurrence by its original token.

Pair selection is checked on a hand-built corpus with a hand-written fit rule (exact counts
and which records pair up), then end to end with a real tokenizer; the frequency queries
against a brute-force computation over the committed detail rows (read with pyarrow).
"""

from __future__ import annotations

import json
import math
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr

from mixscope.cli import main
from mixscope.config import CorpusSpec, load_spec
from mixscope.corpus.encode import encode_documents, pair_fit_check
from mixscope.corpus.masking import mask_count, mask_positions
from mixscope.corpus.plan import CorpusPlan, Shard, plan_corpus, read_shard
from mixscope.errors import MixscopeError
from mixscope.runtime.driver import run_job
from mixscope.runtime.prepare import identity_options
from mixscope.sql.named import run_query
from mixscope.sql.views import connect
from mixscope.status import run_status
from mixscope.store import manifest
from mixscope.store.layout import Layout
from mixscope.store.schema import STORED_MEASURES

HEADING = r"^\s*=.*=\s*$"

# -- pair selection -------------------------------------------------------------------------

#: paragraph lengths in words; a pair "fits" when its two lengths add to at most 10
LENGTHS = [3, 3, 9, 3, 8, 2, 4, "heading", 4, 12, 1, 1, 5]


def _paragraph(k: int, n: int) -> str:
    return " ".join(f"p{k}w{i}" for i in range(n))


def _corpus(tmp_path: Path) -> tuple[Path, list[str]]:
    """The corpus file and its paragraphs p0..p11 (the heading is skipped by rule)."""
    lines, paragraphs = [], []
    for n in LENGTHS:
        if n == "heading":
            lines.append(" = A heading = ")
        else:
            paragraphs.append(_paragraph(len(paragraphs), n))
            lines.append(paragraphs[-1])
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, paragraphs


def words_fit(a: str, b: str) -> bool:
    return len(a.split()) + len(b.split()) <= 10


def _spec(path: Path, selection: str, limit: int | None = None) -> CorpusSpec:
    return CorpusSpec(
        paths=(str(path),),
        format="text",
        skip_regex=HEADING,
        pairs=True,
        pair_selection=selection,
        limit=limit,
    )


def _docs(plan: CorpusPlan, spec: CorpusSpec) -> list:
    return [d for s in plan.shards for d in read_shard(s, spec)]


@pytest.mark.parametrize("per_shard", [1, 2, 3, 100])
def test_fit_selection_keeps_the_pairs_that_fit(tmp_path, per_shard):
    path, p = _corpus(tmp_path)
    spec = _spec(path, "fit")
    plan = plan_corpus(spec, per_shard, words_fit)
    # (p0, p1) fits; (p2, p3) = 12 and (p3, p4) = 11 do not: p2, p3 skipped; (p4, p5) fits;
    # (p6, p7) across the heading fits; (p8, p9) = 13 does not: p8 skipped; (p9, p10)
    # fits; p11 has no partner
    assert plan.pairs == {"kept": 4, "split": 0, "skipped": 3}
    assert plan.bad == {"skipped_by_rule": 1, "unpaired": 1}
    assert plan.n_docs == 4
    docs = _docs(plan, spec)
    assert [d.doc_id for d in docs] == [0, 1, 2, 3]
    assert [d.text for d in docs] == [(p[0], p[1]), (p[4], p[5]), (p[6], p[7]), (p[9], p[10])]
    # the same documents from a plan written and read back (what workers get)
    again = CorpusPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert [(d.doc_id, d.text, d.offset) for d in _docs(again, spec)] == [
        (d.doc_id, d.text, d.offset) for d in docs
    ]
    # a one-document shard at a document's offset (the report's example) reads that pair
    one = Shard(0, str(path), docs[2].offset, 2, 1)
    assert read_shard(one, spec)[0].text == (p[6], p[7])


def test_split_selection_counts_kept_and_split_pairs(tmp_path):
    path, p = _corpus(tmp_path)
    spec = _spec(path, "split")
    plan = plan_corpus(spec, 2, words_fit)
    # (p0,p1) 6 kept, (p2,p3) 12 split, (p4,p5) 10 kept, (p6,p7) 8 kept, (p8,p9) 13 split,
    # (p10,p11) 6 kept
    assert plan.pairs == {"kept": 4, "split": 2, "skipped": 0}
    assert plan.bad == {"skipped_by_rule": 1}
    assert [d.text for d in _docs(plan, spec)] == [(p[2 * k], p[2 * k + 1]) for k in range(6)]
    assert all(not s.skips for s in plan.shards)
    assert "skips" not in plan.to_dict()["shards"][0]  # split plans are as before
    assert plan_corpus(spec, 2).pairs is None  # without a fit check: not counted


def test_fit_selection_with_a_limit_counts_up_to_the_last_document(tmp_path):
    path, p = _corpus(tmp_path)
    spec = _spec(path, "fit", limit=2)
    plan = plan_corpus(spec, 1, words_fit)
    assert plan.pairs == {"kept": 2, "split": 0, "skipped": 2}
    assert plan.bad == {"skipped_by_rule": 1}  # the scan reads up to the next document
    assert [d.text for d in _docs(plan, spec)] == [(p[0], p[1]), (p[4], p[5])]


def test_pair_selection_is_validated_and_in_the_identity(tmp_path):
    path, _ = _corpus(tmp_path)
    base = {"corpus.paths": [str(path)], "corpus.pairs": True}
    with pytest.raises(MixscopeError, match=r"corpus\.pair_selection: split\|fit"):
        load_spec(None, {**base, "corpus.pair_selection": "pack"})
    split = identity_options(load_spec(None, base), 128)
    fit = identity_options(load_spec(None, {**base, "corpus.pair_selection": "fit"}), 128)
    assert "pair_selection" not in split["corpus"]  # runs from before keep their ids
    assert fit["corpus"]["pair_selection"] == "fit"


def test_paper_jobs_use_the_paper_protocol():
    jobs = Path(__file__).parents[1] / "jobs"
    for name in ("paper_bert_base.yaml", "paper_roberta_base.yaml"):
        spec = load_spec(str(jobs / name))
        assert spec.corpus.pairs and spec.corpus.pair_selection == "fit", name
        assert spec.analysis.mask_count == "floor" and spec.analysis.mask_rate == 0.12, name


def _real_corpus(tmp_path: Path, tok, max_length: int) -> tuple[Path, list[str]]:
    """Paragraphs of 10, 10, 40, 10, 30, 12, 6 word pieces (special tokens not counted)."""
    words = [w for w in tok.get_vocab() if w.isalpha() and w.isascii() and len(w) > 3]
    words = sorted(words)[:200]
    sizes = [10, 10, 40, 10, 30, 12, 6]
    paragraphs, k = [], 0
    for n in sizes:
        paragraphs.append(" ".join(words[k : k + n]))
        k += n
    for p, n in zip(paragraphs, sizes, strict=True):
        assert len(tok(p, add_special_tokens=False)["input_ids"]) == n
    path = tmp_path / "real.txt"
    path.write_text("\n".join(paragraphs) + "\n", encoding="utf-8")
    return path, paragraphs


def test_fit_selection_end_to_end(tiny_bert_dir, tmp_path):
    """A job with pair_selection fit: pairs chosen with the model's tokenizer, every
    sequence a whole pair, counts in the run record, `mixscope status` and the report."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    path, p = _real_corpus(tmp_path, tok, 40)
    # with [CLS] A [SEP] B [SEP]: (0,1) 23 fits; (2,3) 53 no, p2 skipped; (3,4) 43 no, p3
    # skipped; (4,5) 45 no, p4 skipped; (5,6) 21 fits
    fits = pair_fit_check(tok, 40)
    assert [fits(p[i], p[i + 1]) for i in range(6)] == [True, False, False, False, False, True]
    out = tmp_path / "out"
    spec = load_spec(
        None,
        {
            "model": tiny_bert_dir,
            "corpus.paths": [str(path)],
            "corpus.pairs": True,
            "corpus.pair_selection": "fit",
            "analysis.max_length": 40,
            "out": str(out),
            "runtime.executor": "local",
            "runtime.docs_per_shard": 1,
            "output.detail": "full",
        },
    )
    summary = run_job(spec, show_progress=False)
    assert summary.status == "complete" and summary.shards_total == 2
    record = json.loads(
        (out / "_mixscope" / "runs" / summary.run_id / "run.json").read_text(encoding="utf-8")
    )
    assert record["corpus"]["pairs"] == {"kept": 2, "split": 0, "skipped": 3}
    assert record["corpus"]["n_docs"] == 2 and record["corpus"]["bad"] == {}
    # every sequence is a whole pair: one segment per document, both token types
    layout = Layout.open(str(out))
    rows = [
        r for f in manifest.committed_files(layout, "tokens") for r in pq.read_table(f).to_pylist()
    ]
    assert {(r["doc_id"], r["segment"]) for r in rows} == {(0, 0), (1, 0)}
    assert {r["token_type"] for r in rows} == {0, 1}
    assert sum(1 for r in rows if r["doc_id"] == 0) == 23
    assert sum(1 for r in rows if r["doc_id"] == 1) == 21

    (status,) = run_status(str(out))
    assert status["pairs"] == {"kept": 2, "split": 0, "skipped": 3}
    result = CliRunner().invoke(main, ["status", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 kept, 0 split, 3 skipped" in result.output

    from mixscope.report.context import Report
    from mixscope.report.table_sections import runs_section
    from mixscope.store.run_record import RunRecord

    rep = Report(str(out), [RunRecord.from_json(record, "run.json")], None)
    runs_section(rep)
    html = "\n".join(rep.sections["runs"].parts)
    assert "2 kept, 0 split, 3 skipped" in html


# -- the masking count rule -------------------------------------------------------------------


def test_mask_count_floor_and_round_by_hand():
    # 12% of 30 = 3.6: round 4, floor 3 (the authors' int()); of 25 = 3.0: both 3;
    # of 5 = 0.6: round 1, floor 0 -> at least one; of 4 = 0.48: both 1 (at least one)
    assert [mask_count(0.12, m, "round") for m in (30, 25, 5, 4, 0)] == [4, 3, 1, 1, 0]
    assert [mask_count(0.12, m, "floor") for m in (30, 25, 5, 4, 0)] == [3, 3, 1, 1, 0]
    assert mask_count(0.5, 3, "floor") == 1 and mask_count(0.5, 3, "round") == 2
    assert mask_count(0.0, 30, "floor") == 0
    with pytest.raises(ValueError):
        mask_count(0.12, 30, "ceil")


def test_mask_positions_follow_the_rule():
    special = np.zeros(32, bool)
    special[[0, 31]] = True  # 30 maskable tokens
    r = mask_positions(special, 0.12, 0, 7, 0)
    f = mask_positions(special, 0.12, 0, 7, 0, "floor")
    assert len(r) == 4 and len(f) == 3
    assert not special[r].any() and not special[f].any()
    assert len(set(r.tolist())) == 4


def test_encode_documents_masks_by_the_rule(tiny_bert_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    words = sorted(w for w in tok.get_vocab() if w.isalpha() and w.isascii() and len(w) > 3)
    text = " ".join(words[:30])
    for rule, want in (("round", 4), ("floor", 3)):
        (seq,) = encode_documents(tok, [text], max_length=64, mask_rate=0.12, mask_count=rule)
        assert int((~seq.special).sum()) == 30
        assert int(seq.masked.sum()) == want, rule
        assert (seq.input_ids[seq.masked] == tok.mask_token_id).all()


def test_analyze_offers_the_authors_count_rule(tiny_bert_dir):
    """``mixscope.analyze(mask_count=...)``: 30 maskable tokens at rate 0.12 are 4 masked
    (round, the default) or 3 (floor: the authors' int(rate · n)); a bad rule is one line
    before any model is loaded."""
    from transformers import AutoTokenizer

    import mixscope

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    words = sorted(w for w in tok.get_vocab() if w.isalpha() and w.isascii() and len(w) > 3)
    text = " ".join(words[:30])
    for rule, want in ((None, 4), ("round", 4), ("floor", 3)):
        extra = {} if rule is None else {"mask_count": rule}
        table = mixscope.analyze(tiny_bert_dir, [text], mask_rate=0.12, seed=0, **extra)
        layer1 = table.filter(table["layer"].to_numpy() == 1)
        assert sum(layer1["is_masked"].to_pylist()) == want, rule
    with pytest.raises(
        MixscopeError, match=r"^mask_count must be one of round\|floor, got 'ceil'$"
    ):
        mixscope.analyze("no/such/model", [text], mask_rate=0.12, mask_count="ceil")


def test_mask_count_is_validated_and_in_the_identity():
    with pytest.raises(MixscopeError, match=r"analysis\.mask_count: round\|floor"):
        load_spec(None, {"corpus.paths": ["x"], "analysis.mask_count": "ceil"})
    round_ = identity_options(load_spec(None, {"corpus.paths": ["x"]}), 128)
    floor = identity_options(
        load_spec(None, {"corpus.paths": ["x"], "analysis.mask_count": "floor"}), 128
    )
    assert "mask_count" not in round_["analysis"]
    assert floor["analysis"]["mask_count"] == "floor"


# -- frequency analysis: a masked occurrence ranked by its original token --------------------


@pytest.fixture(scope="module")
def masked_run(tiny_bert_dir, tmp_path_factory):
    demo = Path(__file__).parents[1] / "jobs" / "data" / "demo.txt"
    out = tmp_path_factory.mktemp("masked-run")
    spec = load_spec(
        None,
        {
            "model": tiny_bert_dir,
            "corpus.paths": [str(demo)],
            "out": str(out),
            "analysis.max_length": 40,
            "analysis.mask_rate": 0.3,
            "runtime.executor": "local",
            "runtime.docs_per_shard": 8,
            "output.detail": "full",
        },
    )
    summary = run_job(spec, show_progress=False)
    assert summary.status == "complete"
    layout = Layout.open(str(out))
    cols: dict[str, list] = defaultdict(list)
    for f in manifest.committed_files(layout, "tokens"):
        t = pq.read_table(f)
        for name in t.column_names:
            cols[name] += t[name].to_pylist()
    occ = {k: np.array(v) for k, v in cols.items() if k not in STORED_MEASURES}
    for m in STORED_MEASURES:  # the layer average of each occurrence
        occ[m] = np.array([np.mean(np.float32(v).astype(np.float64)) for v in cols[m]])
    assert occ["is_masked"].sum() >= 20
    return str(out), summary.run_id, occ


def _brute(occ):
    """Frequency ranks (1 = most frequent, ties share the lowest rank) of each occurrence's
    original token, counted before masking."""
    ids, counts = np.unique(occ["original_id"], return_counts=True)
    rank_of = {int(t): 1 + int((counts > c).sum()) for t, c in zip(ids, counts, strict=True)}
    ranks = np.array([rank_of[int(t)] for t in occ["original_id"]])
    plain = ~np.isin(occ["token"], ["[CLS]", "[SEP]"])
    return ranks, plain


def _rho(x, y) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(spearmanr(np.asarray(x, float), np.asarray(y, float))[0])


def _query(root: str, name: str, **params) -> list[dict]:
    cur = run_query(connect(root), name, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@pytest.mark.parametrize("name", ["frequency_correlation_exact", "frequency_correlation"])
def test_frequency_correlation_ranks_masked_occurrences_by_original(masked_run, name):
    root, _run_id, occ = masked_run
    ranks, plain = _brute(occ)
    got = {r["measure"]: r for r in _query(root, name)}
    for m in ("attn_w", "attn_n", "attnres_n", "attnresln_n"):
        g = got[m]
        assert g["n"] == len(ranks)  # every occurrence, the masked ones included
        assert g["n_no_special"] == int(plain.sum())
        want_all, want_ns = _rho(ranks, occ[m]), _rho(ranks[plain], occ[m][plain])
        tol = 1e-9 if name.endswith("exact") else g["bound"] + 1e-12
        assert abs(g["rho_all"] - want_all) <= tol, (m, g, want_all)
        assert abs(g["rho_no_special"] - want_ns) <= tol, (m, g, want_ns)
    # without the masked occurrences the answer would differ: they are in it
    masked = occ["is_masked"].astype(bool)
    assert not math.isclose(
        _rho(ranks[~masked], occ["attnresln_n"][~masked]),
        got["attnresln_n"]["rho_all"],
        rel_tol=1e-6,
    )


def test_frequency_bins_rank_masked_occurrences_by_original(masked_run):
    root, _run_id, occ = masked_run
    ranks, _ = _brute(occ)
    per_decade = 4
    rows = [r for r in _query(root, "frequency_bins") if r["measure"] == "attnresln_n"]
    bins = np.floor(np.log10(ranks) * per_decade).astype(int)
    want = {}
    for b in sorted(set(bins.tolist())):
        sel = bins == b
        want[b] = (float(np.mean(occ["attnresln_n"][sel])), int(sel.sum()))
    assert {r["bin"]: r["n"] for r in rows} == {b: n for b, (_, n) in want.items()}
    assert sum(r["n"] for r in rows) == len(ranks)  # masked occurrences included
    for r in rows:
        assert math.isclose(r["mean"], want[r["bin"]][0], rel_tol=1e-9), r


@pytest.mark.parametrize("detail", [True, False])
def test_report_frequency_scatter_ranks_masked_occurrences_by_original(masked_run, detail):
    """The report's frequency figure (report/data.frequency_sample) ranks as the queries:
    with detail, every occurrence (the masked ones included) at its original token's rank;
    without, one point per (original token, category), the mean of its occurrences."""
    from mixscope.report.data import frequency_sample
    from mixscope.store.schema import CATEGORIES

    root, run_id, occ = masked_run
    ranks, _ = _brute(occ)
    got = frequency_sample(connect(root), run_id, limit=10**6, detail=detail)
    m = "attnresln_n"
    if detail:
        assert len(got["freq_rank"]) == len(ranks)  # masked occurrences included
        want = sorted(zip(ranks.tolist(), occ[m].tolist(), strict=True))
        have = sorted(zip(got["freq_rank"].tolist(), got[m].tolist(), strict=True))
        assert [r for r, _ in have] == [r for r, _ in want]
        assert np.allclose([v for _, v in have], [v for _, v in want], rtol=1e-6)
        return
    groups: dict[tuple, list] = defaultdict(list)
    cells = zip(occ["original_id"], ranks, occ["category"], occ[m], strict=True)
    for token, rank, cat, value in cells:
        groups[(int(token), int(rank), CATEGORIES[int(cat)])].append(value)
    assert any(cat == "mask" for *_, cat in groups)  # the masked ones are points too
    want = sorted((r, c, float(np.mean(v))) for (_, r, c), v in groups.items())
    have = sorted(
        zip(got["freq_rank"].tolist(), got["category"].tolist(), got[m].tolist(), strict=True)
    )
    assert [(r, c) for r, c, _ in have] == [(r, c) for r, c, _ in want]
    assert np.allclose([v for *_, v in have], [v for *_, v in want], rtol=1e-6)

"""`mixscope report`: a self-contained HTML page (or PNG files) built from real jobs' results."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import tempfile
from html import unescape
from html.parser import HTMLParser
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.config import load_spec
from mixscope.report.build import SECTIONS
from mixscope.runtime.driver import run_job
from mixscope.sql.named import run_query
from mixscope.sql.views import connect

LINES = """The cat sat on the mat while the dog slept by the door.
A quick brown fox jumps over the lazy dog in the morning.
Researchers measured how much context each token mixes in.
The river flows quietly through the old stone town.
She opened the window and the cold air rushed into the room.
Language models learn the statistics of words and sentences.
The market was busy with traders selling fruit and fish.
He read the letter twice before putting it in the drawer.
Rain fell all night and the streets were flooded by dawn.
The committee will meet again next week to discuss the plan.
Birds sang in the trees as the sun rose over the hills.
Every layer of the network adds a little more context.
The children played football in the park after school.
A small boat drifted slowly towards the distant island.
The museum opened a new exhibition about ancient maps.
Coffee and bread were served at the station cafe.
The engineer checked the bridge for cracks and rust.
Snow covered the mountains for most of the year.
The old library holds thousands of rare books.
Music filled the hall as the orchestra began to play.
"""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHROMIUM = Path("/usr/bin/chromium")


def _job(
    model: str, corpus: Path, out: Path, name: str, step: int | None = None, detail: str = "full"
) -> str:
    overrides = {
        "name": name,
        "model": model,
        "corpus.paths": [str(corpus)],
        "corpus.pairs": True,  # [CLS] A [SEP] B [SEP]: cls, sep, mask and normal tokens
        "analysis.mask_rate": 0.12,
        "analysis.max_length": 64,
        "runtime.executor": "local",
        "runtime.docs_per_shard": 4,
        "output.detail": detail,
        "out": str(out),
    }
    if step is not None:
        overrides["step"] = step
    summary = run_job(load_spec(None, overrides), show_progress=False)
    assert summary.status == "complete"
    return summary.run_id


@pytest.fixture(scope="module")
def roots(tiny_bert_dir, tmp_path_factory):
    """One results root with one run, and one with three checkpoints (steps 100, 200, 300)."""
    import torch

    from tiny_models import build

    base = tmp_path_factory.mktemp("report")
    corpus = base / "corpus.txt"
    corpus.write_text(LINES, encoding="utf-8")
    single = _job(tiny_bert_dir, corpus, base / "single", "tiny")
    steps = {}
    for seed, step in enumerate((100, 200, 300), start=1):
        ckpt = base / "checkpoints" / f"checkpoint-{step}"  # different weights: different runs
        model, tok = build("bert", torch.float32, seed=seed)
        model.save_pretrained(ckpt)
        tok.save_pretrained(ckpt)
        # statistics only: the report needs no per-token rows
        steps[step] = _job(str(ckpt), corpus, base / "trend", "sweep", step=step, detail="none")
    return {
        "base": base,
        "single": base / "single",
        "single_run": single,
        "trend": base / "trend",
        "steps": steps,
    }


def _report(*args: str):
    return CliRunner().invoke(main, ["report", *map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def trend_html(roots):
    out = roots["base"] / "trend.html"
    result = _report(roots["trend"], "-o", out)
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


class _Page(HTMLParser):
    """Headings, every src/href, images, and the summary table's cells."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.links: list[str] = []
        self.images: list[str] = []
        self.summary: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._heading: str | None = None
        self._row: tuple[str, str] | None = None
        self._cell: str | None = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if key in a:
                self.links.append(a[key])
        if tag == "img":
            self.images.append(a["src"])
        if tag in ("h2", "h3"):
            self._heading, self._text = tag, ""
        if tag == "tr" and "data-measure" in a:
            self._row = (a["data-run"], a["data-measure"])
            self.summary[self._row] = []
        if tag == "td" and self._row and "data-value" in a:
            self._cell, self._text = a["data-value"], ""

    def handle_data(self, data):
        self._text += data

    def handle_endtag(self, tag):
        if tag == self._heading:
            self.headings.append(self._text.strip())
            self._heading = None
        if tag == "td" and self._cell is not None:
            self.summary[self._row].append((self._cell, self._text.strip()))
            self._cell = None
        if tag == "tr":
            self._row = None


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def _png(data: bytes):
    from PIL import Image

    assert data.startswith(PNG_SIGNATURE)
    image = Image.open(BytesIO(data))
    image.load()
    return image


def test_html_is_self_contained_with_every_section(trend_html):
    page = _parse(trend_html)
    assert all(h in page.headings for h in SECTIONS.values()), page.headings
    external = [x for x in page.links if not x.startswith(("data:", "#"))]
    assert not external
    assert not re.search(r"<link|<script|url\(|@import", trend_html)
    # per run: layer curves, token types, frequency; one trend; 3 runs x 2 layers of maps
    assert len(page.images) == 3 * 3 + 1 + 3 * 2
    for src in page.images:
        head, data = src.split(",", 1)
        assert head == "data:image/png;base64"
        image = _png(base64.b64decode(data))
        assert image.width > 300 and image.height > 200
        assert len(np.unique(np.asarray(image.convert("L")))) > 10  # not a blank canvas
    assert "no trend to show" not in trend_html


def test_summary_numbers_equal_the_summary_query(roots, trend_html):
    page = _parse(trend_html)
    rows = run_query(connect(str(roots["trend"])), "summary").fetchall()
    assert len(rows) == 3 * 5 and set(page.summary) == {(r[0], r[1]) for r in rows}
    for run_id, measure, mean, top, low, n in rows:
        cells = page.summary[(run_id, measure)]
        assert [float(v) for v, _ in cells[:3]] == [mean, top, low]
        assert [t for _, t in cells[:3]] == [f"{100 * x:.2f}" for x in (mean, top, low)]
        assert int(cells[3][0]) == n


def test_run_option_restricts_the_report(roots, tmp_path):
    keep = roots["steps"][200]
    out = tmp_path / "one.html"
    result = _report(roots["trend"], "--run", keep, "--no-examples", "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    page = _parse(text)
    assert {run for run, _ in page.summary} == {keep}
    assert all(r not in text for s, r in roots["steps"].items() if s != 200)
    assert len(page.images) == 3 and "no trend to show" in text  # one step: no trend


def test_png_format_writes_one_file_per_plot(roots, tmp_path):
    out = tmp_path / "plots"
    result = _report(roots["single"], "--format", "png", "-o", out)
    assert result.exit_code == 0, result.output
    run = roots["single_run"]
    names = {p.name for p in out.iterdir()}
    plots = {f"{k}-{run}.png" for k in ("layers", "token_types", "frequency")}
    plots |= {f"contributions-{run}-layer{k:02d}.png" for k in (1, 2)}
    assert names == plots | {"summary.csv"}
    for name in plots:
        _png((out / name).read_bytes())


def test_example_sequence_is_the_runs_first_document(roots):
    from mixscope.report.example import example_for
    from mixscope.store.layout import Layout
    from mixscope.store.runs import load_run

    run = roots["single_run"]
    ex = example_for(str(roots["single"]), load_run(Layout.open(str(roots["single"])), run))
    assert ex.error is None and ex.doc_id == 0 and not ex.truncated
    stored = (
        connect(str(roots["single"]))
        .sql(
            "SELECT token FROM tokens WHERE doc_id = 0 AND segment = 0 AND layer = 1 "
            "ORDER BY position"
        )
        .fetchall()
    )
    assert ex.tokens == [t for (t,) in stored]  # same text, same masks as in the run
    n = len(ex.tokens)
    assert {m: a.shape for m, a in ex.maps.items()} == {
        m: (2, n, n) for m in ("attn_n", "attnres_n", "attnresln_n")
    }


def test_unloadable_model_is_a_note_not_a_failure(roots, tmp_path, monkeypatch):
    from dataclasses import replace

    import mixscope.store.runs as runs

    real = runs.load_runs

    def hub_model(layout):  # the run's model is a hub id that cannot be fetched offline
        return [
            replace(r, spec={**r.spec, "model": "no-such-org/no-such-model"}) for r in real(layout)
        ]

    monkeypatch.setattr(runs, "load_runs", hub_model)
    out = tmp_path / "r.html"
    result = _report(roots["single"], "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    note = re.search(r"No contribution maps for this run: ([^<]*)</p>", text)
    assert note and "no-such-org/no-such-model" in note.group(1), note
    assert len(_parse(text).images) == 3 and "\n" not in note.group(1)


@pytest.mark.parametrize("case", ["missing", "empty", "unknown-run"])
def test_clear_one_line_errors(roots, tmp_path, case):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = {
        "missing": [tmp_path / "nope"],
        "empty": [empty],
        "unknown-run": [roots["single"], "--run", "0123456789abcdef"],
    }[case]
    result = _report(*args, "-o", tmp_path / "r.html")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert not (tmp_path / "r.html").exists()


def test_an_unknown_run_lists_the_runs_by_id_whatever_second_they_were_made(tmp_path, monkeypatch):
    """``build_report`` with a run id that is not there (the library path; the CLI resolves
    prefixes first): its one line lists the runs by id, as ``resolve_run_ids`` does, not in
    creation order, which has whole seconds (store.runs.now) and so swaps two runs made
    across a second boundary. Here the run whose id sorts last is the older one."""
    import sql_fixtures as sf
    from mixscope.errors import MixscopeError
    from mixscope.report.build import build_report
    from mixscope.store.layout import Layout

    layout = Layout.open(str(tmp_path))
    rng = np.random.default_rng(3)
    for run_id, second in (("run-b", 1), ("run-a", 2)):
        monkeypatch.setattr(sf, "now", lambda s=second: f"2026-01-01T00:00:0{s}Z")
        seqs = sf.make_sequences(rng, 3)
        sf.write_synthetic_run(
            layout, run_id, [sf.shard_arrays(seqs, 1, rng)], name=run_id, step=None
        )
    with pytest.raises(MixscopeError) as err:
        build_report(str(tmp_path), ["run-c"], str(tmp_path / "r.html"))
    assert str(err.value) == f"unknown run 'run-c' in {tmp_path}; runs: run-a, run-b"


#: appended to a copy of the report: once everything has loaded, what a reader's browser
#: holds (each image decoded or not, its drawn size, the tables and their rows, the
#: headings) is written into the DOM, where ``--dump-dom`` brings it back. The control image
#: is broken on purpose, so a probe that could not tell a broken image would fail the test.
PROBE = """<img id="probe-control" alt="" src="data:image/png;base64,AAAA">
<script>
window.addEventListener("load", () => {
  const images = [...document.images].filter((i) => i.id !== "probe-control");
  const control = document.getElementById("probe-control");
  const result = {
    images: images.map((i) => ({
      complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
      shown: i.getBoundingClientRect().width,
    })),
    control: {complete: control.complete, width: control.naturalWidth},
    tables: [...document.querySelectorAll("table")].map((t) => t.tBodies[0].rows.length),
    summary_rows: document.querySelectorAll("tr[data-measure]").length,
    headings: [...document.querySelectorAll("h2")].map((h) => h.textContent),
    height: document.body.scrollHeight,
    layer_figures: [...document.querySelectorAll("#layers figure")].map((f) => {
      const img = f.querySelector("img");
      const cap = f.querySelector("figcaption");
      return {caption: cap ? cap.textContent : "", width: img.naturalWidth,
        height: img.naturalHeight, shown: img.getBoundingClientRect().width};
    }),
  };
  const out = document.createElement("pre");
  out.id = "probe-result";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>
"""

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs /usr/bin/chromium (.ci/run installs it in CI)"
)


def _chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--window-size=1400,4000",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )


@needs_chromium
def test_every_figure_and_table_loads_in_headless_chromium(roots, trend_html):
    """What a reader's browser makes of the page: every figure decodes and is drawn, no
    image is broken, the tables and every section are there (the page parsing alone cannot
    tell a PNG that a browser refuses)."""
    probe = roots["base"] / "trend-probe.html"
    probe.write_text(trend_html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = _chromium(
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=10000",
        "--dump-dom",
        probe.as_uri(),
    ).stdout
    found = re.search(r'<pre id="probe-result">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    seen = json.loads(unescape(found.group(1)))

    assert seen["control"] == {"complete": True, "width": 0}  # the probe sees a broken one
    page = _parse(trend_html)
    assert len(seen["images"]) == len(page.images) == 3 * 3 + 1 + 3 * 2
    for img, src in zip(seen["images"], page.images, strict=True):
        png = _png(base64.b64decode(src.split(",", 1)[1]))
        assert img["complete"] and (img["width"], img["height"]) == png.size, img
        assert img["shown"] > 100, img  # drawn on the page, not hidden or collapsed
    assert seen["summary_rows"] == 3 * 5
    assert seen["tables"] and all(rows > 0 for rows in seen["tables"]), seen["tables"]
    assert all(h in seen["headings"] for h in SECTIONS.values()), seen["headings"]
    assert seen["height"] > 2000  # laid out as a long page, not collapsed
    # the per-layer figures: one per run, the paper group's two panels side by side, named
    # in the caption, and drawn wide enough to read (the page's grid: 560 px or more)
    panels = (
        "Panels: paper: norm-based (ATTN-N, ATTNRES-N, ATTNRESLN-N); "
        "paper: weight-based (ATTN-W, ATTNRES-W)"
    )
    assert [f["caption"] for f in seen["layer_figures"]] == [panels] * 3
    for f in seen["layer_figures"]:
        assert f["width"] > 1.5 * f["height"] and f["shown"] >= 560, f


@needs_chromium
def test_renders_in_headless_chromium(roots, trend_html):
    shot = roots["base"] / "screenshot.png"
    _chromium(f"--screenshot={shot}", (roots["base"] / "trend.html").as_uri())
    pixels = np.asarray(_png(shot.read_bytes()).convert("RGB"))
    assert pixels.shape[:2] == (4000, 1400)
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 200  # text, tables and plots, not one colour
    ink = (pixels.min(axis=2) < 200).any(axis=1)  # rows with anything darker than the page
    assert ink[:800].mean() > 0.2 and ink[2000:].mean() > 0.2  # content top and bottom


def test_a_bfloat16_run_is_reported_and_drawn_in_bfloat16(roots, tiny_bert_dir, tmp_path):
    """The report's run table names the run's dtype and its example maps are computed in
    it (they were labelled and computed as float32 whatever the run used)."""
    import mixscope
    from mixscope.report.example import example_for
    from mixscope.store.layout import Layout
    from mixscope.store.runs import load_run

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(LINES, encoding="utf-8")
    out = tmp_path / "bf16"
    overrides = {"analysis.dtype": "bfloat16", "analysis.mask_rate": 0.0, "corpus.pairs": False}
    run = run_job(
        load_spec(
            None,
            {
                "model": tiny_bert_dir,
                "corpus.paths": [str(corpus)],
                "analysis.max_length": 64,
                "runtime.executor": "local",
                "output.detail": "none",
                "out": str(out),
                **overrides,
            },
        ),
        show_progress=False,
    ).run_id
    html = tmp_path / "bf16.html"
    assert _report(out, "-o", html).exit_code == 0
    row = re.search(rf"<tr>\s*<td>{run}</td>.*?</tr>", html.read_text(encoding="utf-8"), re.S)
    assert row is not None and "<td>bfloat16</td>" in row.group(0)

    ex = example_for(str(out), load_run(Layout.open(str(out)), run))
    assert ex.error is None
    text = LINES.splitlines()[0]
    ref = {
        dtype: mixscope.contribution_maps(tiny_bert_dir, [text], max_length=64, dtype=dtype)[0]
        for dtype in ("bfloat16", "float32")
    }
    assert all(np.array_equal(ex.maps[m], ref["bfloat16"].maps[m]) for m in ex.maps)
    assert not all(np.array_equal(ex.maps[m], ref["float32"].maps[m]) for m in ex.maps)


# -- figures for a paper: panels per group, distinct colours, --example, vector files ---------

#: a WikiText-like corpus: a heading and a short line before the first document of 20+ tokens
HEADED = [
    "= Valkyria Chronicles III =",
    "The cat sat on the mat.",
    "Researchers measured how much context each token mixes in, layer by layer, across the "
    "whole corpus of old books.",
    *LINES.splitlines()[:5],
]


@pytest.fixture(scope="module")
def headed(tiny_bert_dir, tmp_path_factory):
    """One run of every measure group over :data:`HEADED` (no masking: the example maps'
    tokens are the tokenizer's)."""
    base = tmp_path_factory.mktemp("headed")
    corpus = base / "corpus.txt"
    corpus.write_text("\n".join(HEADED) + "\n", encoding="utf-8")
    spec = load_spec(
        None,
        {
            "name": "headed",
            "model": tiny_bert_dir,
            "corpus.paths": [str(corpus)],
            "analysis.measures": ["all"],
            "analysis.max_length": 64,
            "runtime.executor": "local",
            "output.detail": "full",
            "out": str(base / "results"),
        },
    )
    summary = run_job(spec, show_progress=False)
    assert summary.status == "complete"
    return {"root": base / "results", "run": summary.run_id, "model": tiny_bert_dir}


def _lab(colour: str) -> tuple[float, float, float]:
    """sRGB hex → CIELAB (D65), by the CIE formulas."""
    from matplotlib.colors import to_rgb

    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    m = ((0.4124564, 0.3575761, 0.1804375), (0.2126729, 0.7151522, 0.0721750))
    m += ((0.0193339, 0.1191920, 0.9503041),)
    xyz = [sum(k * c for k, c in zip(row, lin, strict=True)) for row in m]
    f = [
        t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29
        for t in (xyz[0] / 0.95047, xyz[1], xyz[2] / 1.08883)
    ]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def _delta_e2000(lab1, lab2) -> float:
    """CIEDE2000 colour difference (Sharma, Wu & Dalal 2005), written out."""
    import math

    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    cbar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(cbar**7 / (cbar**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1, c2 = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1 = math.degrees(math.atan2(b1, a1p)) % 360 if c1 else 0.0
    h2 = math.degrees(math.atan2(b2, a2p)) % 360 if c2 else 0.0
    dh = 0.0 if c1 * c2 == 0 else (h2 - h1 + 180) % 360 - 180
    dl, dc = l2 - l1, c2 - c1
    dhh = 2 * math.sqrt(c1 * c2) * math.sin(math.radians(dh / 2))
    lbar, cbarp = (l1 + l2) / 2, (c1 + c2) / 2
    if c1 * c2 == 0:
        hbar = h1 + h2
    elif abs(h1 - h2) <= 180:
        hbar = (h1 + h2) / 2
    else:
        hbar = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(hbar - 30))
        + 0.24 * math.cos(math.radians(2 * hbar))
        + 0.32 * math.cos(math.radians(3 * hbar + 6))
        - 0.20 * math.cos(math.radians(4 * hbar - 63))
    )
    rt = -2 * math.sqrt(cbarp**7 / (cbarp**7 + 25**7))
    rt *= math.sin(math.radians(60 * math.exp(-(((hbar - 275) / 25) ** 2))))
    sl = 1 + 0.015 * (lbar - 50) ** 2 / math.sqrt(20 + (lbar - 50) ** 2)
    sc, sh = 1 + 0.045 * cbarp, 1 + 0.015 * cbarp * t
    return math.sqrt(
        (dl / sl) ** 2 + (dc / sc) ** 2 + (dhh / sh) ** 2 + rt * (dc / sc) * (dhh / sh)
    )


#: two measures' colours at least this far apart (CIEDE2000): ~1 is a just-noticeable
#: difference side by side; thin lines and legend swatches need far more. The old palette's
#: purples were 15 apart; tab10, matplotlib's default cycle, has two pairs under 18.
MIN_DELTA_E = 20.0
#: every colour this far from the white page (a pale line vanishes)
MIN_FROM_WHITE = 25.0


def test_delta_e2000_matches_the_published_test_data():
    """The hand-written formula against Sharma et al.'s table (pairs 1, 7, 17, 25)."""
    table = [
        ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
        ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
        ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
        ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ]
    for lab1, lab2, want in table:
        assert _delta_e2000(lab1, lab2) == pytest.approx(want, abs=1e-4)
    assert _lab("#ffffff") == pytest.approx((100.0, 0.0, 0.0), abs=1e-2)


def test_every_measure_colour_is_clearly_distinct():
    """Every pair of the registry's measure colours, and each against the page."""
    from itertools import combinations

    from mixscope.mixing.measures import all_columns

    cols = all_columns()
    assert len({c.color.lower() for c in cols}) == len(cols)
    # a profile's buckets (the distance group's) are steps of one colour map, drawn as a
    # heatmap beside each other, never as lines: they are held apart from the page only
    pale = [c.label for c in cols if _delta_e2000(_lab(c.color), _lab("#ffffff")) < MIN_FROM_WHITE]
    assert not pale, pale
    cols = tuple(c for c in cols if c.profile is None)
    close = [
        (a.label, b.label, round(d, 1))
        for a, b in combinations(cols, 2)
        if (d := _delta_e2000(_lab(a.color), _lab(b.color))) < MIN_DELTA_E
    ]
    assert not close, close
    # negative control: the three purples the per-layer figure had fail the check
    old = ["#756bb1", "#7b4173", "#54278f"]  # GLOBENC-N, FFRESLN-N, SINK-N before
    assert min(_delta_e2000(_lab(a), _lab(b)) for a, b in combinations(old, 2)) < MIN_DELTA_E


def test_every_measure_has_one_panel_and_no_panel_mixes_kinds():
    """From the registry: each measure on exactly one axis; weights (dashed) and norms
    share one only in a group about the first position; a profile's buckets (distance)
    on none (their group's heatmap shows them)."""
    from mixscope.mixing.measures import GROUPS, all_columns, column, group_of
    from mixscope.report.layer_plots import layer_panels

    panels = layer_panels([c.name for c in all_columns()])
    placed = [m for p in panels for m in p.measures]
    assert sorted(placed) == sorted(c.name for c in all_columns() if c.profile is None)
    assert any(c.profile is not None for c in all_columns())
    for p in panels:
        (group,) = {group_of(m) for m in p.measures}
        if not GROUPS[group].first_position:
            assert len({column(m).dashed for m in p.measures}) == 1, p


def test_layer_figure_is_one_panel_per_group_titled_with_model_and_corpus(headed):
    from matplotlib.colors import to_hex

    import mixscope
    from mixscope.mixing.measures import column

    with mixscope.open(headed["root"]) as res:
        (fig,) = res.plot("layers")
        profile = res.query("layer_profile").to_pylist()
    axes = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in axes] == [
        "paper: norm-based",
        "paper: weight-based",
        "globenc",
        "sink: first position",
        "ff",
    ]
    labels = [[line.get_label() for line in ax.lines] for ax in axes]
    assert labels == [
        ["ATTN-N", "ATTNRES-N", "ATTNRESLN-N"],
        ["ATTN-W", "ATTNRES-W"],
        ["GLOBENC-N"],
        ["SINK-W", "SINK-N"],
        ["FF-N", "FFRES-N", "FFRESLN-N"],
    ]
    assert axes[3].get_ylabel() == "drawn from the first position (%)"
    assert {ax.get_ylabel() for ax in axes[:3] + axes[4:]} == {"mixing ratio (%)"}
    by_label = {column(m).label: m for m in {r["measure"] for r in profile}}
    for ax in axes:
        assert ax.get_ylim() == (0, 100)
        for line in ax.lines:
            m = by_label[line.get_label()]
            assert to_hex(line.get_color()) == column(m).color
            assert (line.get_linestyle() == "--") == column(m).dashed
            rows = sorted((r["layer"], r["seq_mean"]) for r in profile if r["measure"] == m)
            assert list(line.get_xdata()) == [layer for layer, _ in rows]
            assert np.allclose(line.get_ydata(), [100 * v for _, v in rows])
    title = fig.get_suptitle()
    assert f"{Path(headed['model']).name} on corpus.txt · headed" in title
    assert headed["run"] not in title


def test_titles_name_model_and_corpus_not_the_run(roots, trend_html):
    alts = re.findall(r'<img alt="([^"]*)"', trend_html)
    for step, run in roots["steps"].items():
        want = f"per-layer curves, checkpoint-{step} on corpus.txt · sweep · step {step}"
        assert want in alts, alts
        assert not any(run in a for a in alts)


def test_frequency_scatter_has_light_grids_under_the_points(headed):
    from matplotlib.colors import to_hex

    import mixscope
    from mixscope.report.plots import GRID_MAJOR, GRID_MINOR

    with mixscope.open(headed["root"]) as res:
        (fig,) = res.plot("frequency")
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == 11  # one per measure of every group
    for ax in panels:
        assert ax.get_axisbelow() is True
        major = ax.yaxis.get_gridlines()
        assert major and all(g.get_visible() for g in major)
        assert {to_hex(g.get_color()) for g in major} == {GRID_MAJOR}
        minor = ax.xaxis.get_minor_ticks()  # the log axis' minor decades
        assert minor and all(
            to_hex(t.gridline.get_color()) == GRID_MINOR and t.gridline.get_visible() for t in minor
        )


def test_example_is_the_first_document_of_20_tokens_or_the_one_asked_for(headed):
    from transformers import AutoTokenizer

    from mixscope.report.example import MIN_TOKENS, example_for
    from mixscope.store.layout import Layout
    from mixscope.store.runs import load_run

    tok = AutoTokenizer.from_pretrained(headed["model"])
    words = [tok.convert_ids_to_tokens(tok(text)["input_ids"]) for text in HEADED]
    assert [len(w) for w in words[:3]] == [9, 9, 24] and MIN_TOKENS == 20
    record = load_run(Layout.open(str(headed["root"])), headed["run"])
    ex = example_for(str(headed["root"]), record)
    assert ex.error is None and (ex.doc_id, ex.tokens) == (2, words[2])
    ex = example_for(str(headed["root"]), record, doc_id=0)
    assert ex.error is None and (ex.doc_id, ex.tokens) == (0, words[0])


@pytest.mark.parametrize("doc", ["99", "-1"])
def test_example_that_does_not_exist_is_a_one_line_error(headed, tmp_path, doc):
    out = tmp_path / "r.html"
    result = _report(headed["root"], "--example", doc, "-o", out)
    assert result.exit_code == 1
    last = len(HEADED) - 1
    assert result.output == (
        f"Error: --example {doc}: run {headed['run']} has no document {doc}; "
        f"its documents are 0–{last}\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["svg", "pdf"])
def test_vector_formats_write_the_page_and_a_file_per_figure(headed, tmp_path, fmt):
    """svg: into a directory (page report.html); pdf: beside a named page, other example."""
    import xml.etree.ElementTree as ET

    run = headed["run"]
    if fmt == "svg":
        folder, page = tmp_path / "paper", tmp_path / "paper" / "report.html"
        result = _report(headed["root"], "--format", fmt, "-o", folder)
    else:
        folder, page = tmp_path, tmp_path / "figures.html"
        result = _report(headed["root"], "--format", fmt, "-o", page, "--example", "1")
    assert result.exit_code == 0, result.output
    kinds = ("layers", "token_types", "frequency", "sink", "distance", "components")
    names = {f"{k}-{run}" for k in kinds}
    names |= {f"contributions-{run}-layer{k:02d}" for k in (1, 2)}
    figures = {f"{n}.{fmt}" for n in names}
    assert {p.name for p in folder.iterdir()} == figures | {page.name, "summary.csv"}
    assert result.output == f"wrote {page} (8 {fmt.upper()} figures beside it)\n"
    for name in figures:
        data = (folder / name).read_bytes()
        if fmt == "svg":
            assert ET.fromstring(data).tag == "{http://www.w3.org/2000/svg}svg"
        else:
            assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
    text = page.read_text(encoding="utf-8")
    linked = [x for x in _parse(text).links if not x.startswith(("data:", "#"))]
    assert sorted(linked) == sorted(figures)  # each figure links its file, nothing else
    assert len(_parse(text).images) == len(figures)  # the page still shows them (PNG)
    shown = "Document 2, 24 tokens." if fmt == "svg" else "Document 1, 9 tokens."
    assert shown in text


@needs_chromium
def test_vector_figures_render_in_headless_chromium(headed, tmp_path):
    """Every SVG that ``--format svg`` writes is an image a browser draws, at the size of
    its PNG on the page (the XML parsing alone cannot tell a drawing a browser refuses)."""
    folder = tmp_path / "svg"
    assert _report(headed["root"], "--format", "svg", "--no-examples", "-o", folder).exit_code == 0
    svgs = sorted(p.name for p in folder.glob("*.svg"))
    assert len(svgs) == 6  # layers, token types, frequency, sink, distance, components
    probe = folder / "probe.html"
    tags = "".join(f'<img src="{name}" alt="">' for name in svgs)
    probe.write_text(f"<html><body>{tags}{PROBE}</body></html>", "utf-8")
    dom = _chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri()).stdout
    found = re.search(r'<pre id="probe-result">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    seen = json.loads(unescape(found.group(1)))
    pngs = {
        alt: _png(base64.b64decode(src.split(",", 1)[1])).size
        for alt, src in re.findall(
            r'<img alt="([^"]*)" src="([^"]*)"', (folder / "report.html").read_text("utf-8")
        )
    }
    assert len(seen["images"]) == len(svgs) == len(pngs)
    for img in seen["images"]:
        assert img["complete"] and img["width"] > 300 and img["height"] > 200, img
    # the same figure size: the PNG at 100 px per inch, the SVG in points a browser draws
    # at 96 CSS px per inch
    want = sorted(round(w * 0.96) for w, _ in pngs.values())
    assert sorted(round(i["width"]) for i in seen["images"]) == pytest.approx(want, abs=2)


def test_a_groups_declared_section_is_drawn_from_the_registry(headed, tmp_path, monkeypatch):
    """A group's own section is one registry entry (``Group.section``): declared on a
    group that has none (ff here, drawing the sink query's figure), the report gets its
    heading and one figure per run, ``Results.plot`` its name; the sections that the sink
    and distance groups declare are exactly the report's between frequency and components."""
    import dataclasses

    from mixscope import registry
    from mixscope.report.build import build_report
    from mixscope.report.context import section_headings
    from mixscope.report.figures import plot_names

    declared = [g.section.id for g in registry.GROUPS.values() if g.section]
    assert declared == ["sink", "distance"]
    ids = list(section_headings())
    assert ids[ids.index("frequency") + 1 : ids.index("components")] == declared
    section = registry.Section(
        "ff-test",
        "A declared section",
        "sink_profile",
        "mixscope.report.plots:sink_profile",
        "Declared",
        "Drawn because the registry says so.",
    )
    ff = dataclasses.replace(registry.GROUPS["ff"], section=section)
    monkeypatch.setitem(registry.GROUPS, "ff", ff)
    assert "ff-test" in plot_names() and "ff-test" in section_headings()
    built = build_report(str(headed["root"]), output=str(tmp_path / "r"), fmt="png", examples=False)
    assert f"ff-test-{headed['run']}" in {p.name for p in built.plots}
    (s,) = [s for s in built.sections if s.id == "ff-test"]
    assert s.heading == "A declared section" and "Drawn because the registry says so." in s.parts[0]
    assert (tmp_path / "r" / f"ff-test-{headed['run']}.png").exists()

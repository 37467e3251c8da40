"""Put benchmark results into the docs: every figure there comes from a benchmark's output.

A benchmark run with ``--save`` writes its markdown to ``benchmarks/results/NAME.md``;
docs/performance.md marks where each goes::

    <!-- bench:NAME -->
    … replaced by benchmarks/results/NAME.md …
    <!-- /bench:NAME -->

and the README's ``bench:headlines`` section is generated from the same files (the bold
ratios of :data:`HEADLINES`' tables, one line each). ``python benchmarks/readme.py``
rewrites every section of :data:`DOCUMENTS`; ``--check`` exits 1 naming the sections that
differ (tests/test_readme.py runs the same check).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SECTION = re.compile(
    r"(<!-- bench:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)", re.S
)
#: the files whose sections this tool fills
DOCUMENTS = (REPO / "README.md", REPO / "docs" / "performance.md")
#: the README's summary: results file → what it measures, in order
HEADLINES = {
    "attention": "fast attention",
    "attention-decoders": "fast attention, 2024–26 layouts",
    "engine": "the engine",
    "ff": "the `ff` group",
    "efficiency": "a whole job",
    "host": "statistics (the result path)",
    "storage": "storage",
}


def headlines(results: Path = RESULTS) -> str:
    """One line per bold figure in the tables of :data:`HEADLINES`' results files: what it
    measures, the row, the column and the figure, as the benchmark printed them."""
    out = []
    for name, what in HEADLINES.items():
        header: list[str] | None = None
        for line in (results / f"{name}.md").read_text(encoding="utf-8").splitlines():
            if not line.startswith("|"):
                header = None  # a table ends
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
                continue
            for k, cell in enumerate(cells):
                if "**" in cell and k < len(header):
                    out.append(f"- {what} — {cells[0]}: {header[k]} {cell}")
    return "\n".join(out) + "\n"


def spliced(readme: str, results: Path = RESULTS) -> tuple[str, list[str]]:
    """The README with every marked section replaced by its results file; the names of the
    sections that changed. A section without a results file is an error."""
    changed: list[str] = []

    def fill(m: re.Match[str]) -> str:
        path = results / f"{m['name']}.md"
        if m["name"] == "headlines":
            body = headlines(results)
        elif not path.is_file():
            raise SystemExit(f"README section bench:{m['name']} has no {path}")
        else:
            body = path.read_text(encoding="utf-8")
        if body != m["body"]:
            changed.append(m["name"])
        return m.group(1) + body + m.group(4)

    return SECTION.sub(fill, readme), changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only say which sections are stale")
    p.add_argument("--readme", type=Path, nargs="*", default=list(DOCUMENTS))
    args = p.parse_args(argv)
    stale = []
    for doc in args.readme:
        new, changed = spliced(doc.read_text(encoding="utf-8"))
        stale += [f"{doc.name}: {c}" for c in changed]
        if not args.check:
            doc.write_text(new, encoding="utf-8")
            print(f"updated {', '.join(changed) or 'nothing'} in {doc.name}")
    if args.check and stale:
        print(f"stale sections: {', '.join(stale)} (run benchmarks/readme.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

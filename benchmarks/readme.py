"""Put benchmark results into the README: every figure there comes from a benchmark's output.

A benchmark run with ``--save`` writes its markdown to ``benchmarks/results/NAME.md``; the
README marks where each goes::

    <!-- bench:NAME -->
    … replaced by benchmarks/results/NAME.md …
    <!-- /bench:NAME -->

``python benchmarks/readme.py`` rewrites those sections; ``--check`` exits 1 naming the
sections that differ from their results file (tests/test_readme.py runs the same check).
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


def spliced(readme: str, results: Path = RESULTS) -> tuple[str, list[str]]:
    """The README with every marked section replaced by its results file; the names of the
    sections that changed. A section without a results file is an error."""
    changed: list[str] = []

    def fill(m: re.Match[str]) -> str:
        path = results / f"{m['name']}.md"
        if not path.is_file():
            raise SystemExit(f"README section bench:{m['name']} has no {path}")
        body = path.read_text(encoding="utf-8")
        if body != m["body"]:
            changed.append(m["name"])
        return m.group(1) + body + m.group(4)

    return SECTION.sub(fill, readme), changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only say which sections are stale")
    p.add_argument("--readme", type=Path, default=REPO / "README.md")
    args = p.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    new, changed = spliced(text)
    if args.check:
        if changed:
            print(f"stale README sections: {', '.join(changed)} (run benchmarks/readme.py)")
            return 1
        return 0
    args.readme.write_text(new, encoding="utf-8")
    print(f"updated {', '.join(changed) or 'nothing'} in {args.readme.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The supported architectures as a table, generated from the adapters (the README's).

Everything in a row is read off the adapter's data: its block layout and norms (the steps
of the block's chain, mixing/chain.py), the configuration variants, the measure groups
that apply (each group's ``unsupported``) and the transformers release its model types
need (models/transformers_needed.py), so the README cannot drift from the code:
``tests/test_readme.py`` checks the README's section against :func:`architecture_table`,
and ``python -m mixscope.mixing.architectures --write`` rewrites it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from mixscope.models.adapters import ADAPTERS, Adapter
from mixscope.models.transformers_needed import FLOOR, needed

#: where the table goes in the README
BEGIN, END = "<!-- architectures -->", "<!-- /architectures -->"


def block_layout(a: Adapter) -> str:
    """The block in words: encoder or decoder, where its norms stand."""
    kind = "decoder" if a.causal else "encoder"
    if a.attn_branch_norm and a.norm_after is None:
        return f"{kind}, a norm inside each branch, no input norms"
    if a.attn_branch_norm:
        return f"{kind}, sandwich norms (input, inside each branch, before the FF)"
    if a.parallel_residual:
        return f"pre-LN {kind}, parallel residual"
    return f"{a.placement}-LN {kind}"


def norms(a: Adapter) -> str:
    kind = {"layer": "LayerNorm", "rms": "RMSNorm"}[a.norm_kind]
    extras = [f"γ = {a.gamma_offset:g} + w"] if a.gamma_offset else []
    extras += ["float32"] if a.norm_in_float32 else []
    return kind + (f" ({', '.join(extras)})" if extras else "")


def groups(a: Adapter) -> list[str]:
    """The measure groups that apply to the adapter as it is."""
    from mixscope.registry import GROUPS

    return [name for name, g in GROUPS.items() if g.unsupported(a) is None]


def variants(a: Adapter) -> str:
    """Each configuration variant: its attribute, its layout, and the groups it changes."""
    out = []
    base = groups(a)
    for attr, value, _ in a.variants:
        v = a.for_config(SimpleNamespace(**{attr: value}))
        gained = [g for g in groups(v) if g not in base]
        lost = [g for g in base if g not in groups(v)]
        change = "".join([f", + `{g}`" for g in gained] + [f", − `{g}`" for g in lost])
        out.append(f"`{attr}={value}`: {block_layout(v)}{change}")
    return "; ".join(out)


def scope_norms(a: Adapter) -> dict[str, str | None]:
    """Which norm each scope's step used (None: none stands there, the identity): what a
    run records (run.json ``model.scopes``), so a reader of a measure taken after a norm
    knows what it compares across families (docs/method.md §5c)."""
    after_last = f"{a.final_norm} after the last block"
    if a.parallel_residual:
        attnresln: str | None = f"{a.next_norm} of the next block, {after_last}"
    else:
        attnresln = a.norm_after
    if a.ff_norm is not None:
        ffresln: str | None = a.ff_norm
    elif a.next_norm:
        ffresln = f"{a.next_norm} of the next block, {after_last}"
    elif a.final_norm:
        ffresln = f"none between blocks, {after_last}"
    else:
        ffresln = None
    return {
        "attn_branch": a.attn_branch_norm,
        "attnresln": attnresln,
        "ff_branch": a.ff_branch_norm,
        "ffresln": ffresln,
    }


def transformers_versions(a: Adapter) -> str:
    """The transformers release the family's model types need (models/transformers_needed.py)."""
    floor = f"≥ {FLOOR}"
    newer = [f"`{t}` ≥ {needed(t)}" for t in a.model_types if needed(t) != FLOOR]
    return floor + (f" ({', '.join(newer)})" if newer else "")


def architecture_table() -> str:
    """The README's table of supported architectures (markdown, ends with a newline)."""
    rows = [
        "| family | `model_type` | block | norms | groups | variants | transformers | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in ADAPTERS:
        types = ", ".join(f"`{t}`" for t in a.model_types)
        applied = ", ".join(f"`{g}`" for g in groups(a))
        rows.append(
            f"| {a.names} | {types} | {block_layout(a)} | {norms(a)} | {applied} "
            f"| {variants(a)} | {transformers_versions(a)} | {a.notes} |"
        )
    return "\n".join(rows) + "\n"


def spliced(readme: str) -> str:
    """``readme`` with its table section replaced by :func:`architecture_table`."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise SystemExit(f"the README has no {BEGIN} … {END} section")
    return pattern.sub(lambda _m: f"{BEGIN}\n{architecture_table()}{END}", readme)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", type=Path, nargs="?", const=Path("README.md"), default=None,
                   help="rewrite this README's section (default README.md)")  # fmt: skip
    args = p.parse_args(argv)
    if args.write is None:
        sys.stdout.write(architecture_table())
        return 0
    args.write.write_text(spliced(args.write.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``mixscope analyze``: a quick look at a few texts, no job spec, no output root.

Its options that mean a spec field (model, max length, batch size, device, dtype, masking,
attention) are the spec's own (cli/options.py), defaults included, so a quick look and a
job run the same analysis unless told otherwise.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import click

from mixscope.cli.options import output_option, quiet_transformers, spec_option, spec_values
from mixscope.errors import MixscopeError


def measures_of(table: Any) -> list[str]:
    """The measure columns of an ``analyze()`` table (its selected groups'), in order, less
    the distance buckets past the farthest any token reaches (:func:`unreached_buckets`)."""
    from mixscope.registry import all_columns

    known = {c.name for c in all_columns()}
    unreached = set(unreached_buckets(table))
    return [c for c in table.column_names if c in known and c not in unreached]


def unreached_buckets(table: Any) -> list[str]:
    """The distance group's bucket columns (``dist_n_<b>``, ``dist_w_<b>``) from the first
    bucket on whose every value, by norm and by weight, is 0: a few short texts reach 4–5 of
    the 12 buckets, and 14 columns of zeros would push the rest off a terminal."""
    import numpy as np

    from mixscope.sql.summary import profile_buckets

    of = profile_buckets()
    buckets: dict[int, list[str]] = {}
    for name in table.column_names:
        if name in of:
            buckets.setdefault(of[name], []).append(name)
    last = -1  # the farthest bucket with a share
    for b, names in buckets.items():
        if any(np.any(table[n].to_numpy() != 0) for n in names):
            last = max(last, b)
    return [n for b, names in sorted(buckets.items()) if b > last for n in names]


def layer_summary(table: Any) -> tuple[list[str], list[list[Any]]]:
    """Per layer (then over all): token count and the mean of each measure."""
    import numpy as np

    MEASURES = measures_of(table)
    layers = table["layer"].to_numpy()
    rows = []
    for layer in np.unique(layers):
        sel = layers == layer
        rows.append(
            [int(layer), int(sel.sum())]
            + [float(table[m].to_numpy()[sel].mean()) for m in MEASURES]
        )
    allrow = ["all", table.num_rows] + [float(table[m].to_numpy().mean()) for m in MEASURES]
    return ["layer", "tokens", *MEASURES], [*rows, allrow]


def token_summary(table: Any, layer: int | None) -> tuple[list[str], list[list[Any]]]:
    """Per token: its flags and the mean of each measure over layers (or one ``layer``)."""
    import numpy as np

    MEASURES = measures_of(table)
    cols = {
        c: table[c].to_numpy(zero_copy_only=False)
        for c in ("doc_id", "segment", "position", "layer")
    }
    if layer is not None:
        sel = cols["layer"] == layer
        if not sel.any():
            raise MixscopeError(f"--layer {layer} is out of range (1..{int(cols['layer'].max())})")
    else:
        sel = np.ones(table.num_rows, dtype=bool)
    tokens = table["token"].to_pylist()
    special = table["is_special"].to_numpy(zero_copy_only=False)
    masked = table["is_masked"].to_numpy(zero_copy_only=False)
    values = {m: table[m].to_numpy() for m in MEASURES}
    groups: dict[tuple[int, int, int], list[int]] = {}
    for k in np.flatnonzero(sel):
        key = (int(cols["doc_id"][k]), int(cols["segment"][k]), int(cols["position"][k]))
        groups.setdefault(key, []).append(int(k))
    rows = []
    for (doc, seg, pos), idx in groups.items():
        first = idx[0]
        flags = ("special " if special[first] else "") + ("masked" if masked[first] else "")
        rows.append(
            [doc, seg, pos, tokens[first], flags.strip()]
            + [float(values[m][idx].mean()) for m in MEASURES]
        )
    return ["doc", "seg", "pos", "token", "flags", *MEASURES], rows


def _documents(texts: tuple[str, ...], pair: Any, files: tuple[str, ...]) -> list[Any]:
    docs: list[Any] = list(texts) + [tuple(p) for p in pair]
    for name in files:
        try:
            lines = Path(name).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise MixscopeError(f"cannot read {name}: {exc}") from None
        docs += [ln for ln in lines if ln.strip()]
    if not docs:
        raise MixscopeError("no texts given: pass TEXTS, --pair or --file")
    return docs


@click.command()
@click.argument("texts", nargs=-1)
@spec_option(
    "model",
    "--model",
    "-m",
    override=False,
    help="Model directory or hub id (the packaged MiniLM works offline).",
)
@click.option(
    "--pair",
    nargs=2,
    multiple=True,
    metavar="TEXT TEXT_PAIR",
    help="A (text, text_pair) document; repeatable.",
)
@click.option(
    "--file",
    "-f",
    "files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Read one document per non-empty line.",
)
@click.option(
    "--tokens",
    is_flag=True,
    help="Print a per-token table (mean over layers) instead of per layer.",
)
@click.option(
    "--layer",
    type=int,
    default=None,
    help="With --tokens: one layer (1-based) instead of the mean.",
)
@output_option("Write the full table to FILE.parquet or FILE.csv.")
@spec_option("analysis.max_length", override=False)
@spec_option("runtime.batch_size", override=False)
@spec_option("runtime.device", override=False)
@spec_option("analysis.dtype", override=False)
@spec_option("analysis.revision", override=False)
@spec_option("analysis.mask_rate", override=False)
@spec_option("analysis.seed", override=False)
@spec_option("runtime.verify", override=False)
@spec_option("analysis.attention", override=False)
@spec_option("analysis.measures", override=False, metavar="GROUPS")
@click.option(
    "--padding-side",
    type=click.Choice(["left", "right"]),
    default=None,
    help="Pad batches on this side (default: the tokenizer's; the numbers do not change).",
)
def analyze(
    texts: tuple[str, ...],
    model: str,
    pair: tuple[tuple[str, str], ...],
    files: tuple[str, ...],
    tokens: bool,
    layer: int | None,
    output: str | None,
    padding_side: str | None,
    **spec: Any,
) -> None:
    """Quick look at a few TEXTS: mean of each measure per layer (``--measures``: groups).

    \b
    Examples:
      mixscope analyze "The cat sat on the mat." "A second sentence."
      mixscope analyze --pair "First paragraph." "Second paragraph." --tokens
      mixscope analyze -m minilm -f sentences.txt -o out.parquet
      mixscope analyze --measures paper,sink "The cat sat on the mat."
    """
    from mixscope.format import aligned_table
    from mixscope.store.export import table_suffix, write_table

    docs = _documents(texts, pair, files)
    if output:
        table_suffix(output)  # a bad name fails before the model loads
    quiet_transformers()
    from mixscope.api import analyze as run_analyze

    given = spec_values(spec)
    verify = given["runtime.verify"]
    with warnings.catch_warnings(record=True) as caught:  # the API's warnings: one line each
        warnings.simplefilter("always", UserWarning)
        table = run_analyze(
            model,
            docs,
            max_length=given["analysis.max_length"],
            batch_size=given["runtime.batch_size"],
            device=given["runtime.device"],
            dtype=given["analysis.dtype"],
            revision=given["analysis.revision"],
            mask_rate=given["analysis.mask_rate"],
            seed=given["analysis.seed"],
            verify=verify,
            padding_side=padding_side,
            attention=given["analysis.attention"],
            measures=given["analysis.measures"],
        )
    for w in caught:
        click.echo(f"note: {w.message}", err=True)
    if output:
        write_table(table, output)
    headers, rows = token_summary(table, layer) if tokens else layer_summary(table)
    click.echo(aligned_table(headers, rows))
    if unreached := unreached_buckets(table):
        from mixscope.sql.summary import profile_buckets

        left = sorted({profile_buckets()[n] for n in unreached})
        click.echo(
            f"note: distance buckets {left[0]}–{left[-1]} left out ({unreached[0]}…): 0 for "
            f"every token, no context {2 ** left[0]} tokens away or more; -o FILE keeps every "
            "column",
            err=True,
        )
    if verify:
        click.echo("exactness identity: holds on every block", err=True)
    if output:
        click.echo(f"wrote {table.num_rows} rows to {output}", err=True)

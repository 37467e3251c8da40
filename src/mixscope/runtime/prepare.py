"""The one owner of a run's identity and plan: ``prepare(spec) -> PreparedRun``.

A run is identified by (model fingerprint, corpus fingerprint, identity options), and the
options hold the *resolved* sequence length and measure groups. ``mixscope run``,
``mixscope validate`` and ``checkpoints sync`` (which must know a checkpoint's run id to
tell whether it is done) all need the same answer; computing it in one place is what keeps
their run ids equal. Sync hands the ``PreparedRun`` it made to the driver
(``driver.run_prepared``), and the driver hands the resolved ``max_length`` to its workers,
so nothing downstream re-derives any of it.

Everything here can fail on bad input (an empty corpus, an unsupported model, a measure
group that does not apply) and does, before any work is scheduled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mixscope.choices import DISTANCE_BUCKETS
from mixscope.config import JobSpec
from mixscope.corpus.plan import CorpusPlan, plan_corpus
from mixscope.errors import MixscopeError, SpecError
from mixscope.models.fingerprint import model_identity
from mixscope.store.layout import Layout
from mixscope.store.run_record import RunRecord
from mixscope.store.runs import library_versions, load_run, now, run_id_for
from mixscope.store.schema import SCHEMA_VERSION


@dataclass(frozen=True)
class PreparedRun:
    """A job's run, identified and planned; nothing of it is executed yet."""

    spec: JobSpec
    layout: Layout
    plan: CorpusPlan  # the stored plan when the run exists (a resume runs on it)
    run_id: str
    model: Mapping[str, Any]  # models.fingerprint.model_identity
    max_length: int  # the resolved sequence length (part of the identity)
    selection: Any  # registry.Selection: the resolved groups, their columns
    options: Mapping[str, Any]  # identity_options

    @property
    def plan_path(self) -> str:
        return self.layout.plan_path(self.run_id)

    def save_plan(self) -> None:
        """Store the plan the run starts with, unless the run has one already."""
        if self.layout.read_json(self.plan_path) is None:
            self.layout.write_json(self.plan_path, self.plan.to_dict())

    @property
    def record(self) -> RunRecord:
        """The run record as it is stored now (a new one if none), with what this
        preparation knows of the run; read afresh on each access."""
        spec, plan = self.spec, self.plan
        return replace(
            load_run(self.layout, self.run_id) or RunRecord(run_id=self.run_id, created_at=now()),
            name=spec.name,
            model=dict(self.model),
            step=spec.step if spec.step is not None else self.model.get("step"),
            corpus={
                "paths": list(spec.corpus.paths),
                "files": plan.files,
                "fingerprint": plan.fingerprint,
                "n_docs": plan.n_docs,
                "bad": plan.bad,
                "bad_examples": plan.bad_examples,
                "pairs": plan.pairs,  # kept / split / skipped (corpus/plan.py), or None
            },
            options=dict(self.options),
            spec=spec.to_dict(),  # the spec, once: its runtime and output sections included
            libraries=library_versions(),
            shards_total=len(plan.shards),
            measures={
                "groups": list(self.selection.groups),
                "columns": list(self.selection.measures.columns),
                "skipped": dict(self.selection.skipped),
            },
        )


def prepare(spec: JobSpec, *, write: bool = True, plan: CorpusPlan | None = None) -> PreparedRun:
    """Plan ``spec``'s corpus and identify its run.

    With ``write=False`` (``mixscope validate``, ``checkpoints sync``) nothing is written
    under the output root. ``plan``: the corpus already planned for this spec's corpus
    and shard size (``checkpoints sync`` plans once for every checkpoint); it is used
    unless documents are pairs, which are selected with the model's own tokenizer.
    """
    from mixscope.mixing.measures import resolved_measures
    from mixscope.models.resolve import resolved_max_length

    a = spec.analysis
    if spec.corpus.pairs:  # pairs are selected (and counted) with the model's tokenizer
        max_length = resolved_max_length(spec.model, a.max_length, revision=a.revision)
        plan = plan_corpus(spec.corpus, spec.runtime.docs_per_shard, _pair_fits(spec, max_length))
    elif plan is None:
        plan = plan_corpus(spec.corpus, spec.runtime.docs_per_shard)
    if plan.n_docs == 0:
        bad = ", ".join(f"{k}: {v}" for k, v in plan.bad.items()) or "no records at all"
        raise MixscopeError(f"the corpus has no documents to analyse ({bad})")
    if not spec.corpus.pairs:
        # config + tokenizer only: fails on an unsupported family before anything is
        # fingerprinted
        max_length = resolved_max_length(spec.model, a.max_length, revision=a.revision)
    try:  # names were checked with the spec; whether each applies needs the model's config
        selection = resolved_measures(spec.model, a.measures, revision=a.revision)
    except SpecError as exc:  # a group that does not apply: a bad flag, exit 2
        raise SpecError(f"invalid job spec: analysis.{exc}") from None
    model = {**model_identity(spec.model, a.revision), "scopes": _scopes(spec)}
    options = identity_options(spec, max_length, selection.groups)
    run_id = run_id_for(model["fingerprint"], plan.fingerprint, options)
    layout = Layout.open(spec.out)
    stored = layout.read_json(layout.plan_path(run_id))
    if stored is not None:
        plan = CorpusPlan.from_dict(stored)  # resume on the plan the run started with
    prep = PreparedRun(spec, layout, plan, run_id, model, max_length, selection, options)
    if write and stored is None:
        prep.save_plan()
    return prep


def _scopes(spec: JobSpec) -> dict[str, str | None]:
    """Which norm each scope of the model's blocks used (mixing/architectures.py), from
    its config facts (no weights, no torch for a local model)."""
    from mixscope.mixing.architectures import scope_norms
    from mixscope.models.adapters import adapter_for_config
    from mixscope.models.resolve import config_facts

    facts = config_facts(spec.model, revision=spec.analysis.revision)
    return scope_norms(adapter_for_config(facts))


def identity_options(
    spec: JobSpec, max_length: int, groups: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The options that change the numbers or the documents. ``max_length`` is the resolved
    sequence length (``models.loading.resolved_max_length``), not the requested one, so a
    spec that leaves it to the model and one that names the model's limit are one run;
    ``groups`` the resolved measure groups (``all`` expanded for the model), likewise.
    Execution settings (workers, batch size, device) are not here: they do not change
    the numbers."""
    c, a, o = spec.corpus, spec.analysis, spec.output
    options: dict[str, Any] = {
        "corpus": {
            "format": c.format,
            "split": c.split,
            "pairs": c.pairs,
            "text_field": c.text_field,
            "skip_regex": c.skip_regex,
            "max_doc_bytes": c.max_doc_bytes,
            "limit": c.limit,
        },
        "analysis": {
            "max_length": max_length,
            "mask_rate": a.mask_rate,
            "seed": a.seed,
            "dtype": a.dtype,
        },
        "output": {
            "detail": o.detail,
            "sample_rate": o.sample_rate if o.detail == "sample" else None,
            "precision": o.precision,
        },
        "schema_version": SCHEMA_VERSION,
    }
    # options added later enter the identity only when not their default, so the runs
    # written before they existed keep their ids
    if c.pair_selection != "split":
        options["corpus"]["pair_selection"] = c.pair_selection
    if a.mask_count != "round":
        options["analysis"]["mask_count"] = a.mask_count
    # the bucket count changes the numbers of the distance group only
    if a.distance_buckets != DISTANCE_BUCKETS and (groups is None or "distance" in groups):
        options["analysis"]["distance_buckets"] = a.distance_buckets
    from mixscope.registry import DEFAULT_GROUPS

    if groups is not None and tuple(groups) != DEFAULT_GROUPS:
        options["analysis"]["measures"] = list(groups)
    return options


def _pair_fits(spec: JobSpec, max_length: int) -> Any:
    """The pair test of ``corpus/plan.py`` with the job's tokenizer and sequence length."""
    from mixscope.corpus.encode import pair_fit_check
    from mixscope.models.resolve import load_tokenizer

    return pair_fit_check(load_tokenizer(spec.model, revision=spec.analysis.revision), max_length)

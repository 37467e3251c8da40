"""Job specs: YAML → frozen dataclasses, CLI overrides, validated in one place.

A job spec names a model, a corpus, the analysis options, the runtime and an output root.
Every field can be set from YAML or overridden with ``--set section.field=value`` (or the
short flags of ``mixscope run``). The package is split by concept:

- ``spec.py``: the dataclasses; each field carries its default, help text and choices
  (``fields.setting``), the one source the CLI flags are made from (cli/options.py);
- ``load.py``: YAML and overrides → a spec (types coerced, unknown keys refused);
- ``validate.py``: the only place that judges values.
"""

from mixscope.config.fields import FieldInfo, setting
from mixscope.config.load import (
    apply_overrides,
    build_spec,
    load_spec,
    load_yaml,
    parse_set,
    spec_from_flags,
)
from mixscope.config.spec import (
    ALIASES,
    CORPUS_FORMATS,
    DTYPES,
    PAIR_SELECTIONS,
    SECTIONS,
    AnalysisSpec,
    CheckpointSpec,
    CorpusSpec,
    JobSpec,
    OutputSpec,
    RuntimeSpec,
    field_info,
    spec_fields,
)
from mixscope.config.validate import validate

__all__ = [
    "ALIASES",
    "CORPUS_FORMATS",
    "DTYPES",
    "PAIR_SELECTIONS",
    "SECTIONS",
    "AnalysisSpec",
    "CheckpointSpec",
    "CorpusSpec",
    "FieldInfo",
    "JobSpec",
    "OutputSpec",
    "RuntimeSpec",
    "apply_overrides",
    "build_spec",
    "field_info",
    "load_spec",
    "load_yaml",
    "parse_set",
    "setting",
    "spec_fields",
    "spec_from_flags",
    "validate",
]

"""A job spec from YAML and overrides: read, coerce to the fields' types, build.

The order is fixed: YAML (optional), then ``--set key=value`` pairs, then the command's
own flags; the result is built into a :class:`JobSpec` and validated (config/validate.py)
in :func:`build_spec`, the one place a mapping becomes a spec.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from mixscope.config.spec import ALIASES, SECTIONS, JobSpec
from mixscope.config.validate import validate
from mixscope.errors import SpecError


def _field_types(cls: type) -> dict[str, Any]:
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


#: list fields whose items may also be given comma-separated (names never hold commas)
COMMA_LISTS = frozenset({"analysis.measures"})


def _coerce(  # noqa: C901 - one branch per field type, flat
    value: Any, typ: Any, key: str
) -> Any:
    """Turn YAML / command-line values into the field's type, or say what is wrong."""
    import types
    import typing

    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        is_null = value is None or (
            isinstance(value, str) and value.lower() in ("null", "none", "")
        )
        if is_null and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], key)
    if origin is tuple:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list | tuple):
            raise SpecError(f"{key}: expected a list, got {value!r}")
        if key in COMMA_LISTS:  # --measures paper,sink given once or repeated
            return tuple(p.strip() for v in value for p in str(v).split(",") if p.strip())
        return tuple(str(v) for v in value)
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("false", "no", "0", "off"):
                return False
            raise ValueError
        if typ is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if typ is str:
            if isinstance(value, dict | list):
                raise ValueError
            return str(value)
    except (TypeError, ValueError):
        raise SpecError(f"{key}: expected {typ.__name__}, got {value!r}") from None
    return value


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    types_ = _field_types(cls)
    unknown = sorted(set(data) - set(types_))
    if unknown:
        raise SpecError(
            f"unknown field {prefix}{unknown[0]}; valid: {', '.join(prefix + k for k in types_)}"
        )
    kwargs = {}
    for name, value in data.items():
        if name in SECTIONS and cls is JobSpec:
            if not isinstance(value, dict):
                raise SpecError(f"{name}: expected a mapping of fields")
            kwargs[name] = _build(SECTIONS[name], value, f"{name}.")
        else:
            kwargs[name] = _coerce(value, types_[name], prefix + name)
    return cls(**kwargs)


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise SpecError(f"job spec {path} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise SpecError(f"job spec {path} is not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise SpecError(f"job spec {path} must be a mapping of fields")
    # corpus paths are relative to the spec file, so a spec runs from any directory
    corpus = data.get("corpus")
    if isinstance(corpus, dict) and "paths" in corpus:
        raw = corpus["paths"]
        raw = [raw] if isinstance(raw, str) else raw
        if isinstance(raw, list):
            corpus["paths"] = [_relative_to(p.parent, str(x)) for x in raw]
    return data


def _relative_to(base: Path, value: str) -> str:
    """Corpus paths in a spec are relative to the spec's folder (``out`` to the caller's)."""
    if "://" in value or os.path.isabs(value) or value.startswith("~"):
        return value
    return os.path.abspath(base / value)  # not resolve(): keep symlinked mounts as mounted


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``{"runtime.workers": 2, "model": "x"}`` on top of the YAML mapping."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for key, value in overrides.items():
        key = ALIASES.get(key, key)
        if "." in key:
            section, name = key.split(".", 1)
            if section not in SECTIONS:
                raise SpecError(f"unknown section in {key!r}; valid: {', '.join(SECTIONS)}")
            out.setdefault(section, {})
            if not isinstance(out[section], dict):
                raise SpecError(f"{section}: expected a mapping of fields")
            out[section][name] = value
        else:
            out[key] = value
    return out


def parse_set(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``key=value`` strings (values parsed as YAML scalars/lists) → a mapping."""
    import yaml

    out: dict[str, Any] = {}
    for item in pairs:
        if "=" not in item:
            raise SpecError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


def build_spec(data: dict[str, Any]) -> JobSpec:
    """The one place that turns a mapping into a validated :class:`JobSpec`."""
    spec = _build(JobSpec, data, "")
    if not spec.name:
        spec = dataclasses.replace(spec, name=spec.default_name())
    validate(spec)
    return spec


def load_spec(path: str | None, overrides: dict[str, Any] | None = None) -> JobSpec:
    """YAML (optional) + overrides → a validated spec."""
    data = load_yaml(path) if path else {}
    return build_spec(apply_overrides(data, overrides or {}))


def spec_from_flags(
    path: str | None, sets: tuple[str, ...] | list[str], flags: dict[str, Any]
) -> JobSpec:
    """YAML (optional), then ``--set key=value`` pairs, then the command's own flags
    (``{"runtime.workers": 2, …}``; None means the flag was not given)."""
    overrides = parse_set(sets)
    overrides.update({k: v for k, v in flags.items() if v is not None})
    return load_spec(path, overrides)

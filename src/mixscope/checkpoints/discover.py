"""Candidate checkpoints from a source, each with its training step when known.

Sources:
- a training output directory with Hugging Face Trainer ``checkpoint-<step>`` folders,
- any folder of model folders (step from the folder name, ``trainer_state.json`` or config),
- a model directory itself (one checkpoint),
- a hub model's revisions (``step1000``-style branches), given as ``hub:ORG/NAME`` plus a list.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from mixscope.errors import MixscopeError
from mixscope.models.fingerprint import training_step

# folders that are checkpoints being written (Trainer saves into tmp-checkpoint-N, then renames)
IN_PROGRESS_NAME = re.compile(r"^(tmp|\.|_tmp|partial|incomplete)", re.IGNORECASE)
STEP_IN_NAME = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class Candidate:
    key: str  # what identifies it in the source: a path, or hub:ID@REVISION
    model: str  # what `model:` of the job becomes (a directory or a hub id)
    revision: str | None
    step: int | None
    local: bool


def _step_of(folder: Path) -> int | None:
    step = training_step(folder)
    if step is not None:
        return step
    config = folder / "config.json"
    if config.is_file():
        try:
            data = json.loads(config.read_text())
        except (OSError, ValueError):
            data = {}
        for key in ("step", "global_step", "training_step"):
            if isinstance(data.get(key), int):
                return data[key]
    m = STEP_IN_NAME.search(folder.name)
    return int(m.group(1)) if m else None


def discover(source: str, revisions: tuple[str, ...] = ()) -> list[Candidate]:
    """Candidates, oldest step first (unknown steps last, by name)."""
    if source.startswith("hub:"):
        model = source[4:]
        if not revisions:
            raise MixscopeError("a hub source needs revisions (--revision stepN, repeatable)")
        out = []
        for rev in revisions:
            m = re.fullmatch(r"(?:step|global_step|checkpoint-?)(\d+)", rev)
            out.append(
                Candidate(f"hub:{model}@{rev}", model, rev, int(m.group(1)) if m else None, False)
            )
        return _ordered(out)
    root = Path(source).expanduser()
    if not root.is_dir():
        raise MixscopeError(f"checkpoint source {source} is not a directory")
    if (root / "config.json").is_file():
        return [Candidate(str(root.resolve()), str(root.resolve()), None, _step_of(root), True)]
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if IN_PROGRESS_NAME.match(folder.name):
            continue  # a checkpoint still being written under a temporary name
        out.append(
            Candidate(str(folder.resolve()), str(folder.resolve()), None, _step_of(folder), True)
        )
    return _ordered(out)


def _ordered(cands: list[Candidate]) -> list[Candidate]:
    return sorted(cands, key=lambda c: (c.step is None, c.step if c.step is not None else 0, c.key))

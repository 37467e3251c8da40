"""Model fingerprints: what makes two analyses of "the same model" the same.

A local directory is fingerprinted by content: config and tokenizer files in full, each
weight file by its size and three 1 MiB samples (start, middle, end), which separates
checkpoints of one training run at a small, constant cost per file. A hub id is its id and
revision (and the resolved commit when the local cache knows it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from mixscope.models.packaged import packaged_path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")
SAMPLE = 1 << 20


def _sampled_digest(path: Path) -> str:
    size = path.stat().st_size
    h = hashlib.blake2b(digest_size=16)
    h.update(str(size).encode())
    with path.open("rb") as f:
        for pos in sorted({0, max(0, size // 2 - SAMPLE // 2), max(0, size - SAMPLE)}):
            f.seek(pos)
            h.update(f.read(SAMPLE))
    return h.hexdigest()


def _full_digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def directory_fingerprint(path: str | os.PathLike) -> str:
    """Content fingerprint of a model directory (top level only)."""
    root = Path(path)
    h = hashlib.blake2b(digest_size=16)
    for f in sorted(p for p in root.iterdir() if p.is_file()):
        if f.name.startswith("."):
            continue
        digest = _sampled_digest(f) if f.suffix in WEIGHT_SUFFIXES else _full_digest(f)
        h.update(f"{f.name}\0{digest}\0".encode())
    return h.hexdigest()


def training_step(path: str | os.PathLike) -> int | None:
    """The training step of a checkpoint folder, when it says: trainer_state.json or its name."""
    root = Path(path)
    state = root / "trainer_state.json"
    if state.is_file():
        try:
            step = json.loads(state.read_text()).get("global_step")
            if isinstance(step, int):
                return step
        except (OSError, ValueError):
            pass
    m = re.search(r"(?:checkpoint|step|global_step)[-_]?(\d+)$", root.name)
    return int(m.group(1)) if m else None


def model_identity(model: str, revision: str | None = None) -> dict:
    """{kind, source, revision, fingerprint, step} for the run record and the run id."""
    local = packaged_path(model) or model
    p = Path(local).expanduser()
    if p.is_dir():
        return {
            "kind": "local",
            "source": str(p.resolve()),
            "revision": revision,
            "fingerprint": directory_fingerprint(p),
            "step": training_step(p),
        }
    commit = None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json", revision=revision)
        if isinstance(cached, str):
            commit = Path(cached).parent.name
    except Exception:  # the cache is a convenience, never a requirement
        commit = None
    key = f"hub:{model}@{commit or revision or 'main'}"
    step = None
    if revision:
        m = re.fullmatch(r"step(\d+)", revision)
        step = int(m.group(1)) if m else None
    return {
        "kind": "hub",
        "source": model,
        "revision": revision,
        "commit": commit,
        "fingerprint": hashlib.blake2b(key.encode(), digest_size=16).hexdigest(),
        "step": step,
    }

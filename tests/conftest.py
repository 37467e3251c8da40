"""Shared fixtures: the real MiniLM model path and tiny random models of every family."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from tiny_models import MINILM, build


@pytest.fixture(scope="session")
def minilm_path() -> str:
    return str(MINILM)


@pytest.fixture(scope="session")
def tiny():
    """``tiny(family, dtype)`` → cached (model, tokenizer)."""
    cache: dict = {}

    def get(family: str, dtype=None):
        import torch

        dtype = dtype or torch.float64
        key = (family, dtype)
        if key not in cache:
            cache[key] = build(family, dtype)
        return cache[key]

    return get

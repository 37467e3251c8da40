"""Sufficient statistics: computed per shard by the worker, consolidated per run."""

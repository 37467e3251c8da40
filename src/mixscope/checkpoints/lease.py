"""Moved to :mod:`mixscope.store.lease` (a lease is a stored record); kept for
checkpoints/sync.py until it imports from there."""

from mixscope.store.lease import GUARD_SECONDS, Lease, LeaseRecord

__all__ = ["GUARD_SECONDS", "Lease", "LeaseRecord"]

"""Scheduled re-analysis of new checkpoints: discovery, completeness, leases, sync."""

"""Executing a job: the shard worker (plain class), local and Ray executors, the driver."""

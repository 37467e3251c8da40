"""The tests' Ray clusters leave no machine-wide Ray state behind them.

``ray start`` records its cluster in ``/tmp/ray/ray_current_cluster`` and nothing removes
it when the cluster stops; a plain ``ray.init(num_cpus=…)`` anywhere on the machine then
fails ("When connecting to an existing cluster, num_cpus and num_gpus must not be
provided"). Each helper that starts Ray puts that file back as it found it.
"""

from __future__ import annotations

import socket

from ray_cluster import AddressFile, LocalCluster, default_head


def _up(address: str) -> bool:
    """Whether something listens at ``host:port`` (a live cluster's GCS)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def test_a_default_head_puts_ray_current_cluster_back(tmp_path):
    before = AddressFile().read()
    args = ["--num-cpus", "1", "--include-dashboard", "false"]
    with default_head(tmp_path / "head.log", args) as address:
        port = int(address.rsplit(":", 1)[1])
        # the head did write it (else this test would prove nothing)
        assert AddressFile().names(port), AddressFile().read()
    after = AddressFile().read()
    assert not AddressFile().names(port)
    # as it was; or, where another session on this machine started a cluster meanwhile,
    # naming that one, which is up (theirs to clean)
    assert after == before or (after is not None and _up(after)), (before, after)


def test_a_local_cluster_never_touches_ray_current_cluster():
    """``LocalCluster`` nodes have their own ``--temp-dir``: Ray's record there goes with it."""
    cluster = LocalCluster()
    try:
        cluster.start_head()
        assert not AddressFile().names(cluster.port)
        own = cluster.root / "head" / "ray_current_cluster"
        assert own.read_text().endswith(f":{cluster.port}")  # it went here instead
    finally:
        cluster.shutdown()
    assert not AddressFile().names(cluster.port) and not cluster.root.exists()


def test_the_session_ray_is_not_recorded_for_other_drivers(ray_local):
    """The session's embedded Ray (``ray_local``) is not what a new driver on this machine
    would join: Ray's record does not name it while it runs (and ``ray_local`` restores the
    record should a later Ray write it)."""
    port = int(ray_local.get_runtime_context().gcs_address.rsplit(":", 1)[1])
    assert not AddressFile().names(port)

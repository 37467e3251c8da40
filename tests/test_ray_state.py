"""The tests' Ray clusters leave no machine-wide Ray state behind them.

``ray start`` records its cluster in ``/tmp/ray/ray_current_cluster`` and nothing removes
it when the cluster stops; a plain ``ray.init(num_cpus=…)`` anywhere on the machine then
fails ("When connecting to an existing cluster, num_cpus and num_gpus must not be
provided"). Each helper that starts Ray puts that file back as it found it.
"""

from __future__ import annotations

from ray_cluster import AddressFile, LocalCluster, default_head


def test_a_default_head_puts_ray_current_cluster_back(tmp_path):
    before = AddressFile().read()
    with default_head(tmp_path / "head.log", ["--num-cpus", "1"]) as address:
        port = int(address.rsplit(":", 1)[1])
        # the head did write it (else this test would prove nothing)
        assert AddressFile().names(port), AddressFile().read()
    assert AddressFile().read() == before


def test_a_local_cluster_never_touches_ray_current_cluster():
    """``LocalCluster`` nodes have their own ``--temp-dir``: Ray's record there goes with it."""
    before = AddressFile().read()
    cluster = LocalCluster()
    try:
        cluster.start_head()
        assert AddressFile().read() == before
        assert (
            (cluster.root / "head" / "ray_current_cluster").read_text().endswith(f":{cluster.port}")
        )
    finally:
        cluster.shutdown()
    assert AddressFile().read() == before and not cluster.root.exists()


def test_the_session_ray_is_not_recorded_for_other_drivers(ray_local):
    """The session's embedded Ray (``ray_local``) is not what a new driver on this machine
    would join: Ray's record does not name it while it runs (and ``ray_local`` restores the
    record should a later Ray write it)."""
    port = int(ray_local.get_runtime_context().gcs_address.rsplit(":", 1)[1])
    assert not AddressFile().names(port)

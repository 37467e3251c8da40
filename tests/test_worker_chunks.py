"""A shard runs in chunks of text, each sorted by length and batched in one piece.

The chunk size is a matter of padding and memory only: a shard cut into many chunks must
write exactly the rows of the same shard run in one chunk (the engine's results go back to
document order before the host path sees them), up to float rounding: a sequence's
batch-mates and the order sums are merged in change the last bits. And the default chunk
holds a whole default shard of the demo corpus, so its batches pad as little as a
whole-shard sort.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mixscope.runtime.driver import prepare
from mixscope.runtime.worker import ShardWorker
from run_helpers import job_spec


def _tables(worker: ShardWorker, shard, root: Path) -> dict[str, object]:
    result = worker.process(shard)
    return {kind: pq.read_table(root / e.path) for kind, e in result.files.items()}


def test_many_chunks_write_the_rows_of_one(tiny_bert_dir, tmp_path):
    spec = job_spec(  # the demo corpus's first 24 documents in one shard, full detail
        tiny_bert_dir,
        tmp_path / "out",
        **{"corpus.limit": 24, "runtime.docs_per_shard": 24, "runtime.executor": "local"},
    )
    prep = prepare(spec)
    (shard,) = prep.plan.shards
    worker = ShardWorker(prep.spec, prep.run_id, prep.max_length)
    try:
        from mixscope.corpus.plan import read_shard

        docs = read_shard(shard, spec.corpus)
        assert len(worker._chunks(docs)) == 1  # the default: the whole shard in one piece
        whole = _tables(worker, shard, tmp_path / "out")
        worker.chunk_chars = 250  # a chunk every few documents
        chunks = worker._chunks(docs)
        assert 4 < len(chunks) < len(docs) and sum(map(len, chunks)) == len(docs)
        assert [d for c in chunks for d in c] == docs  # consecutive, in order, none lost
        cut = _tables(worker, shard, tmp_path / "out")
    finally:
        worker.close()
    assert set(whole) == set(cut) and "tokens" in whole  # the detail rows
    for kind, table in whole.items():
        assert table.num_rows > 0
        assert cut[kind].schema == table.schema and cut[kind].num_rows == table.num_rows, kind
        for name in table.column_names:  # the same rows, in the same order
            got, want = cut[kind][name], table[name]
            if pa.types.is_list(want.type) or pa.types.is_fixed_size_list(want.type):
                assert pc.list_value_length(got).equals(pc.list_value_length(want)), name
                got, want = pc.list_flatten(got), pc.list_flatten(want)
            if pa.types.is_floating(want.type):
                a, b = (np.asarray(c.to_numpy(zero_copy_only=False), float) for c in (got, want))
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{kind}.{name}")
            else:  # dictionaries are built chunk by chunk: compare the values
                assert got.to_pylist() == want.to_pylist(), (kind, name)

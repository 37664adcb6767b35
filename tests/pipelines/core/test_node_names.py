"""NodeNames: repeated name lookups over one node_ids.parquet equal the one-off lookup, whatever the cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.core.nodeids import NODE_IDS_FILE, NodeNames, original_ids


class _Files:
    """The two things the lookups ask an artifact: its file names and a file's path."""

    def __init__(self, root: Path) -> None:
        self.root, self.files = root, {NODE_IDS_FILE: None}

    def file(self, name: str) -> Path:
        return self.root / name


@pytest.mark.parametrize("cache_bytes", [0, 200, 1 << 20])
def test_repeated_lookups_equal_the_names(tmp_path: Path, cache_bytes: int) -> None:
    names = [f"node-{i}-{'x' * (i % 7)}" for i in range(53)]
    pq.write_table(pa.table({"id": np.arange(53, dtype=np.int64), "original_id": names}),
                   tmp_path / NODE_IDS_FILE, row_group_size=5)  # 11 row groups
    artifact = _Files(tmp_path)
    reader = NodeNames(artifact, cache_bytes)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    for _ in range(6):
        ids = rng.integers(0, 53, 17)
        assert reader.take(ids).to_pylist() == [names[i] for i in ids]
    assert reader.take(np.array([], dtype=np.int64)).to_pylist() == []
    assert original_ids(artifact, np.array([52, 0, 7])).tolist() == [names[52], names[0], names[7]]  # type: ignore[arg-type]
    if cache_bytes == 0:
        assert not reader._cache
    with pytest.raises(ValueError, match=r"ids\[1\]' expected a node id in \[0, 53\) \(got 53\)"):
        reader.take(np.array([3, 53]))

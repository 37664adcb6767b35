"""``python -m pipelines.bench.link_prefetch``: alternating synchronous and prefetched runs on a generated graph
train the same table, and the prefetched ones read the same partitions, some of them ahead."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines.bench.link_prefetch import generated_graph, main


def test_generated_graph_is_a_symmetric_csr_without_self_loops() -> None:
    indptr, indices = generated_graph(500, 4, 0.8, 16, 0)
    src = np.repeat(np.arange(500), np.diff(indptr))
    pairs = set(zip(src.tolist(), indices.tolist(), strict=True))
    assert pairs and all((d, s) in pairs for s, d in pairs) and all(s != d for s, d in pairs)


def test_bench_alternates_and_trains_the_same_table(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--nodes", "3000", "--dim", "8", "--partitions", "5", "--buffer", "2", "--repeats", "2",
          "--order", "random", "--dir", str(tmp_path)])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    runs, summary = rows[:-1], rows[-1]
    assert [r["depth"] for r in runs] == [0, 1, 1, 0]  # alternating which goes first
    assert summary["same_table"] is True and summary["ratio"] is not None
    assert len({(r["loads"], r["bytes_read"], r["read_requests"]) for r in runs}) == 1
    assert all((r["prefetched"] > 0) == (r["depth"] > 0) and r["max_slots_used"] <= 2 + r["depth"] for r in runs)

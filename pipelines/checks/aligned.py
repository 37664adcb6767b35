"""The invariants of the block-aligned layout (``pack`` artifacts with ``layout: hyperbatch``).

Pure functions of (memory-mapped) arrays, streamed in chunks with vectorised NumPy, and one blocking
:class:`~pipelines.checks.StageCheck` binding (``ALIGNED_LAYOUT``) listed with the pack stage's checks; it
passes, saying so, for every other layout.
"""

from __future__ import annotations

import numpy as np

from pipelines.checks.base import CheckInputs, Finding, StageCheck
from storage_kernels import kernels
from storage_kernels.alignedstore import (
    ALIGNED_BIN,
    HB_BATCHES,
    HB_EPOCH_PTR,
    HB_PTR,
    HOTSET_NODES,
    LAYOUT_JSON,
    BlockLayout,
    check_tables,
)
from storage_kernels.halfwords import as_words

__all__ = ["ALIGNED_LAYOUT", "check_aligned_rows", "check_hyperbatch_tables"]

_CHUNK = 1 << 22  # nodes per streamed chunk
_SAMPLE_ROWS = 4096  # rows whose bytes are compared with the feature file


def check_aligned_rows(aligned: np.ndarray, layout: BlockLayout, features: np.ndarray,
                       sample_rows: int = _SAMPLE_ROWS) -> Finding:
    """``aligned`` (the file's bytes, uint8) has the layout's size; no row's bytes straddle a block boundary
    (every node, streamed: a row of at most a block lies in one block, a larger one starts a block); and a
    deterministic sample of rows, read at ``aligned_feature_offset``, equals ``features``' rows."""
    f = Finding()
    n, block = layout.num_rows, layout.block_bytes
    f.facts.update({"rows": n, "row_bytes": layout.row_bytes, "rows_per_block": layout.group_rows,
                    "blocks_per_row": layout.group_blocks, "disk_blowup": round(layout.disk_blowup, 4)})
    if features.shape != (n, layout.feature_dim):
        f.fail(f"'{LAYOUT_JSON}' expected {features.shape[0]} rows of {features.shape[1]} floats like features.npy "
               f"(got {n} rows of {layout.feature_dim})")
        return f
    if len(aligned) != layout.file_bytes:
        f.fail(f"'{ALIGNED_BIN}' expected {layout.file_bytes} bytes ({layout.num_blocks} blocks) (got {len(aligned)})")
        return f
    for start in range(0, n, _CHUNK):
        off = layout.aligned_feature_offset(np.arange(start, min(n, start + _CHUNK), dtype=np.int64))
        inside = off % block + layout.row_bytes <= block if layout.row_bytes <= block else off % block == 0
        bad = ~inside | (off + layout.row_bytes > len(aligned))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            f.fail(f"'aligned_feature_offset({start + i})' expected a row inside one block (or starting one) "
                   f"(got byte {int(off[i])} for a {layout.row_bytes}-byte row)")
            return f
    rows = np.unique(np.linspace(0, n - 1, min(n, sample_rows)).astype(np.int64)) if n else np.empty(0, np.int64)
    f.facts["rows_compared"] = len(rows)
    if len(rows):
        off = layout.aligned_feature_offset(rows)
        got = kernels.gather_rows_at(aligned, off, np.empty((len(rows), layout.feature_dim), np.float32))  # (k, F)
        want = np.asarray(features[rows])
        bad = ~np.all((got == want) | (np.isnan(got) & np.isnan(want)), axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            f.fail(f"'{ALIGNED_BIN}' row {int(rows[i])} expected features.npy's row (got different bytes at "
                   f"offset {int(off[i])})")
    return f


def check_hyperbatch_tables(batches: np.ndarray, ptr: np.ndarray, epoch_ptr: np.ndarray,
                            train_by_epoch: list[list[int]], num_batches: int) -> Finding:
    """The hyperbatch tables are consistent and list, epoch by epoch, exactly the sample set's training
    batches in training order (each once; a hyperbatch never spans two epochs)."""
    f = Finding()
    batches, ptr, epoch_ptr = (np.asarray(a, dtype=np.int64) for a in (batches, ptr, epoch_ptr))
    f.facts.update({"hyperbatches": len(ptr) - 1, "train_batches": len(batches)})
    problem = check_tables(batches, ptr, epoch_ptr, num_batches)
    if problem:
        f.fail(problem)
        return f
    if len(epoch_ptr) - 1 != len(train_by_epoch):
        f.fail(f"'{HB_EPOCH_PTR}' expected {len(train_by_epoch) + 1} entries, one per sampled epoch + 1 "
               f"(got {len(epoch_ptr)})")
        return f
    for e, want in enumerate(train_by_epoch):
        lo, hi = int(ptr[epoch_ptr[e]]), int(ptr[epoch_ptr[e + 1]])
        if not np.array_equal(batches[lo:hi], np.asarray(want, dtype=np.int64)):
            f.fail(f"'{HB_BATCHES}' expected the {len(want)} training batches of sample epoch {e} in training order "
                   f"(got {hi - lo} batches {batches[lo:hi][:8].tolist()}...)")
            return f
    return f


def _aligned_layout(c: CheckInputs) -> Finding:
    from storage_kernels.sampleset import SampleSet

    art = c.artifact
    if art.stats.get("layout") != "hyperbatch":
        f = Finding()
        f.facts["layout"] = f"{art.stats.get('layout', '?')} (no block-aligned feature file to check)"
        return f
    layout = BlockLayout.load(art.file(LAYOUT_JSON))
    aligned = (np.memmap(art.file(ALIGNED_BIN), dtype=np.uint8, mode="r") if layout.file_bytes
               else np.empty(0, np.uint8))
    f = check_aligned_rows(aligned, layout, as_words(c.upstream("reorder").array("features.npy")))
    if not f.passed:
        return f
    samples = SampleSet(c.upstream("sample").path)
    tables = check_hyperbatch_tables(art.array(HB_BATCHES), art.array(HB_PTR), art.array(HB_EPOCH_PTR),
                                     [samples.batch_ids("train", e) for e in range(samples.epochs)],
                                     samples.num_batches)
    f.problems += tables.problems
    f.facts.update(tables.facts)
    hot = np.asarray(art.array(HOTSET_NODES))
    planned = np.asarray(c.upstream("plan").array("cpu_nodes.npy"))
    if f.passed and not np.array_equal(hot, planned):
        f.fail(f"'{HOTSET_NODES}' expected the plan's {len(planned)} cpu_nodes (got {len(hot)} nodes)")
    return f


ALIGNED_LAYOUT = StageCheck("aligned_layout", "Block-aligned layout (hyperbatch): aligned.bin has the layout's "
                            "size, no row straddles a 4 KiB block, sampled rows equal features.npy; the hyperbatch "
                            "tables list every sampled epoch's training batches once, in order.", _aligned_layout)

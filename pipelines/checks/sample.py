"""The invariants of the ``sample`` artifact: every batch's layered blocks in range and tiling their files
(``blocks_in_range``), and each (split, epoch)'s seeds exactly that split's nodes (``seeds_match_split``)."""

from __future__ import annotations

import numpy as np

from pipelines.checks.base import CheckInputs, Finding, StageCheck, _batch_index, _chunks, _first, _segments

__all__ = ["BLOCKS_IN_RANGE", "SEEDS_MATCH_SPLIT", "check_sample_blocks", "check_sample_seeds"]


def check_sample_blocks(
    cols: np.ndarray,
    indptr: np.ndarray,
    num_nodes_total: int,
    node_offset: np.ndarray,
    indptr_offset: np.ndarray,
    cols_offset: np.ndarray,
    hop_counts: np.ndarray,
    edge_counts: np.ndarray,
) -> Finding:
    """Every batch's blocks are in range: hop h's cols < hop_counts[h+1], its indptr ends at its edge count.

    ``hop_counts`` is (B, L+1) and ``edge_counts`` (B, L), from ``batches.parquet``.
    """
    f = Finding()
    num_batches, num_layers = edge_counts.shape
    f.facts.update({"num_batches": num_batches, "num_layers": num_layers, "num_cols": len(cols)})
    if num_batches == 0:
        f.fail("'batches.parquet' expected at least one batch (got 0)")
        return f
    if (np.diff(hop_counts, axis=1) < 0).any() or (hop_counts[:, 0] <= 0).any():
        f.fail("'hop_counts' expected positive, non-decreasing counts per batch")
        return f
    if _segments(node_offset, hop_counts[:, -1], num_nodes_total, "nodes.npy", f) is None:
        return f
    # (batch, hop) segments of cols.npy and indptr.npy, in file order within each batch.
    seg_cols_start = (cols_offset[:, None] + np.cumsum(edge_counts, axis=1) - edge_counts).ravel()
    seg_cols_len = edge_counts.ravel()
    seg_bound = hop_counts[:, 1:].ravel()  # cols of hop h index nodes[:hop_counts[h+1]]
    order = _segments(seg_cols_start, seg_cols_len, len(cols), "cols.npy", f)
    if order is None:
        return f
    indptr_len = hop_counts[:, :-1] + 1
    seg_ip_end = (indptr_offset[:, None] + np.cumsum(indptr_len, axis=1) - 1).ravel()
    if len(seg_ip_end) and int(seg_ip_end.max()) >= len(indptr):
        f.fail(f"'indptr.npy' expected {int(seg_ip_end.max()) + 1}+ entries for the batch index (got {len(indptr)})")
        return f
    last = np.asarray(indptr)[seg_ip_end]
    if (last != seg_cols_len).any():
        k = _first(last != seg_cols_len)
        b, h = divmod(k, num_layers)
        f.fail(f"'indptr' of batch {b} hop {h} expected to end at its edge count {int(seg_cols_len[k])} "
               f"(got {int(last[k])})")
        return f
    starts, bounds = seg_cols_start[order], seg_bound[order]
    for start, stop in _chunks(len(cols)):
        seg = np.searchsorted(starts, np.arange(start, stop), side="right") - 1
        chunk = np.asarray(cols[start:stop])
        bad = (chunk < 0) | (chunk >= bounds[seg])
        if bad.any():
            i = _first(bad)
            b, h = divmod(int(order[seg[i]]), num_layers)
            f.fail(f"'cols' of batch {b} hop {h} expected positions < {int(bounds[seg[i]])} "
                   f"(got {int(chunk[i])} at cols[{start + i}])")
            break
    return f


def check_sample_seeds(
    nodes: np.ndarray,
    node_offset: np.ndarray,
    num_seeds: np.ndarray,
    split: np.ndarray,
    epoch: np.ndarray,
    split_nodes: dict[str, np.ndarray],
) -> Finding:
    """The seeds of each (split, epoch) are exactly that split's nodes: each once, none from elsewhere."""
    f = Finding()
    groups = sorted({(str(s), int(e)) for s, e in zip(split.tolist(), epoch.tolist(), strict=True)})
    f.facts["groups"] = len(groups)
    for name, ep in groups:
        if name not in split_nodes:
            f.fail(f"'split' expected one of {sorted(split_nodes)} (got {name!r})")
            return f
        mask = (split == name) & (epoch == ep)
        offsets, counts = node_offset[mask], num_seeds[mask]
        # Positions of every seed of this group in nodes.npy: offset + 0..count-1 per batch, vectorised.
        positions = np.repeat(offsets - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        positions += np.arange(int(counts.sum()))
        seeds = np.sort(np.asarray(nodes)[positions])
        expected = np.asarray(split_nodes[name])
        if len(seeds) != len(expected) or not np.array_equal(seeds, np.sort(expected)):
            extra = np.setdiff1d(seeds, expected)
            detail = f"{len(extra)} not in the split, e.g. {int(extra[0])}" if len(extra) else "duplicates"
            f.fail(f"'{name}' seeds of epoch {ep} expected the {len(expected)} {name} nodes once each "
                   f"(got {len(seeds)} seeds: {detail})")
            return f
    return f


def _blocks_in_range(c: CheckInputs) -> Finding:
    art = c.artifact
    idx = _batch_index(art)
    return check_sample_blocks(
        art.array("cols.npy"), art.array("indptr.npy"), len(art.array("nodes.npy")), idx["node_offset"],
        idx["indptr_offset"], idx["cols_offset"], idx["hop_counts"], idx["edge_counts"],
    )


def _seeds_match_split(c: CheckInputs) -> Finding:
    art, reorder = c.artifact, c.upstream("reorder")
    idx = _batch_index(art)
    splits = {name: reorder.array(f"{name}_idx.npy") for name in ("train", "val", "test")}
    return check_sample_seeds(art.array("nodes.npy"), idx["node_offset"], idx["num_seeds"], idx["split"],
                              idx["epoch"], splits)


BLOCKS_IN_RANGE = StageCheck("blocks_in_range", "Every batch's blocks in range: hop h's cols < hop_counts[h+1], "
                             "each hop's indptr ends at its edge count, segments tile the files.", _blocks_in_range)
SEEDS_MATCH_SPLIT = StageCheck("seeds_match_split", "The seeds of each (split, epoch) are exactly that split's "
                               "nodes of the ordering, each once.", _seeds_match_split)

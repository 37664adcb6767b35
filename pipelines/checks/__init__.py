"""The invariants of every artifact: one check each, read from the artifact files (docs/CONTRACTS.md layouts).

Two layers, no Dagster here:

- pure functions ``check_*`` of (memory-mapped) arrays, which stream large arrays in chunks with vectorised
  NumPy (no Python loop per node or edge) and are unit-tested on hand-made arrays;
- :class:`StageCheck` bindings (``CSR_VALID``, ...) that open an artifact's files -- and the upstream artifacts
  its manifest names (``upstream``: stage -> version) -- and call them. The stage graph
  (:mod:`pipelines.graph`) lists each stage's checks; :mod:`pipelines.orchestration.assets` turns them into blocking
  Dagster
  asset checks, and :class:`pipelines.runner.StageRunner` can run them without Dagster.

A failing check is blocking: nothing downstream of a broken artifact runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from storage_kernels.arrays import segment_ranges
from storage_kernels.changesets import ChangesetStore
from storage_kernels.packstore import (
    ADDR_SLOT,
    ADDR_TIER,
    BATCH_SEGMENT,
    CHUNK_ALIGN,
    CHUNK_OFFSET,
    CHUNK_ROWS,
    CPU_CACHE,
    DISK_CACHE_BIN,
    GPU_CACHE,
    PACKED_BIN,
    SEGMENT_OFFSET,
    SEGMENT_ROWS,
    Tier,
    store_budget_bytes,
)
from storage_kernels.store import Artifact, ArtifactStore

__all__ = [
    "CheckInputs",
    "Finding",
    "StageCheck",
    "check_csr",
    "check_features_finite",
    "check_permutation",
    "check_same_graph",
    "check_balance",
    "check_partition",
    "check_sample_blocks",
    "check_sample_seeds",
    "check_plan_budgets",
    "check_plan_tiers",
    "check_packed_addresses",
    "check_packed_chunks",
    "check_changesets",
    "check_disk_caches",
    "check_disk_budget",
]

_CHUNK = 1 << 22  # elements per streamed chunk (32 MiB of int64)
# a plan's tiers: never read, GPU cache, CPU cache, packed chunk, feature file (eval only); DISK_CACHE is pack's
_TIERS = tuple(int(t) for t in Tier if t != Tier.DISK_CACHE)


@dataclass
class Finding:
    """The outcome of one invariant: passed, the first problem found (if any), and facts worth showing."""

    problems: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems

    def fail(self, message: str) -> None:
        self.problems.append(message)


def _chunks(n: int, size: int = _CHUNK) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(n, start + size)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_range(finding: Finding, name: str, values: np.ndarray, low: int, high: int) -> None:
    """Every value of ``values`` in ``[low, high)`` (streamed); records the first offender."""
    for start, stop in _chunks(len(values)):
        chunk = np.asarray(values[start:stop])
        bad = (chunk < low) | (chunk >= high)
        if bad.any():
            i = _first(bad)
            finding.fail(f"'{name}[{start + i}]' expected a value in [{low}, {high}) (got {int(chunk[i])})")
            return


def _covers_once(finding: Finding, name: str, values: np.ndarray, n: int) -> None:
    """``values`` (length n, already range-checked) holds every id in ``[0, n)`` exactly once."""
    if len(values) != n:
        finding.fail(f"'{name}' expected {n} entries (got {len(values)})")
        return
    seen = np.zeros(n, dtype=bool)
    for start, stop in _chunks(n):
        seen[np.asarray(values[start:stop])] = True
    if not seen.all():  # n entries covering fewer than n ids: some id is repeated and another missing
        missing = _first(~seen)
        finding.fail(f"'{name}' expected every id in [0, {n}) exactly once (got {missing} missing)")


# ---------------------------------------------------------------------------------------- invariants


def check_features_finite(features: np.ndarray, name: str = "features.npy") -> Finding:
    """Every feature value finite: a NaN or inf would surface only as a diverged model after a whole training
    run. Streamed in row chunks; the first offender is named by row and column."""
    f = Finding()
    rows = max(1, _CHUNK // max(int(features.shape[1]) if features.ndim == 2 else 1, 1))
    bad, first = 0, None
    for start, stop in _chunks(len(features), rows):
        block = np.asarray(features[start:stop])
        finite = np.isfinite(block)
        if not finite.all():
            if first is None:
                where = np.argwhere(~finite)[0]
                first = (start + int(where[0]), *(int(w) for w in where[1:]), float(block[tuple(where)]))
            bad += int(finite.size - np.count_nonzero(finite))
    f.facts["non_finite_values"] = bad
    if first is not None:
        at = f"row {first[0]}" + (f", column {first[1]}" if len(first) > 2 else "")
        f.fail(f"'{name}' expected finite values (got {bad} NaN/inf; the first at {at}: {first[-1]})")
    return f


def check_csr(indptr: np.ndarray, indices: np.ndarray, num_nodes: int | None = None) -> Finding:
    """CSR valid: indptr starts at 0, never decreases, ends at len(indices); indices in [0, N)."""
    f = Finding()
    n = len(indptr) - 1
    f.facts.update({"num_nodes": n, "num_edges": len(indices)})
    if n < 0:
        f.fail("'indptr.npy' expected at least one entry (got 0)")
        return f
    if num_nodes is not None and n != num_nodes:
        f.fail(f"'indptr.npy' expected {num_nodes + 1} entries for {num_nodes} nodes (got {len(indptr)})")
    if int(indptr[0]) != 0:
        f.fail(f"'indptr[0]' expected 0 (got {int(indptr[0])})")
    if int(indptr[-1]) != len(indices):
        f.fail(f"'indptr[-1]' expected len(indices) = {len(indices)} (got {int(indptr[-1])})")
    max_degree = 0
    for start, stop in _chunks(n):
        degrees = np.diff(np.asarray(indptr[start : stop + 1]))
        if (degrees < 0).any():
            i = start + _first(degrees < 0)
            f.fail(f"'indptr' expected non-decreasing values (got indptr[{i + 1}] < indptr[{i}])")
            break
        if len(degrees):
            max_degree = max(max_degree, int(degrees.max()))
    f.facts["max_degree"] = max_degree
    _check_range(f, "indices", indices, 0, n)
    return f


def check_permutation(perm: np.ndarray, inverse: np.ndarray) -> Finding:
    """``perm`` (new -> old) is a bijection on [0, N) and ``inverse`` (old -> new) is its inverse."""
    f = Finding()
    n = len(perm)
    f.facts["num_nodes"] = n
    if len(inverse) != n:
        f.fail(f"'inverse.npy' expected {n} entries like perm.npy (got {len(inverse)})")
        return f
    _check_range(f, "perm", perm, 0, n)
    _check_range(f, "inverse", inverse, 0, n)
    if not f.passed:
        return f
    # inverse[perm[i]] == i for every i makes perm injective, hence a bijection of the finite set [0, N).
    for start, stop in _chunks(n):
        back = np.asarray(inverse)[np.asarray(perm[start:stop])]
        bad = back != np.arange(start, stop)
        if bad.any():
            i = start + _first(bad)
            f.fail(f"'inverse[perm[{i}]]' expected {i} (got {int(back[i - start])})")
            break
    return f


def check_same_graph(old_indptr: np.ndarray, old_indices: np.ndarray, new_indptr: np.ndarray,
                     new_indices: np.ndarray, perm: np.ndarray, max_sample_edges: int = 4_000_000) -> Finding:
    """The rewritten CSR is the old graph relabelled: every degree matches, and on a deterministic sample of
    rows (up to ``max_sample_edges`` edges) the neighbour sets mapped back through ``perm`` are equal."""
    f = Finding()
    n = len(perm)
    if len(new_indptr) != n + 1 or len(old_indptr) != n + 1:
        f.fail(f"'indptr.npy' expected {n + 1} entries in both CSRs (got {len(old_indptr)}, {len(new_indptr)})")
        return f
    old_ptr, new_ptr = np.asarray(old_indptr), np.asarray(new_indptr)
    for start, stop in _chunks(n):
        old_deg = old_ptr[np.asarray(perm[start:stop]) + 1] - old_ptr[np.asarray(perm[start:stop])]
        bad = np.diff(new_ptr[start : stop + 1]) != old_deg
        if bad.any():
            i = start + _first(bad)
            f.fail(f"'degree of new node {i}' expected {int(old_deg[i - start])}, the degree of old node "
                   f"{int(perm[i])} (got {int(new_ptr[i + 1] - new_ptr[i])})")
            return f
    e = int(new_ptr[-1])
    step = max(1, -(-e // max_sample_edges))  # every step-th row: about max_sample_edges edges in all
    rows = np.arange(0, n, step, dtype=np.int64)
    f.facts.update({"rows_compared": len(rows), "degrees_compared": n})
    perm_arr = np.asarray(perm)
    for part in np.array_split(rows, max(1, len(rows) // 65536)):
        if not len(part):
            continue
        new_nbrs, new_owner = _gather_rows(new_ptr, new_indices, part)
        old_nbrs, old_owner = _gather_rows(old_ptr, old_indices, perm_arr[part])
        mapped = perm_arr[new_nbrs]  # back to old ids
        a = np.lexsort((mapped, new_owner))
        b = np.lexsort((old_nbrs, old_owner))
        bad = mapped[a] != np.asarray(old_nbrs)[b]
        if bad.any():
            k = _first(bad)
            row = int(part[new_owner[a][k]])
            f.fail(f"'neighbours of new node {row}' expected the neighbours of old node {int(perm_arr[row])} "
                   f"relabelled (got old id {int(mapped[a][k])} where {int(old_nbrs[b][k])} was expected)")
            return f
    return f


def _gather_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated neighbour lists of ``rows`` and, for each entry, the position of its row in ``rows``."""
    begins, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - begins
    owner = np.repeat(np.arange(len(rows)), lengths)
    flat = np.repeat(begins, lengths) + segment_ranges(lengths)
    return np.asarray(indices[flat]), owner


def check_balance(parts: np.ndarray, num_parts: int, imbalance: float) -> Finding:
    """No part holds more than ``ceil((1 + imbalance) * N / p)`` nodes (+1 for rounding)."""
    f = Finding()
    n = len(parts)
    sizes = np.bincount(np.asarray(parts), minlength=num_parts)
    limit = int(np.ceil((1 + imbalance) * n / max(num_parts, 1))) + 1
    f.facts.update({"largest_part": int(sizes.max()) if len(sizes) else 0, "limit": limit,
                    "balance": float(sizes.max() / (n / num_parts)) if n and num_parts else 1.0})
    if len(sizes) and int(sizes.max()) > limit:
        p = int(np.argmax(sizes))
        f.fail(f"'part {p}' expected at most {limit} nodes ((1 + {imbalance}) * N / {num_parts}) "
               f"(got {int(sizes[p])})")
    return f


def check_partition(parts: np.ndarray, part_ptr: np.ndarray, part_nodes: np.ndarray, num_nodes: int) -> Finding:
    """Every node is in exactly one part: part_nodes lists each node once, under the part parts[] names."""
    f = Finding()
    num_parts = len(part_ptr) - 1
    f.facts.update({"num_nodes": num_nodes, "num_parts": num_parts})
    if len(parts) != num_nodes:
        f.fail(f"'parts.npy' expected {num_nodes} entries (got {len(parts)})")
        return f
    ptr = np.asarray(part_ptr, dtype=np.int64)
    if num_parts < 1 or int(ptr[0]) != 0 or int(ptr[-1]) != num_nodes or (np.diff(ptr) < 0).any():
        f.fail(f"'part_ptr.npy' expected a non-decreasing offset array from 0 to {num_nodes} (got {ptr[:8]}...)")
        return f
    _check_range(f, "parts", parts, 0, num_parts)
    _check_range(f, "part_nodes", part_nodes, 0, num_nodes)
    if f.passed:
        _covers_once(f, "part_nodes", part_nodes, num_nodes)
    if not f.passed:
        return f
    sizes = np.diff(ptr)
    f.facts.update({"smallest_part": int(sizes.min()), "largest_part": int(sizes.max())})
    for start, stop in _chunks(num_nodes):
        owner = np.searchsorted(ptr, np.arange(start, stop), side="right") - 1  # part of each list slot
        got = np.asarray(parts)[np.asarray(part_nodes[start:stop])]
        bad = got != owner
        if bad.any():
            i = _first(bad)
            node = int(part_nodes[start + i])
            f.fail(f"'parts[{node}]' expected {int(owner[i])}, the part listing it (got {int(got[i])})")
            break
    return f


def _segments(offsets: np.ndarray, lengths: np.ndarray, total: int, name: str, f: Finding) -> np.ndarray | None:
    """Order of segments ``[offset, offset+length)`` if they tile ``[0, total)`` exactly, else None."""
    order = np.argsort(offsets, kind="stable")
    starts, lens = offsets[order], lengths[order]
    ends = starts + lens
    if (lens < 0).any() or (len(starts) and int(starts[0]) != 0) or (starts[1:] != ends[:-1]).any():
        f.fail(f"'{name}' expected per-batch segments that tile the file without gaps or overlaps")
        return None
    if (int(ends[-1]) if len(ends) else 0) != total:
        f.fail(f"'{name}' expected segments covering all {total} entries (got {int(ends[-1]) if len(ends) else 0})")
        return None
    return order


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


def check_plan_budgets(
    gpu_rows: int, cpu_rows: int, row_bytes: int, gpu_budget: int, cpu_budget: int
) -> Finding:
    """Cache rows x row bytes within each tier's budget."""
    f = Finding()
    for tier, rows, budget in (("gpu", gpu_rows, gpu_budget), ("cpu", cpu_rows, cpu_budget)):
        used = rows * row_bytes
        f.facts.update({f"{tier}_cache_bytes": used, f"{tier}_budget_bytes": budget})
        if used > budget:
            f.fail(f"'{tier}_nodes.npy' expected at most {budget} bytes of cache "
                   f"(got {rows} rows x {row_bytes} B = {used})")
    return f


def check_plan_tiers(
    tier: np.ndarray, slot: np.ndarray, gpu_nodes: np.ndarray, cpu_nodes: np.ndarray, sampled: np.ndarray
) -> Finding:
    """Every sampled node is in exactly one tier; cache node lists match ``tier`` and fill their slots."""
    f = Finding()
    n = len(tier)
    t = np.asarray(tier)
    counts = {v: int(np.count_nonzero(t == v)) for v in _TIERS}
    f.facts.update({"gpu_rows": counts[Tier.GPU], "cpu_rows": counts[Tier.CPU], "packed_nodes": counts[Tier.PACKED],
                    "eval_only_nodes": counts[Tier.FILE], "unread_nodes": counts[Tier.NONE]})
    if sum(counts.values()) != n:
        bad = _first(~np.isin(t, _TIERS))
        f.fail(f"'tier[{bad}]' expected one of {_TIERS} (got {int(t[bad])})")
        return f
    for code, name, listed in ((Tier.GPU, "gpu_nodes", gpu_nodes), (Tier.CPU, "cpu_nodes", cpu_nodes)):
        listed = np.asarray(listed)
        _check_range(f, name, listed, 0, n)
        if not f.passed:
            return f
        if len(listed) != counts[code] or (t[listed] != code).any():
            f.fail(f"'{name}.npy' expected exactly the {counts[code]} nodes of tier {code} (got {len(listed)} "
                   f"entries, {int(np.count_nonzero(t[listed] != code))} in another tier)")
            return f
        slots = np.sort(np.asarray(slot)[listed])
        if not np.array_equal(slots, np.arange(len(listed))):
            f.fail(f"'slot' of {name} expected rows 0..{len(listed) - 1} of the cache, each once")
            return f
    for start, stop in _chunks(len(sampled)):
        ids = np.asarray(sampled[start:stop])
        _check_range(f, "samples nodes", ids, 0, n)
        if not f.passed:
            return f
        got = t[ids]
        if (got < 0).any():
            i = _first(got < 0)
            f.fail(f"'tier[{int(ids[i])}]' expected a tier >= 0 for a sampled node (got {int(got[i])})")
            return f
    return f


def check_packed_addresses(
    addr_tier: np.ndarray,
    addr_slot: np.ndarray,
    nodes: np.ndarray,
    plan_tier: np.ndarray,
    node_offset: np.ndarray,
    batch_nodes: np.ndarray,
    chunk_rows: np.ndarray,
    gpu_rows: int,
    cpu_rows: int,
    cache_rows: np.ndarray | None = None,
) -> Finding:
    """Every (batch, node) address points inside its tier and agrees with the plan.

    Cached nodes (plan tier 0/1) keep their tier; uncached ones (plan tier 2/3) are addressed in the batch's
    chunk (tier 2: slot < chunk_rows[b]), in its segment's disk cache (tier 4: slot < cache_rows[b], the rows
    of batch b's segment cache; none without ``cache_rows``) or in the reorder artifact's feature file
    (tier 3: slot < N).
    """
    f = Finding()
    total = len(nodes)
    num_nodes = len(plan_tier)
    f.facts.update({"addresses": total, "gpu_rows": gpu_rows, "cpu_rows": cpu_rows})
    if len(addr_tier) != total or len(addr_slot) != total:
        f.fail(f"'addr_tier.npy'/'addr_slot.npy' expected {total} entries like nodes.npy "
               f"(got {len(addr_tier)}/{len(addr_slot)})")
        return f
    order = _segments(node_offset, batch_nodes, total, "nodes.npy", f)
    if order is None:
        return f
    starts = node_offset[order]
    rows_by_segment = np.asarray(chunk_rows)[order]
    cache_by_segment = (np.zeros(len(order), np.int64) if cache_rows is None else np.asarray(cache_rows)[order])
    for start, stop in _chunks(total):
        seg = np.searchsorted(starts, np.arange(start, stop), side="right") - 1
        at = np.asarray(addr_tier[start:stop])
        slot = np.asarray(addr_slot[start:stop])
        planned = np.asarray(plan_tier)[np.asarray(nodes[start:stop])]
        cached = (planned == Tier.GPU) | (planned == Tier.CPU)
        on_disk = (at == Tier.PACKED) | (at == Tier.FILE) | (at == Tier.DISK_CACHE)
        agrees = np.where(cached, at == planned, (planned >= Tier.PACKED) & on_disk)
        if not agrees.all():
            i = _first(~agrees)
            f.fail(f"'addr_tier[{start + i}]' expected a tier consistent with the plan's tier {int(planned[i])} "
                   f"(got {int(at[i])})")
            return f
        limit = np.select([at == Tier.GPU, at == Tier.CPU, at == Tier.PACKED, at == Tier.DISK_CACHE],
                          [gpu_rows, cpu_rows, rows_by_segment[seg], cache_by_segment[seg]], num_nodes)
        bad = (at < 0) | (slot < 0) | (slot >= limit)
        if bad.any():
            i = _first(bad)
            b = int(order[seg[i]])
            f.fail(f"'addr_slot[{start + i}]' (batch {b}, tier {int(at[i])}) expected a row in "
                   f"[0, {int(limit[i])}) (got {int(slot[i])})")
            return f
    return f


def check_packed_chunks(chunk_offset: np.ndarray, chunk_rows: np.ndarray, row_bytes: int, file_bytes: int, *,
                        names: tuple[str, str, str] = ("chunk_offset", "chunk_rows", "packed.bin")) -> Finding:
    """Chunk offsets are 4096-aligned, chunks do not overlap and lie inside packed.bin (``names``: the offset
    and row tables and the file, for the segment disk caches' ``segment_offset``, ``segment_rows``,
    ``disk_cache.bin``)."""
    f = Finding()
    off_name, rows_name, file_name = names
    off = np.asarray(chunk_offset, dtype=np.int64)
    length = np.asarray(chunk_rows, dtype=np.int64) * row_bytes
    f.facts.update({f"{rows_name.split('_')[0]}s": len(off), f"{file_name.split('.')[0]}_bytes": file_bytes,
                    "row_bytes": row_bytes})
    if len(off) != len(length):
        f.fail(f"'{off_name}.npy' expected {len(length)} entries like {rows_name}.npy (got {len(off)})")
        return f
    misaligned = off % CHUNK_ALIGN != 0
    if misaligned.any():
        b = _first(misaligned)
        f.fail(f"'{off_name}[{b}]' expected a multiple of {CHUNK_ALIGN} (got {int(off[b])})")
        return f
    if (length < 0).any() or (off < 0).any():
        f.fail(f"'{rows_name}'/'{off_name}' expected non-negative values")
        return f
    order = np.flatnonzero(length > 0)  # empty chunks occupy no bytes
    order = order[np.argsort(off[order], kind="stable")]
    starts, ends = off[order], off[order] + length[order]
    overlap = starts[1:] < ends[:-1]
    if overlap.any():
        k = _first(overlap)
        f.fail(f"'{file_name}' chunks {int(order[k])} and {int(order[k + 1])} expected not to overlap "
               f"(got [{int(starts[k])}, {int(ends[k])}) and [{int(starts[k + 1])}, {int(ends[k + 1])}))")
        return f
    if len(ends) and int(ends.max()) > file_bytes:
        b = int(order[int(np.argmax(ends))])
        f.fail(f"'{file_name}' expected chunk {b} to end within its {file_bytes} bytes (got {int(ends.max())})")
    return f



def check_changesets(changes: ChangesetStore, nodes: np.ndarray, node_offset: np.ndarray,
                     batch_nodes: np.ndarray) -> Finding:
    """Ginex's changesets replay: from each superbatch's initial cache (distinct nodes, at most ``cache_rows``),
    every inserted node is its batch's node at its ``in_position`` and was not cached, every evicted node was,
    and each position's predicted hits are its batch's cached nodes (one NumPy pass per batch)."""
    f = Finding()
    f.facts.update({"superbatches": changes.num_superbatches, "positions": len(changes.trace),
                    "cache_rows": changes.cache_rows, "changes": len(changes.in_ids)})
    cached = np.zeros(changes.num_nodes, dtype=bool)
    for sb in range(changes.num_superbatches):
        cached[:] = False
        init = changes.init(sb)
        if len(init) and (int(init.min()) < 0 or int(init.max()) >= changes.num_nodes
                          or len(np.unique(init)) != len(init)):
            f.fail(f"'ginex_init_ids' of superbatch {sb} expected distinct node ids below {changes.num_nodes}")
            return f
        cached[init] = True
        for t in range(int(changes.superbatch_ptr[sb]), int(changes.superbatch_ptr[sb + 1])):
            b = int(changes.trace[t])
            batch = np.asarray(nodes[node_offset[b] : node_offset[b] + batch_nodes[b]])
            hits = int(np.count_nonzero(cached[batch]))
            if hits != int(changes.hits[t]):
                f.fail(f"'ginex_hits[{t}]' expected {hits}, batch {b}'s cached nodes (got {int(changes.hits[t])})")
                return f
            ins, outs, pos = changes.update(t)
            if len(pos) and (int(pos.min()) < 0 or int(pos.max()) >= len(batch)
                             or not np.array_equal(batch[pos], ins)):
                f.fail(f"'ginex_in_positions' of position {t} expected the positions of in_ids in batch {b}")
                return f
            if cached[ins].any() or not cached[outs].all() or len(np.unique(ins)) != len(ins) \
                    or len(np.unique(outs)) != len(outs):
                f.fail(f"changeset of position {t} (batch {b}) expected distinct uncached in_ids and distinct "
                       "cached out_ids")
                return f
            cached[outs] = False
            cached[ins] = True
    return f


def check_disk_caches(segment_offset: np.ndarray, segment_rows: np.ndarray, batch_segment: np.ndarray,
                      row_bytes: int, file_bytes: int) -> Finding:
    """Segment disk caches are 4096-aligned, do not overlap and lie inside disk_cache.bin; every batch names
    a segment or -1."""
    f = check_packed_chunks(segment_offset, segment_rows, row_bytes, file_bytes,
                            names=("segment_offset", "segment_rows", "disk_cache.bin"))
    seg = np.asarray(batch_segment)
    bad = (seg < -1) | (seg >= len(segment_offset))
    if bad.any():
        b = _first(bad)
        f.fail(f"'batch_segment[{b}]' expected -1 or a segment in [0, {len(segment_offset)}) (got {int(seg[b])})")
    return f


def check_disk_budget(store_bytes: int, feature_bytes: int, budget: float | None) -> Finding:
    """The store (cache blocks, disk caches, packed chunks) within ``budget`` times the feature bytes, counted in
    whole blocks (:func:`storage_kernels.packstore.store_budget_bytes`, as the pack stage budgets it)."""
    f = Finding()
    blowup = store_bytes / feature_bytes if feature_bytes else 0.0
    limit = store_budget_bytes(budget, feature_bytes)
    f.facts.update({"store_bytes": store_bytes, "feature_bytes": feature_bytes, "disk_blowup": round(blowup, 4),
                    "disk_budget": budget})
    if limit is not None and store_bytes > limit:
        f.fail(f"'pack' expected a store of at most {budget} x {feature_bytes} feature bytes in whole blocks "
               f"({int(limit)} bytes) (got {store_bytes} bytes, {blowup:.4f}x)")
    return f


# ------------------------------------------------------------------------------------ artifact bindings


@dataclass(frozen=True)
class CheckInputs:
    """The artifact under check and a way to open the upstream artifacts its manifest names."""

    artifact: Artifact
    store: ArtifactStore

    def upstream(self, stage: str) -> Artifact:
        """The version of ``stage`` this artifact was built from (``manifest["upstream"]``)."""
        if stage not in self.artifact.upstream:
            raise ValueError(f"'{self.artifact.path}/manifest.json' expected an upstream {stage!r} "
                             f"(got {sorted(self.artifact.upstream)})")
        return self.store.open(self.artifact.dataset, stage, self.artifact.upstream[stage])


@dataclass(frozen=True)
class StageCheck:
    """One blocking invariant of a stage's artifact: its name, what it asserts, and how it is evaluated."""

    name: str
    description: str
    evaluate: Callable[[CheckInputs], Finding]

    def run(self, artifact: Artifact, store: ArtifactStore) -> Finding:
        return self.evaluate(CheckInputs(artifact, store))


def _batch_index(samples: Artifact) -> dict[str, np.ndarray]:
    table = samples.parquet("batches.parquet")
    hop_counts = np.asarray(table.column("hop_counts").to_pylist(), dtype=np.int64)
    edge_counts = np.asarray(table.column("edge_counts").to_pylist(), dtype=np.int64)
    num_layers = hop_counts.shape[1] - 1 if hop_counts.ndim == 2 else 0
    return {
        "split": np.asarray(table.column("split").to_pylist(), dtype=object),
        "epoch": table.column("epoch").to_numpy().astype(np.int64),
        "num_seeds": table.column("num_seeds").to_numpy().astype(np.int64),
        "node_offset": table.column("node_offset").to_numpy().astype(np.int64),
        "indptr_offset": table.column("indptr_offset").to_numpy().astype(np.int64),
        "cols_offset": table.column("cols_offset").to_numpy().astype(np.int64),
        "hop_counts": hop_counts.reshape(-1, num_layers + 1),
        "edge_counts": edge_counts.reshape(-1, num_layers),
    }


def _csr_valid(c: CheckInputs) -> Finding:
    art = c.artifact
    return check_csr(art.array("indptr.npy"), art.array("indices.npy"), len(art.array("labels.npy")))


def _features_finite(c: CheckInputs) -> Finding:
    return check_features_finite(c.artifact.array("features.npy"), f"{c.artifact.path}/features.npy")


def _permutation_bijective(c: CheckInputs) -> Finding:
    return check_permutation(c.artifact.array("perm.npy"), c.artifact.array("inverse.npy"))


def _same_graph(c: CheckInputs) -> Finding:
    art, old = c.artifact, c.upstream("ingest")
    return check_same_graph(old.array("indptr.npy"), old.array("indices.npy"), art.array("indptr.npy"),
                            art.array("indices.npy"), art.array("perm.npy"))


def _parts_cover_nodes(c: CheckInputs) -> Finding:
    art = c.artifact
    num_nodes = len(c.upstream("reorder").array("labels.npy"))
    return check_partition(art.array("parts.npy"), art.array("part_ptr.npy"), art.array("part_nodes.npy"),
                           num_nodes)


def _parts_balanced(c: CheckInputs) -> Finding:
    art = c.artifact
    num_parts = len(art.array("part_ptr.npy")) - 1
    return check_balance(art.array("parts.npy"), num_parts, float(art.params.get("imbalance", 0.05)))


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


def _budgets_respected(c: CheckInputs) -> Finding:
    from pipelines.config import PlanConfig

    art = c.artifact
    features = c.upstream("reorder").array("features.npy")
    row_bytes = int(features.shape[1]) * features.dtype.itemsize
    # recomputed from the plan's parameters, not its stats
    plan_cfg = PlanConfig.model_validate({k: v for k, v in art.params.items() if k in PlanConfig.model_fields})
    budgets = plan_cfg.budgets(int(features.shape[0]) * row_bytes)
    return check_plan_budgets(len(art.array("gpu_nodes.npy")), len(art.array("cpu_nodes.npy")), row_bytes,
                              budgets["gpu"], budgets["cpu"])


def _sampled_nodes_tiered(c: CheckInputs) -> Finding:
    art = c.artifact
    return check_plan_tiers(art.array("tier.npy"), art.array("slot.npy"), art.array("gpu_nodes.npy"),
                            art.array("cpu_nodes.npy"), c.upstream("sample").array("nodes.npy"))


def _no_layout(art: Artifact) -> Finding | None:
    """A passing finding that says so when the policy laid nothing out (it reads the feature file or RAM) or
    wrote another layout than the packed store (checked by that layout's own checks)."""
    layout = art.stats.get("layout", "packed")
    if layout == "packed":
        return None
    f = Finding()
    f.facts["layout"] = (f"none (policy {art.stats.get('policy', '?')} reads the feature file or RAM)"
                         if layout == "none" else f"{layout} (not the packed store)")
    return f


def _addresses_in_bounds(c: CheckInputs) -> Finding:
    art = c.artifact
    if (skipped := _no_layout(art)) is not None:
        return skipped
    samples = c.upstream("sample")
    idx = _batch_index(samples)
    cache_rows = None
    if (art.path / BATCH_SEGMENT).exists():  # a store with segment disk caches: each batch's segment rows
        seg, rows = np.asarray(art.array(BATCH_SEGMENT)), np.asarray(art.array(SEGMENT_ROWS))
        cache_rows = np.where(seg >= 0, np.append(rows, 0)[seg], 0)
    return check_packed_addresses(
        art.array(ADDR_TIER), art.array(ADDR_SLOT), samples.array("nodes.npy"), c.upstream("plan").array("tier.npy"),
        idx["node_offset"], idx["hop_counts"][:, -1], art.array(CHUNK_ROWS), len(art.array(GPU_CACHE)),
        len(art.array(CPU_CACHE)), cache_rows,
    )


def _chunks_aligned(c: CheckInputs) -> Finding:
    art = c.artifact
    if (skipped := _no_layout(art)) is not None:
        return skipped
    cache = art.array(GPU_CACHE)
    row_bytes = int(cache.shape[1]) * cache.dtype.itemsize
    found = check_packed_chunks(art.array(CHUNK_OFFSET), art.array(CHUNK_ROWS), row_bytes,
                                art.file(PACKED_BIN).stat().st_size)
    if found.passed and (art.path / DISK_CACHE_BIN).exists():
        disk = check_disk_caches(art.array(SEGMENT_OFFSET), art.array(SEGMENT_ROWS), art.array(BATCH_SEGMENT),
                                 row_bytes, art.file(DISK_CACHE_BIN).stat().st_size)
        found.problems += disk.problems
        found.facts.update(disk.facts)
    return found


def _disk_budget_respected(c: CheckInputs) -> Finding:
    art = c.artifact
    if (skipped := _no_layout(art)) is not None:
        return skipped
    if "disk_budget" not in art.stats:  # the policy does not budget its store
        f = Finding()
        f.facts["disk_budget"] = f"none (policy {art.stats.get('policy', '?')} does not budget its store)"
        return f
    features = c.upstream("reorder").array("features.npy")
    feature_bytes = int(features.shape[0]) * int(features.shape[1]) * features.dtype.itemsize
    # measured from the files (cache blocks' data, disk caches, packed chunks), not from the stats
    store = sum(art.array(name).nbytes for name in (GPU_CACHE, CPU_CACHE))
    store += sum((art.path / name).stat().st_size for name in (PACKED_BIN, DISK_CACHE_BIN)
                 if (art.path / name).exists())
    return check_disk_budget(store, feature_bytes, art.params.get("disk_budget"))


def _changesets_replay(c: CheckInputs) -> Finding:
    art = c.artifact
    if art.stats.get("layout") != "changesets":
        f = Finding()
        f.facts["layout"] = f"{art.stats.get('layout')} (policy {art.stats.get('policy', '?')}: no changesets)"
        return f
    samples = c.upstream("sample")
    idx = _batch_index(samples)
    return check_changesets(ChangesetStore(art.path, len(idx["node_offset"])), samples.array("nodes.npy"),
                            idx["node_offset"], idx["hop_counts"][:, -1])


CSR_VALID = StageCheck("csr_valid", "CSR valid: indptr from 0, non-decreasing, ending at len(indices); every "
                       "index in [0, N).", _csr_valid)
FEATURES_FINITE = StageCheck("features_finite", "Every feature value finite (no NaN or inf).", _features_finite)
PERMUTATION_BIJECTIVE = StageCheck("permutation_bijective", "perm is a bijection on [0, N) and inverse is its "
                                   "inverse.", _permutation_bijective)
SAME_GRAPH = StageCheck("same_graph", "The rewritten CSR is the same graph: degrees match through perm, and "
                        "sampled rows' neighbour sets map back exactly.", _same_graph)
PARTS_COVER_NODES = StageCheck("parts_cover_nodes", "Every node in exactly one part; part sizes sum to N.",
                               _parts_cover_nodes)
PARTS_BALANCED = StageCheck("parts_balanced", "Parts balanced within the configured tolerance: largest part <= "
                            "(1 + imbalance) * N / p.", _parts_balanced)
BLOCKS_IN_RANGE = StageCheck("blocks_in_range", "Every batch's blocks in range: hop h's cols < hop_counts[h+1], "
                             "each hop's indptr ends at its edge count, segments tile the files.", _blocks_in_range)
SEEDS_MATCH_SPLIT = StageCheck("seeds_match_split", "The seeds of each (split, epoch) are exactly that split's "
                               "nodes of the ordering, each once.", _seeds_match_split)
BUDGETS_RESPECTED = StageCheck("budgets_respected", "Cache rows x row bytes within the GPU and CPU budgets the "
                               "configuration asked for.", _budgets_respected)
SAMPLED_NODES_TIERED = StageCheck("sampled_nodes_tiered", "Every node the samples read has a tier >= 0; the cache "
                                  "node lists are exactly the tier-0/1 nodes and fill their cache rows.",
                                  _sampled_nodes_tiered)
ADDRESSES_IN_BOUNDS = StageCheck("addresses_in_bounds", "Every (batch, node) address has the plan's tier and a "
                                 "slot inside that tier (cache rows or the batch's chunk rows).", _addresses_in_bounds)
CHUNKS_ALIGNED = StageCheck("chunks_aligned", f"Chunk and segment disk-cache offsets {CHUNK_ALIGN}-aligned; they do "
                            "not overlap and end inside packed.bin / disk_cache.bin.", _chunks_aligned)
DISK_BUDGET_RESPECTED = StageCheck("disk_budget_respected", "The store (cache blocks + segment disk caches + packed "
                                   "chunks) is at most pack.disk_budget times the feature file.",
                                   _disk_budget_respected)
CHANGESETS_REPLAY = StageCheck("changesets_replay", "ginex: replaying each superbatch's changesets from its initial "
                               "cache inserts only batch nodes that were not cached, evicts only cached ones, and "
                               "reproduces every predicted hit count.", _changesets_replay)

"""Blocking asset checks: one invariant each, read from the artifact files (docs/CONTRACTS.md layouts).

Each check resolves the artifact its asset materialized in this run the same way the assets do
(:func:`pipelines.assets.common.resolver_for`; within a run that is a memo hit; a check run on its own looks
the artifact up for the resource's configuration), opens the upstream artifacts
it needs through the artifact's manifest (``upstream``: stage -> version), and runs a pure function of
memory-mapped arrays. The pure functions (``check_*``) stream large arrays in chunks with vectorised NumPy
(no Python loop per node or edge) and are unit-tested on hand-made arrays.

A failing check is at ERROR severity and blocking, so the assets downstream of a broken artifact do not run.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import numpy as np

from pipelines.assets.common import resolver_for
from pipelines.resources import RunReporter, StrataResource
from storage_kernels.arrays import segment_ranges

__all__ = [
    "ALL_CHECKS",
    "CHUNK_ALIGN",
    "Finding",
    "check_csr",
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
]

CHUNK_ALIGN = 4096
_CHUNK = 1 << 22  # elements per streamed chunk (32 MiB of int64)
_TIERS = (-1, 0, 1, 2, 3)  # never read, GPU cache, CPU cache, packed chunk, feature file (evaluation only)


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
    f.facts.update({"gpu_rows": counts[0], "cpu_rows": counts[1], "packed_nodes": counts[2],
                    "eval_only_nodes": counts[3], "unread_nodes": counts[-1]})
    if sum(counts.values()) != n:
        bad = _first(~np.isin(t, _TIERS))
        f.fail(f"'tier[{bad}]' expected one of {_TIERS} (got {int(t[bad])})")
        return f
    for code, name, listed in ((0, "gpu_nodes", gpu_nodes), (1, "cpu_nodes", cpu_nodes)):
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
) -> Finding:
    """Every (batch, node) address points inside its tier and agrees with the plan.

    Cached nodes (plan tier 0/1) keep their tier; uncached ones (plan tier 2/3) are addressed in the batch's
    chunk (tier 2: slot < chunk_rows[b]) or in the ordering's feature file (tier 3: slot < N).
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
    for start, stop in _chunks(total):
        seg = np.searchsorted(starts, np.arange(start, stop), side="right") - 1
        at = np.asarray(addr_tier[start:stop])
        slot = np.asarray(addr_slot[start:stop])
        planned = np.asarray(plan_tier)[np.asarray(nodes[start:stop])]
        cached = (planned == 0) | (planned == 1)
        agrees = np.where(cached, at == planned, (planned >= 2) & ((at == 2) | (at == 3)))
        if not agrees.all():
            i = _first(~agrees)
            f.fail(f"'addr_tier[{start + i}]' expected a tier consistent with the plan's tier {int(planned[i])} "
                   f"(got {int(at[i])})")
            return f
        limit = np.select([at == 0, at == 1, at == 2], [gpu_rows, cpu_rows, rows_by_segment[seg]], num_nodes)
        bad = (at < 0) | (slot < 0) | (slot >= limit)
        if bad.any():
            i = _first(bad)
            b = int(order[seg[i]])
            f.fail(f"'addr_slot[{start + i}]' (batch {b}, tier {int(at[i])}) expected a row in "
                   f"[0, {int(limit[i])}) (got {int(slot[i])})")
            return f
    return f


def check_packed_chunks(chunk_offset: np.ndarray, chunk_rows: np.ndarray, row_bytes: int, file_bytes: int) -> Finding:
    """Chunk offsets are 4096-aligned, chunks do not overlap and lie inside packed.bin."""
    f = Finding()
    off = np.asarray(chunk_offset, dtype=np.int64)
    length = np.asarray(chunk_rows, dtype=np.int64) * row_bytes
    f.facts.update({"chunks": len(off), "packed_bytes": file_bytes, "row_bytes": row_bytes})
    if len(off) != len(length):
        f.fail(f"'chunk_offset.npy' expected {len(length)} entries like chunk_rows.npy (got {len(off)})")
        return f
    misaligned = off % CHUNK_ALIGN != 0
    if misaligned.any():
        b = _first(misaligned)
        f.fail(f"'chunk_offset[{b}]' expected a multiple of {CHUNK_ALIGN} (got {int(off[b])})")
        return f
    if (length < 0).any() or (off < 0).any():
        f.fail("'chunk_rows'/'chunk_offset' expected non-negative values")
        return f
    order = np.flatnonzero(length > 0)  # empty chunks occupy no bytes
    order = order[np.argsort(off[order], kind="stable")]
    starts, ends = off[order], off[order] + length[order]
    overlap = starts[1:] < ends[:-1]
    if overlap.any():
        k = _first(overlap)
        f.fail(f"'packed.bin' chunks {int(order[k])} and {int(order[k + 1])} expected not to overlap "
               f"(got [{int(starts[k])}, {int(ends[k])}) and [{int(starts[k + 1])}, {int(ends[k + 1])}))")
        return f
    if len(ends) and int(ends.max()) > file_bytes:
        b = int(order[int(np.argmax(ends))])
        f.fail(f"'packed.bin' expected chunk {b} to end within its {file_bytes} bytes (got {int(ends.max())})")
    return f


# ------------------------------------------------------------------------------------- Dagster checks


def _batch_index(samples: Any) -> dict[str, np.ndarray]:
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


def _result(
    context: dg.AssetCheckExecutionContext,
    reporter: RunReporter,
    artifact: Any,
    check: str,
    finding: Finding,
) -> dg.AssetCheckResult:
    detail = finding.problems[0] if finding.problems else "ok"
    reporter.check_finished(artifact.stage, check, finding.passed, detail)
    if not finding.passed:
        context.log.error(f"{artifact.stage} {artifact.version}: check {check} failed: {detail}")
    facts = {k: v for k, v in finding.facts.items() if isinstance(v, (int, float, str, bool))}
    return dg.AssetCheckResult(
        passed=finding.passed,
        description=detail,
        metadata={"version": artifact.version, "path": dg.MetadataValue.path(str(artifact.path)),
                  "problem": detail, **facts},
    )


def _artifacts(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, stage: str, upstream: Sequence[str] = ()
) -> tuple[Any, dict[str, Any]]:
    """The run's artifact of ``stage`` and the upstream artifacts its manifest names."""
    resolver = resolver_for(context.run.run_id, strata, context.log)
    artifact = resolver.artifact(stage)
    store = resolver.store
    ups = {name: store.open(artifact.dataset, name, artifact.upstream[name]) for name in upstream}
    return artifact, ups


@dg.asset_check(asset="graph", blocking=True, description="CSR valid: indptr from 0, non-decreasing, "
                "ending at len(indices); every index in [0, N).")
def csr_valid(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``graph``: the CSR is well formed."""
    art, _ = _artifacts(context, strata, "graph")
    finding = check_csr(art.array("indptr.npy"), art.array("indices.npy"), len(art.array("labels.npy")))
    return _result(context, reporter, art, "csr_valid", finding)


@dg.asset_check(asset="ordering", blocking=True, description="perm is a bijection on [0, N) and inverse is "
                "its inverse.")
def permutation_bijective(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``ordering``: the permutation is a bijection with a matching inverse."""
    art, _ = _artifacts(context, strata, "ordering")
    finding = check_permutation(art.array("perm.npy"), art.array("inverse.npy"))
    return _result(context, reporter, art, "permutation_bijective", finding)


@dg.asset_check(asset="ordering", blocking=True, description="The rewritten CSR is the same graph: degrees "
                "match through perm, and sampled rows' neighbour sets map back exactly.")
def same_graph(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``ordering``: relabelling preserved the graph."""
    art, ups = _artifacts(context, strata, "ordering", ["graph"])
    old = ups["graph"]
    finding = check_same_graph(old.array("indptr.npy"), old.array("indices.npy"), art.array("indptr.npy"),
                               art.array("indices.npy"), art.array("perm.npy"))
    return _result(context, reporter, art, "same_graph", finding)


@dg.asset_check(asset="partitioning", blocking=True, description="Parts balanced within the configured "
                "tolerance: largest part <= (1 + imbalance) * N / p.")
def parts_balanced(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``partitioning``: balance within ``partition.imbalance``."""
    art, _ = _artifacts(context, strata, "partitioning")
    parts = art.array("parts.npy")
    num_parts = len(art.array("part_ptr.npy")) - 1
    finding = check_balance(parts, num_parts, float(art.params.get("imbalance", 0.05)))
    return _result(context, reporter, art, "parts_balanced", finding)


@dg.asset_check(asset="partitioning", blocking=True, description="Every node in exactly one part; part "
                "sizes sum to N.")
def parts_cover_nodes(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``partitioning``: a partition of the node set."""
    art, ups = _artifacts(context, strata, "partitioning", ["ordering"])
    num_nodes = len(ups["ordering"].array("labels.npy"))
    finding = check_partition(art.array("parts.npy"), art.array("part_ptr.npy"), art.array("part_nodes.npy"),
                              num_nodes)
    return _result(context, reporter, art, "parts_cover_nodes", finding)


@dg.asset_check(asset="samples", blocking=True, description="Every batch's blocks in range: hop h's cols "
                "< hop_counts[h+1], each hop's indptr ends at its edge count, segments tile the files.")
def blocks_in_range(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``samples``: block structure is consistent with the batch index."""
    art, _ = _artifacts(context, strata, "samples")
    idx = _batch_index(art)
    finding = check_sample_blocks(
        art.array("cols.npy"), art.array("indptr.npy"), len(art.array("nodes.npy")), idx["node_offset"],
        idx["indptr_offset"], idx["cols_offset"], idx["hop_counts"], idx["edge_counts"],
    )
    return _result(context, reporter, art, "blocks_in_range", finding)


@dg.asset_check(asset="samples", blocking=True, description="The seeds of each (split, epoch) are exactly "
                "that split's nodes of the ordering, each once.")
def seeds_match_split(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``samples``: seeds come from the requested split."""
    art, ups = _artifacts(context, strata, "samples", ["ordering"])
    idx = _batch_index(art)
    splits = {name: ups["ordering"].array(f"{name}_idx.npy") for name in ("train", "val", "test")}
    finding = check_sample_seeds(art.array("nodes.npy"), idx["node_offset"], idx["num_seeds"], idx["split"],
                                 idx["epoch"], splits)
    return _result(context, reporter, art, "seeds_match_split", finding)


@dg.asset_check(asset="plan", blocking=True, description="Cache rows x row bytes within the GPU and CPU "
                "budgets the configuration asked for.")
def budgets_respected(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``plan``: caches fit their budgets (recomputed from the plan's parameters, not its stats)."""
    art, ups = _artifacts(context, strata, "plan", ["ordering"])
    features = ups["ordering"].array("features.npy")
    row_bytes = int(features.shape[1]) * features.dtype.itemsize
    feature_bytes = int(features.shape[0]) * row_bytes
    budgets = {}
    for tier in ("gpu", "cpu"):
        absolute = art.params.get(f"{tier}_cache_bytes")
        budgets[tier] = int(absolute) if absolute is not None else int(
            float(art.params.get(f"{tier}_cache_fraction", 0.0)) * feature_bytes)
    finding = check_plan_budgets(len(art.array("gpu_nodes.npy")), len(art.array("cpu_nodes.npy")), row_bytes,
                                 budgets["gpu"], budgets["cpu"])
    return _result(context, reporter, art, "budgets_respected", finding)


@dg.asset_check(asset="plan", blocking=True, description="Every node the samples read has a tier >= 0; the "
                "cache node lists are exactly the tier-0/1 nodes and fill their cache rows.")
def sampled_nodes_tiered(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``plan``: every sampled node is in exactly one tier."""
    art, ups = _artifacts(context, strata, "plan", ["samples"])
    finding = check_plan_tiers(art.array("tier.npy"), art.array("slot.npy"), art.array("gpu_nodes.npy"),
                               art.array("cpu_nodes.npy"), ups["samples"].array("nodes.npy"))
    return _result(context, reporter, art, "sampled_nodes_tiered", finding)


@dg.asset_check(asset="packed", blocking=True, description="Every (batch, node) address has the plan's tier "
                "and a slot inside that tier (cache rows or the batch's chunk rows).")
def addresses_in_bounds(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``packed``: address tables point inside their tiers."""
    art, ups = _artifacts(context, strata, "packed", ["samples", "plan"])
    idx = _batch_index(ups["samples"])
    finding = check_packed_addresses(
        art.array("addr_tier.npy"), art.array("addr_slot.npy"), ups["samples"].array("nodes.npy"),
        ups["plan"].array("tier.npy"), idx["node_offset"], idx["hop_counts"][:, -1], art.array("chunk_rows.npy"),
        len(art.array("gpu_cache.npy")), len(art.array("cpu_cache.npy")),
    )
    return _result(context, reporter, art, "addresses_in_bounds", finding)


@dg.asset_check(asset="packed", blocking=True, description="Chunk offsets 4096-aligned; chunks do not "
                "overlap and end inside packed.bin.")
def chunks_aligned(
    context: dg.AssetCheckExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.AssetCheckResult:
    """``packed``: the chunk layout O_DIRECT reads rely on."""
    art, _ = _artifacts(context, strata, "packed")
    cache = art.array("gpu_cache.npy")
    row_bytes = int(cache.shape[1]) * cache.dtype.itemsize
    finding = check_packed_chunks(art.array("chunk_offset.npy"), art.array("chunk_rows.npy"), row_bytes,
                                  art.file("packed.bin").stat().st_size)
    return _result(context, reporter, art, "chunks_aligned", finding)


#: Every check (all blocking).
ALL_CHECKS: list[dg.AssetChecksDefinition] = [
    csr_valid,
    permutation_bijective,
    same_graph,
    parts_cover_nodes,
    parts_balanced,
    blocks_in_range,
    seeds_match_split,
    budgets_respected,
    sampled_nodes_tiered,
    addresses_in_bounds,
    chunks_aligned,
]

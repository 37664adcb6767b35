"""The invariants of the ``pack`` artifact (the policy's on-disk layout): addresses inside their tiers
(``addresses_in_bounds``), aligned non-overlapping chunks and disk caches (``chunks_aligned``), the store within
its disk budget (``disk_budget_respected``) and ginex's changesets replaying their predicted hits
(``changesets_replay``). A policy that laid out no packed store passes the packed-store checks, saying so; the
aligned layout has its own check (:mod:`pipelines.checks.aligned`)."""

from __future__ import annotations

import numpy as np

from pipelines.checks.base import CheckInputs, Finding, StageCheck, _batch_index, _chunks, _first, _segments
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
from storage_kernels.store import Artifact

__all__ = ["ADDRESSES_IN_BOUNDS", "CHANGESETS_REPLAY", "CHUNKS_ALIGNED", "DISK_BUDGET_RESPECTED", "check_changesets",
           "check_disk_budget", "check_disk_caches", "check_packed_addresses", "check_packed_chunks"]



def _policy(art: Artifact) -> str:
    """The policy that laid the pack out (``policy=auto``: the one it chose)."""
    return str(art.stats.get("chosen_policy") or art.stats.get("policy", "?"))

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


def _no_layout(art: Artifact) -> Finding | None:
    """A passing finding that says so when the policy laid nothing out (it reads the feature file or RAM) or
    wrote another layout than the packed store (checked by that layout's own checks)."""
    layout = art.stats.get("layout", "packed")
    if layout == "packed":
        return None
    f = Finding()
    f.facts["layout"] = (f"none (policy {_policy(art)} reads the feature file or RAM)"
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
        f.facts["disk_budget"] = f"none (policy {_policy(art)} does not budget its store)"
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
        f.facts["layout"] = f"{art.stats.get('layout')} (policy {_policy(art)}: no changesets)"
        return f
    samples = c.upstream("sample")
    idx = _batch_index(samples)
    return check_changesets(ChangesetStore(art.path, len(idx["node_offset"])), samples.array("nodes.npy"),
                            idx["node_offset"], idx["hop_counts"][:, -1])


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

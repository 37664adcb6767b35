"""Wrappers of the ``cache/`` kernels: Ginex's Belady-optimal changesets (``belady.c``) and in-place cache
update (``update.c``), the DiskGNN segment window's schedule (``window.c``) and per-batch bookkeeping at
training time (``window_lookup.c``), and the hyperbatch hotset's hits and access counts (``hotset.c``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from storage_kernels.kernels._common import _index_array, _int64_array, _native

# ---- feature-cache changesets (Ginex) ----------------------------------------------------------------------


class Changesets(NamedTuple):
    """The Belady-optimal cache changesets of one superbatch (:func:`belady_changesets`), int64 arrays:
    ``init_ids`` the initial cache; per iteration ``i`` the entries ``update_ptr[i]:update_ptr[i+1]`` of
    ``in_ids`` / ``out_ids`` / ``in_positions`` (the slot of ``out_ids[k]`` receives the batch row at
    ``in_positions[k]``, node ``in_ids[k]``); ``hits[i]`` the batch's nodes found in the cache."""

    init_ids: np.ndarray
    update_ptr: np.ndarray
    in_ids: np.ndarray
    out_ids: np.ndarray
    in_positions: np.ndarray
    hits: np.ndarray


def belady_changesets(batch_ptr, ids, num_nodes: int, num_entries: int) -> Changesets:
    """Simulate a cache of ``num_entries`` nodes over one superbatch under Belady's rule (Ginex).

    Iteration ``i`` reads ``ids[batch_ptr[i]:batch_ptr[i+1]]`` (node ids < ``num_nodes``). The initial cache is
    the first ``num_entries`` distinct nodes in trace order; after each iteration the cache keeps the
    candidates (cached or just read) whose next access is soonest (ties: cached first, then smaller id).
    Single-threaded without the GIL (superbatches may run on several threads). Raises ValueError for a bad
    ``batch_ptr``, IndexError for an id out of range.
    """
    out = _native.belady_changesets(batch_ptr=_index_array("batch_ptr", batch_ptr), ids=_index_array("ids", ids),
                                    num_nodes=int(num_nodes), num_entries=int(num_entries))
    return Changesets(*out)


class WindowSchedule(NamedTuple):
    """The segment window's schedule over one segment disk cache (:func:`window_schedule`), int64 arrays: per
    iteration ``i`` the blocks to read ``read_blocks[read_ptr[i]:read_ptr[i+1]]`` (sorted, relative to the
    cache's start), the rows leaving the buffer ``out_rows[out_ptr[i]:out_ptr[i+1]]`` and those entering it
    ``in_rows[in_ptr[i]:in_ptr[i+1]]`` at buffer slots ``in_slots`` (applied after the iteration, outs first);
    ``hits[i]`` the iteration's rows served by the buffer."""

    read_ptr: np.ndarray
    read_blocks: np.ndarray
    in_ptr: np.ndarray
    in_rows: np.ndarray
    in_slots: np.ndarray
    out_ptr: np.ndarray
    out_rows: np.ndarray
    hits: np.ndarray


def window_schedule(batch_ptr, rows, num_rows: int, row_bytes: int, buffer_rows: int) -> WindowSchedule:
    """Schedule a buffer of ``buffer_rows`` rows over one segment disk cache of ``num_rows`` rows of ``row_bytes``
    bytes (a block-aligned region read in 4096-byte blocks).

    Iteration ``i`` needs ``rows[batch_ptr[i]:batch_ptr[i+1]]``: it reads the blocks of those not in the buffer;
    afterwards the buffer keeps, of its rows and the rows those blocks brought whole, the ``buffer_rows`` with
    the soonest next use (Belady; never-again rows dropped; ties: cached first, then row). Single-threaded
    without the GIL. ValueError for a bad ``batch_ptr`` or sizes, IndexError for a row out of range.
    """
    out = _native.window_schedule(batch_ptr=_index_array("batch_ptr", batch_ptr), rows=_index_array("rows", rows),
                                  num_rows=int(num_rows), row_bytes=int(row_bytes), buffer_rows=int(buffer_rows))
    return WindowSchedule(*out)


def window_split(slots, pos, row_slot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch's rows of a segment disk cache split by the window's table ``row_slot`` (row -> buffer slot, -1
    when not held): ``(held_slots, held_pos, unheld_rows, unheld_pos)``, each in the order of ``slots``, where
    ``pos`` are the rows' positions in the batch. IndexError naming ``k`` for a row outside the table."""
    return _native.window_split(slots=_index_array("slots", slots), pos=_index_array("pos", pos),
                                row_slot=_int64_array("row_slot", row_slot))


def rows_in_blocks(blocks, rows, base: int, row_bytes: int) -> np.ndarray | None:
    """Where rows start in a buffer holding ``blocks`` (sorted, distinct 4096-byte block numbers) back to back:
    row ``r`` spans file bytes ``[base + r * row_bytes, + row_bytes)``; ``None`` when some row has a block not
    in ``blocks``. ValueError for unsorted blocks, IndexError for a negative row."""
    return _native.rows_in_blocks(blocks=_index_array("blocks", blocks), rows=_index_array("rows", rows),
                                  base=int(base), row_bytes=int(row_bytes))


def window_update(row_slot: np.ndarray, slot_row: np.ndarray, out_rows, in_rows, in_slots) -> None:
    """The segment window's changes after a batch, in place on its tables ``row_slot`` (row -> slot) and
    ``slot_row`` (slot -> row), both writable int64 with -1 for none: every out row leaves; then in order
    ``in_rows[k]`` takes slot ``in_slots[k]``, evicting the slot's previous row and freeing any other slot the
    row held. Every index is checked first (IndexError naming the entry; nothing changed then)."""
    _native.window_update(row_slot=row_slot, slot_row=slot_row, out_rows=_index_array("out_rows", out_rows),
                          in_rows=_index_array("in_rows", in_rows), in_slots=_index_array("in_slots", in_slots))


def cache_update(cache: np.ndarray, address_table: np.ndarray, batch_rows: np.ndarray, in_ids, out_ids,
                 in_positions, num_threads: int = 0) -> None:
    """Ginex's in-place cache update: for every ``k`` the slot of ``out_ids[k]`` (``address_table``) receives
    ``batch_rows[in_positions[k]]``; ``address_table[in_ids[k]]`` becomes that slot and
    ``address_table[out_ids[k]]`` -1.

    ``cache`` (K, F) and ``address_table`` (N,) int64, or int32 for ``K < 2**31`` (half the bytes a node), are
    updated in place (writable, C-contiguous);
    ``batch_rows`` (n, F) has the cache's dtype. Everything is checked first (ValueError / IndexError naming
    the entry; nothing changed then).
    """
    if not (isinstance(batch_rows, np.ndarray) and batch_rows.ndim == 2 and batch_rows.flags.c_contiguous):
        batch_rows = np.ascontiguousarray(batch_rows)
    _native.cache_update(cache=cache, address_table=address_table, batch_rows=batch_rows,
                         in_ids=_index_array("in_ids", in_ids), out_ids=_index_array("out_ids", out_ids),
                         in_positions=_index_array("in_positions", in_positions), num_threads=num_threads)


# ---- the hyperbatch hotset's bookkeeping (the plan's simulation of trainer.features.hotset) ---------------------


def count_hits(ids, hot: np.ndarray, counts: np.ndarray) -> int:
    """One chunk of an access trace against a hotset: ``counts[ids[k]] += 1.0`` for every ``k``; returns how many
    ``ids[k]`` are hot.

    ``hot`` (N,) bool is the hotset's membership; ``counts`` (N,) float64, updated in place, the access counters
    (the hotset's decayed counts). Every id is checked first (IndexError naming the first outside ``[0, N)``;
    ``counts`` unchanged then). Without the GIL.
    """
    return _native.count_hits(ids=_index_array("ids", ids), hot=hot, counts=counts)

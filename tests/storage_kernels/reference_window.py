"""Pure Python twin of ``cache/window.c`` (the segment window's schedule), written plainly from its rule."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

BLOCK = 4096


def row_blocks(r: int, row_bytes: int) -> range:
    """The 4096-byte blocks holding row ``r`` of a block-aligned region."""
    return range(r * row_bytes // BLOCK, ((r + 1) * row_bytes - 1) // BLOCK + 1)


def window_schedule_ref(batches: list[np.ndarray], num_rows: int, row_bytes: int, buffer_rows: int):
    """``(read_ptr, read_blocks, in_ptr, in_rows, in_slots, out_ptr, out_rows, hits, states)``; ``states[i]`` is
    the buffer (a set of rows) before iteration ``i`` (``states[S]`` after the last)."""
    k = min(buffer_rows, num_rows)
    uses: dict[int, list[int]] = defaultdict(list)
    for i, batch in enumerate(batches):
        for r in sorted({int(x) for x in batch}):
            uses[r].append(i)

    def next_use(r: int, i: int) -> float:
        later = [j for j in uses[r] if j > i]
        return later[0] if later else float("inf")

    slots: list[int | None] = [None] * k
    read_ptr, read_blocks, in_ptr, in_rows, in_slots, out_ptr, out_rows, hits = [0], [], [0], [], [], [0], [], []
    states = [set()]
    for i, batch in enumerate(batches):
        cached = {r for r in slots if r is not None}
        need = {int(x) for x in batch}
        hits.append(len(need & cached))
        blocks = sorted({b for r in need - cached for b in row_blocks(r, row_bytes)})
        read_blocks += blocks
        read_ptr.append(len(read_blocks))
        got = set(blocks)
        arrived = [r for r in range(num_rows)
                   if r not in cached and all(b in got for b in row_blocks(r, row_bytes))]
        cands = [(next_use(r, i), 0, r) for r in cached] + [(next_use(r, i), 1, r) for r in arrived]
        keep = {r for key, _, r in sorted(c for c in cands if c[0] != float("inf"))[:k]}
        for s in range(k):
            if slots[s] is not None and slots[s] not in keep:
                out_rows.append(slots[s])
                slots[s] = None
        for r in sorted(keep - cached):
            s = slots.index(None)
            slots[s] = r
            in_rows.append(r)
            in_slots.append(s)
        in_ptr.append(len(in_rows))
        out_ptr.append(len(out_rows))
        states.append({r for r in slots if r is not None})
    as64 = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return (as64(read_ptr), as64(read_blocks), as64(in_ptr), as64(in_rows), as64(in_slots), as64(out_ptr),
            as64(out_rows), as64(hits), states)


# ---- window_lookup.c: the window's per-batch bookkeeping at training time ----------------------------------


def window_split_ref(slots: np.ndarray, pos: np.ndarray, row_slot: np.ndarray):
    """``(held_slots, held_pos, unheld_rows, unheld_pos)``: the NumPy form the reader used before the kernel."""
    where = row_slot[slots]
    held = where >= 0
    return where[held], pos[held], slots[~held], pos[~held]


def rows_in_blocks_ref(blocks: np.ndarray, rows: np.ndarray, base: int, row_bytes: int) -> np.ndarray | None:
    """Row by row: every block of the row must be in ``blocks``; the row starts where its first block landed."""
    index = {int(b): k for k, b in enumerate(blocks)}
    at = []
    for r in rows:
        off = base + int(r) * row_bytes
        first, last = off // BLOCK, (off + row_bytes - 1) // BLOCK
        if any(b not in index for b in range(first, last + 1)):
            return None
        at.append(index[first] * BLOCK + off % BLOCK)
    return np.asarray(at, dtype=np.int64)


def window_update_ref(row_slot: np.ndarray, slot_row: np.ndarray, out_rows, in_rows, in_slots) -> None:
    """The rule in plain steps, in place."""
    for r in out_rows:
        if row_slot[r] >= 0:
            slot_row[row_slot[r]] = -1
        row_slot[r] = -1
    for r, s in zip(in_rows, in_slots, strict=True):
        if slot_row[s] >= 0:
            row_slot[slot_row[s]] = -1
        if row_slot[r] >= 0:
            slot_row[row_slot[r]] = -1
        slot_row[s] = r
        row_slot[r] = s

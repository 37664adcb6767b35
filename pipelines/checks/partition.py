"""The invariants of the ``partition`` artifact: every node in exactly one part (``parts_cover_nodes``) and
parts within the configured imbalance (``parts_balanced``)."""

from __future__ import annotations

import numpy as np

from pipelines.checks.base import CheckInputs, Finding, StageCheck, _check_range, _chunks, _covers_once, _first

__all__ = ["PARTS_BALANCED", "PARTS_COVER_NODES", "check_balance", "check_partition"]


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


def _parts_cover_nodes(c: CheckInputs) -> Finding:
    art = c.artifact
    num_nodes = len(c.upstream("reorder").array("labels.npy"))
    return check_partition(art.array("parts.npy"), art.array("part_ptr.npy"), art.array("part_nodes.npy"),
                           num_nodes)


def _parts_balanced(c: CheckInputs) -> Finding:
    art = c.artifact
    num_parts = len(art.array("part_ptr.npy")) - 1
    return check_balance(art.array("parts.npy"), num_parts, float(art.params.get("imbalance", 0.05)))


PARTS_COVER_NODES = StageCheck("parts_cover_nodes", "Every node in exactly one part; part sizes sum to N.",
                               _parts_cover_nodes)
PARTS_BALANCED = StageCheck("parts_balanced", "Parts balanced within the configured tolerance: largest part <= "
                            "(1 + imbalance) * N / p.", _parts_balanced)

"""Full-neighbourhood layer-wise inference for evaluation (``train.eval_mode=layerwise``), streamed in bounded
memory.

Sampled evaluation answers with a sampled neighbourhood; the exact answer aggregates every neighbour at every
layer. Layer-wise inference computes it one layer at a time, and only for the nodes the answer depends on: the
last layer for the nodes asked about, each earlier layer for the next one's targets and their in-neighbours
(the frontier, grown backwards from the asked nodes).

Each layer is a push computation (:mod:`trainer.layerwise_forms`): a destination's output is a finish over the
sum of its in-neighbours' messages, and a message depends on one source row. So a layer runs over intervals of
its destinations (as many as their accumulators and in-edges allow in the memory budget), and each interval
reads its rows in source order, in windows: each window reads only the rows the interval's edges need (sorted,
so the reads are block-merged and move forward through the file), turns them into messages and adds them into
the accumulators. The input of layer 0 is the feature file (aligned direct reads,
:class:`trainer.features.FileRows`; float16 files decoded), of later layers the previous layer's output table
(in RAM when small, else an aligned ``.npy`` scratch file read the same way). A table is written once,
sequentially, in destination order.

One interval reads the input once. Many intervals reading it each would read ``intervals x input`` bytes (a
reordered graph's random edges put sources of every interval in nearly every block), so with more than one
interval and the input on disk the layer's sources are staged (:mod:`trainer.layerwise_staging`): for a group of
up to :data:`~trainer.layerwise_staging.STAGE_GROUP` intervals, each interval's distinct source positions go to
a small ids file, ONE forward pass over the input appends each interval's rows to its own rows file (the
input's storage dtype: bit-identical rows), and each interval then reads its rows file forward. A layer reads
``groups x input + 2 x staged`` bytes (``staged``: the intervals' distinct sources, about ``N`` plus the edges
between intervals, written once and read once) and the scratch disk holds one group's staged rows at most.
When a layer's messages are narrower than its input rows (``4 * acc_dim`` bytes against the row's storage: a
last layer of a few classes over a float32 hidden table) its messages are staged instead: the pass computes each
window's messages once, for every row an interval of the group needs, appends each interval's to its file and
the own terms of its targets to an own file (``own_dim`` float32 each); such an interval reads no input row, it
pushes its staged messages and adds its own terms (``staged`` in the report: ``rows`` or ``messages``). A group
is staged only when that moves fewer bytes than its intervals reading the input each (the staged rows, or
messages and own terms, against the input blocks the intervals need; known once its sources are listed: few
intervals whose sources are most of the input read it directly, as before).

The memory used is ``LayerwiseGraph.memory_bytes``: half for an interval's accumulators and edges (its staged source
ids among them, 4 bytes each, int32 below 2**31 sources: within :data:`EDGE_BYTES`; while a group's sources are
listed, no interval is in hand and the half holds a byte per source position, a range of them at a time), an eighth
for two read windows -- the next window's rows are read on a thread while the current one's are computed with; the
staging pass holds two windows of input rows and one interval's copy of some of them in it, or, staging messages,
two windows of input rows, the window's decoded rows, its messages (twice: one interval's copy) and own terms
(twice: a temporary), the window sized so -- and at most an eighth for each layer table kept in RAM. Besides the
budget: a byte per node for the frontier and, for GCN, 8 bytes per node of out-degrees (counted once per graph:
:attr:`LayerwiseGraph.out_degree`) and, for GAT, the attention scores of a layer's sources (``4 * heads`` bytes
each; its score pass reads the input once more, and the weights index the scores by source position in the layer,
not in the staged rows). The result equals the model's forward on the full-neighbourhood blocks up to float rounding
(tests compare to 1e-5).

:func:`layerwise_logits` returns the asked nodes' logits (the last table in RAM); :func:`layerwise_stream` hands
the last layer out interval by interval instead (with each node's input row of the last layer, if asked), so
scoring every node (``strata predict``) writes its rows away as they come. Asked for every node, each layer's
frontier is the whole graph: besides the budget, a pass then holds one int64 array of ``N`` entries, the node
ids (8 bytes a node; their positions are the ids themselves); the running sum of the interval costs is built a
piece of targets at a time (:func:`~trainer.layerwise_graph.interval_cuts`).

A hidden layer's table is written folded into the next layer's projections where they are narrower
(:func:`trainer.layerwise_forms.fold`: GraphSAGE's neighbour and own projections, GCN's ``lin``), so the next
layer reads and stages ``2 x classes`` or ``classes`` float32 a node, not ``hidden_dim``. Unweighted pushes
(GraphSAGE, GCN) add the messages into the accumulators in C (``kernels.csr_sum_backward`` over the window's
message rows: no gathered ``(edges, acc_dim)`` copy).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, ArrayWriter, read_header
from storage_kernels.store import owned_tmp_name
from trainer.features.file import FileRows
from trainer.features.half import decode_half_words
from trainer.gcn import GCNConv
from trainer.layerwise_forms import Fold, LayerForm, fold, layer_form
from trainer.layerwise_graph import (
    EDGE_BYTES,
    EDGE_PIECE,
    WIDE_EDGE_BYTES,
    LayerwiseGraph,
    by_source,
    in_degrees,
    interval_cuts,
    interval_sources,
    packable,
    positions_in,
    with_neighbours,
)
from trainer.layerwise_staging import StagedSources, disk_cap, group_size, read_ahead
from trainer.models import NO_GRAD_MESSAGE_ELEMENTS
from trainer.native_ops import native_applies

__all__ = ["LayerwiseGraph", "LayerwiseRows", "layerwise_accuracies", "layerwise_accuracy", "layerwise_logits",
           "layerwise_stream"]

log = logging.getLogger(__name__)

#: GAT's edge softmax indexes by int64 destinations: a copy of them while an interval's weights are computed.
SOFTMAX_INDEX_BYTES = 8


# ---------------------------------------------------------------------------------------------- the tables
class _Rows:
    """A layer's input rows by position: the feature file (positions map to node ids), a table on disk, or a
    table in RAM. ``read(positions)`` (sorted) -> float32 (len, dim); ``bytes_read`` counts the disk reads."""

    def __init__(self, table: np.ndarray | None = None, file: FileRows | None = None,
                 ids: np.ndarray | None = None, decode_dim: int = 0, num_threads: int = 0,
                 scratch: bool = False) -> None:
        self.table, self.file, self.ids, self.decode_dim = table, file, ids, decode_dim
        self.num_threads = num_threads
        self.scratch = scratch  # the file is a scratch table: removed on close (a layer's input is read once)
        self.bytes_read = 0

    def read(self, positions: np.ndarray) -> torch.Tensor:
        if self.table is not None:
            return torch.from_numpy(kernels.gather_rows(self.table, positions, num_threads=self.num_threads))
        return self.decode(self.words(positions))

    def decode(self, words: np.ndarray) -> torch.Tensor:
        """The file's stored rows (:meth:`words`) as float32 values (float16 pairs decoded)."""
        x = torch.from_numpy(words)
        return decode_half_words(x, self.decode_dim) if self.decode_dim else x

    def words(self, positions: np.ndarray) -> np.ndarray:
        """The file's rows at ``positions`` (sorted) as stored: float32 words (float16 pairs undecoded)."""
        assert self.file is not None
        rows = positions if self.ids is None else self.ids[positions]
        words = np.empty((len(rows), self.file.feature_dim), dtype=np.float32)
        self.bytes_read += self.file.read(rows, words, merge=True)
        return words

    def staged(self, path: Path, rows: bool = True) -> _Rows:
        """Rows from ``path``, an interval's staged file read by position: this input's rows (decoded alike), or
        float32 values as they are (``rows`` False: staged messages or own terms)."""
        assert self.file is not None
        file = FileRows(path, num_threads=self.num_threads, max_buffer_bytes=self.file.max_buffer_bytes)
        return _Rows(file=file, decode_dim=self.decode_dim if rows else 0, num_threads=self.num_threads)

    def direct_bytes(self, positions: np.ndarray) -> int:
        """Bytes of the file's blocks holding the rows at ``positions``: what reading them costs."""
        assert self.file is not None
        rows = np.asarray(positions if self.ids is None else self.ids[positions], dtype=np.int64)
        off = self.file.data_offset + rows * self.file.row_bytes  # ascending, the rows distinct: a row's last
        first, last = off // DATA_ALIGN, (off + self.file.row_bytes - 1) // DATA_ALIGN  # block <= the next's first
        return DATA_ALIGN * (int((last - first + 1).sum()) - int(np.count_nonzero(first[1:] == last[:-1])))

    def storage(self) -> tuple[np.dtype, int]:
        """The file's row storage: dtype and values per row (a staged copy keeps them: bit-identical rows)."""
        assert self.file is not None
        return (np.dtype(np.float16), 2 * self.file.feature_dim) if self.file.half else (np.dtype(np.float32),
                                                                                          self.file.feature_dim)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            if self.scratch:
                self.file.path.unlink(missing_ok=True)


class _Table:
    """A layer's output, written once in destination order: in RAM, or an aligned ``.npy`` in ``scratch``."""

    def __init__(self, rows: int, cols: int, in_ram: bool, scratch: Path, buffer_bytes: int) -> None:
        self.buffer_bytes = buffer_bytes
        self.array = np.empty((rows, cols), dtype=np.float32) if in_ram else None
        self.writer = None if in_ram else ArrayWriter(
            tempfile.NamedTemporaryFile(dir=scratch, suffix=".npy", delete=False).name, "float32", cols, rows)
        self.rows = 0

    def append(self, y: np.ndarray) -> None:
        if self.array is not None:
            self.array[self.rows : self.rows + len(y)] = y
        else:
            assert self.writer is not None
            self.writer.append(y)
        self.rows += len(y)

    def abort(self) -> None:
        if self.writer is not None and not self.writer.closed:
            self.writer.abort()

    def as_input(self, num_threads: int) -> _Rows:
        if self.array is not None:
            return _Rows(table=self.array, num_threads=num_threads)
        assert self.writer is not None
        self.writer.close(checksum=False)
        return _Rows(file=FileRows(self.writer.path, num_threads=num_threads, max_buffer_bytes=self.buffer_bytes),
                     num_threads=num_threads, scratch=True)


# ---------------------------------------------------------------------------------------------- a layer
@dataclass
class _Budget:
    """The shares of ``memory_bytes`` (see the module docstring)."""

    interval: int
    window: int
    table: int

    @classmethod
    def of(cls, memory_bytes: int) -> _Budget:
        m = max(int(memory_bytes), 0)
        return cls(interval=m // 2, window=m // 8, table=m // 8)


def _push(acc: torch.Tensor, messages: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
          weights: torch.Tensor | None, step: int) -> None:
    """``acc[dst[k]] += weights[k] * messages[src[k]]`` (per head when ``weights`` is (E, heads)), ``src``
    ascending (the edges in source order). Unweighted float32 on the CPU, in C (:func:`kernels.csr_sum_backward`
    over the messages' rows: no gathered (E, acc_dim) copy, columns split over threads, each destination's
    additions in edge order as index_add's); else in slices of ``step`` edges."""
    if weights is None and native_applies(acc, messages):
        indptr = np.zeros(len(messages) + 1, dtype=np.int64)  # the edges of message row r: indptr[r]:indptr[r+1]
        np.cumsum(np.bincount(src.numpy(), minlength=len(messages)), out=indptr[1:])
        kernels.csr_sum_backward(indptr, dst.numpy(), messages.contiguous().numpy(), acc.numpy(),
                                 num_threads=max(torch.get_num_threads(), 1))
        return
    for lo in range(0, len(src), step):
        msg = messages.index_select(0, src[lo : lo + step])  # (e, acc_dim)
        if weights is not None:
            w = weights[lo : lo + step]  # (e, H)
            msg = (msg.reshape(len(w), w.shape[1], -1) * w.unsqueeze(-1)).reshape(len(w), -1)
        acc.index_add_(0, dst[lo : lo + step], msg)


def _windows(count: int, size: int) -> range:
    return range(0, count, max(size, 1))


def _attention_scores(form: LayerForm, inp: _Rows, sources: np.ndarray, target_pos: np.ndarray, window: int,
                      device: torch.device, reader: ThreadPoolExecutor) -> tuple[torch.Tensor, torch.Tensor]:
    """GAT's first pass over the input (a window read ahead): every source's score as a source (|S|, H) and
    every target's as a destination (|T|, H)."""
    score_src = torch.empty(len(sources), form.heads, device=device)
    score_dst = torch.empty(len(target_pos), form.heads, device=device)
    plans = ((p0, min(p0 + window, len(sources)), np.arange(p0, min(p0 + window, len(sources))))
             for p0 in _windows(len(sources), window))
    for (p0, p1, _), rows in read_ahead(plans, inp.read, reader):
        as_src, as_dst = form.scores(rows.to(device))  # type: ignore[attr-defined]
        score_src[p0:p1] = as_src
        k0, k1 = np.searchsorted(target_pos, [p0, p1])
        score_dst[k0:k1] = as_dst[torch.from_numpy(target_pos[k0:k1] - p0).to(device)]
    return score_src, score_dst


def _window_messages(form: LayerForm, inp: _Rows, sources: np.ndarray, device: torch.device, need: np.ndarray,
                     words: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
    """A staging window's messages: ``inp``'s rows at positions ``need`` (sorted), stored as ``words``, decoded ->
    their messages ``(len(need), acc_dim)`` float32, and the decoded rows (on ``device``) for :func:`_window_own`."""
    x = inp.decode(words).to(device)
    messages = form.messages(x, torch.from_numpy(sources[need]))
    return np.ascontiguousarray(messages.float().cpu().numpy()), x


def _window_own(form: LayerForm, graph: LayerwiseGraph, targets: np.ndarray, starts: Sequence[int],
                device: torch.device, k: int, c0: int, c1: int, x: torch.Tensor, at: np.ndarray) -> np.ndarray:
    """A staging window's own terms of interval ``k``'s targets ``c0:c1`` (``targets[starts[k] + c0:...]``),
    their decoded rows ``x[at]`` -> ``(c1 - c0, own_dim)`` float32."""
    degree = torch.from_numpy(in_degrees(graph, targets[starts[k] + c0 : starts[k] + c1])).to(device)
    term = form.own(x.index_select(0, torch.from_numpy(at).to(device)), degree)
    return np.ascontiguousarray(term.float().cpu().numpy())


def _run_layer(form: LayerForm, last: bool, inp: _Rows, sources: np.ndarray, targets: np.ndarray,
               graph: LayerwiseGraph, budget: _Budget, device: torch.device, scratch: Path,
               stats: dict[str, int | str], then: Fold | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
    """Layer outputs of ``targets`` (sorted node ids, a subset of ``sources``), one interval at a time:
    ``(a, b, rows)`` with the float32 outputs of ``targets[a:b]`` (ReLU applied unless ``last``; then projected
    by ``then``, the next layer's :class:`~trainer.layerwise_forms.Fold`, when given), reading the
    input rows of ``sources`` (sorted node ids) from ``inp``, a window ahead on a reader thread. No read is in
    flight while an interval's rows are handed out. With more than one interval and the input on disk, the
    intervals' rows (or their narrower messages) are staged in ``scratch`` a group at a time
    (:mod:`trainer.layerwise_staging`); ``stats`` receives ``groups`` (the staging passes over the input),
    ``staged`` (``rows`` or ``messages``), ``bytes_staged`` (written) and ``bytes_read_staged`` (read back)."""
    target_pos = positions_in(sources, targets, graph)  # (|T|,) sorted: targets are sources too
    # staged, a row's messages cost 4 * acc_dim bytes: staged instead of the input rows when narrower
    stats["staged"] = "messages" if inp.file is not None and 4 * form.acc_dim < inp.file.row_bytes else "rows"
    row_cost = 4 * (form.in_dim + form.acc_dim + form.own_dim) + 32  # a window row: input, message, indexes
    window = max(graph.chunk_nodes, budget.window // (2 * row_cost))  # two windows in hand: one read ahead
    step = max(min(NO_GRAD_MESSAGE_ELEMENTS, budget.window // 4) // form.acc_dim, graph.chunk_nodes, 1)  # edges
    edge_cost = (EDGE_BYTES if packable(graph, len(targets)) else WIDE_EDGE_BYTES) + 12 * form.heads
    if form.heads:
        edge_cost += SOFTMAX_INDEX_BYTES
    kept_own = 0 if form.own_in_acc else form.own_dim
    intervals = interval_cuts(graph, targets, 4 * (form.acc_dim + kept_own), edge_cost, form.self_loops,
                               budget.interval, graph.chunk_nodes)
    per_group = group_size(len(intervals)) if inp.file is not None else 0  # a table in RAM is re-read for free

    def plans(pos: np.ndarray, mine: np.ndarray, count: int) -> Iterator[tuple[int, int, int, int, np.ndarray]]:
        """Each read window's edges ``[e0, e1)`` (``pos``: their sources' positions among ``count`` input rows),
        own rows ``[k0, k1)`` (``mine``: the interval's targets' positions) and the input rows it needs."""
        wanted = np.zeros(window, dtype=bool)  # the window's rows some edge or own term needs
        for p0 in _windows(count, window):
            p1 = min(p0 + window, count)
            # bounds of pos's own dtype: a list of Python ints would cast the whole of pos at every window
            e0, e1 = np.searchsorted(pos, np.array([p0, p1], dtype=pos.dtype))
            k0, k1 = np.searchsorted(mine, [p0, p1])
            if e0 == e1 and (k0 == k1 or not form.own_dim):
                continue
            wanted[:] = False  # a mark per row, not a sort: the window is small, its edges many
            wanted[pos[e0:e1] - p0] = True
            if form.own_dim:
                wanted[mine[k0:k1] - p0] = True
            yield int(e0), int(e1), int(k0), int(k1), np.flatnonzero(wanted[: p1 - p0]) + p0

    def interval(a: int, b: int, rows_in: _Rows, ids: np.ndarray | None, reader: ThreadPoolExecutor,
                 scores: tuple[torch.Tensor, torch.Tensor] | None, as_messages: bool = False,
                 staged_own: _Rows | None = None) -> np.ndarray:
        """The outputs of ``targets[a:b]``, their input rows read from ``rows_in``: the input itself (``ids``
        None: by position in ``sources``) or the interval's staged rows (position ``k`` holds ``ids[k]``) -- or,
        ``as_messages``, its staged messages (``rows_in``) and own terms (``staged_own``, one per target)."""
        pos, dst = by_source(graph, targets[a:b], form.self_loops, sources)  # source order: read forward
        dst_t = torch.from_numpy(dst).to(device)
        del dst
        weights = None
        if scores is not None:  # the scores are indexed by position in `sources`
            weights = form.weights(scores[0][torch.from_numpy(pos).to(device)], scores[1][a:b],  # type: ignore[attr-defined]
                                   dst_t.long())  # (E, H); the softmax's scatter takes int64 indexes
        if ids is None:
            mine, count = target_pos[a:b], len(sources)  # the interval's own rows, sorted
        else:  # positions among the staged rows, in place (still ascending)
            for lo in range(0, len(pos), EDGE_PIECE):
                pos[lo : lo + EDGE_PIECE] = np.searchsorted(ids, pos[lo : lo + EDGE_PIECE])
            mine = np.searchsorted(ids, target_pos[a:b]) if form.own_dim and not as_messages else target_pos[:0]
            count = len(ids)
        degree = torch.from_numpy(in_degrees(graph, targets[a:b])).to(device)  # (D,)
        acc = torch.zeros(b - a, form.acc_dim, device=device)
        own = torch.empty(b - a, kept_own, device=device)

        def add_own(k0: int, k1: int, term: torch.Tensor) -> None:
            if form.own_in_acc:
                acc[k0:k1] += term
            else:
                own[k0:k1] = term

        for (e0, e1, k0, k1, need), rows in read_ahead(plans(pos, mine, count), rows_in.read, reader):
            x = rows.to(device)  # (len(need), in_dim), or (len(need), acc_dim) staged messages
            if e1 > e0:
                messages = x if as_messages else form.messages(x, torch.from_numpy(sources[need if ids is None
                                                                                           else ids[need]]))
                src_t = torch.from_numpy(np.searchsorted(need, pos[e0:e1])).to(device)
                _push(acc, messages, src_t, dst_t[e0:e1], None if weights is None else weights[e0:e1], step)
            if k1 > k0 and form.own_dim:
                at = torch.from_numpy(np.searchsorted(need, mine[k0:k1])).to(device)
                add_own(k0, k1, form.own(x.index_select(0, at), degree[k0:k1]))
        if staged_own is not None and form.own_dim:  # the targets' own terms, in order: read forward
            for k0 in _windows(b - a, window):
                k1 = min(k0 + window, b - a)
                add_own(k0, k1, staged_own.read(np.arange(k0, k1)).to(device))
        y = form.finish(acc, own, degree)
        y = y if last else F.relu(y)
        return (then.project(y) if then is not None else y).float().cpu().numpy()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-layerwise-read") as reader:
        scores = _attention_scores(form, inp, sources, target_pos, window, device, reader) if form.heads else None
        if not per_group:
            for a, b in intervals:
                yield a, b, interval(a, b, inp, None, reader, scores)
            return
        assert inp.file is not None
        as_messages = stats["staged"] == "messages"
        dtype, cols = (np.dtype(np.float32), form.acc_dim) if as_messages else inp.storage()
        own_cols = form.own_dim if as_messages else 0
        # the pass holds two windows of input rows (one read ahead) and one interval's copy of some; staging
        # messages, also the window's decoded rows, its messages and own terms (and their temporaries)
        stage_row = 3 * inp.file.row_bytes + 32
        if as_messages:
            stage_row = 2 * inp.file.row_bytes + 4 * (form.in_dim + 2 * form.acc_dim + 2 * form.own_dim) + 32
        stage_window = max(graph.chunk_nodes, budget.window // stage_row)
        span = max(budget.interval, graph.chunk_nodes)  # positions marked at once while sources are listed
        g = 0
        while g < len(intervals):
            group: list[tuple[int, int]] = []
            stage = StagedSources(scratch, len(sources), dtype, cols, own_cols)
            try:
                cap = disk_cap(scratch)  # a group's staged files take at most this much disk
                while g < len(intervals) and len(group) < per_group and (not group or stage.data_bytes < cap):
                    a, b = intervals[g]
                    stage.add(interval_sources(graph, targets[a:b], sources, span, form.self_loops,
                                               bool(form.own_dim), split=as_messages), inp.direct_bytes,
                              target_pos[a:b] if own_cols else None)
                    group.append((a, b))
                    g += 1
                if not stage.pays(inp.file.num_rows * inp.file.row_bytes):  # few intervals, each needing much
                    stage.close()
                    for a, b in group:
                        yield a, b, interval(a, b, inp, None, reader, scores)
                    continue
                if as_messages:
                    stage.fill(inp.words, stage_window, reader, functools.partial(_window_messages, form, inp,
                                                                                  sources, device),
                               functools.partial(_window_own, form, graph, targets, [a for a, _ in group], device))
                else:
                    stage.fill(inp.words, stage_window, reader)
                stats["groups"] += 1
                for k, (a, b) in enumerate(group):
                    ids = stage.ids(k)
                    rows_in = inp.staged(stage.rows_path(k), rows=not as_messages)
                    own_in = inp.staged(stage.own_path(k), rows=False) if own_cols else None
                    try:
                        y = interval(a, b, rows_in, ids, reader, scores, as_messages, own_in)
                    finally:
                        for staged_in in (rows_in, own_in):
                            if staged_in is not None:
                                staged_in.close()
                                stats["bytes_read_staged"] += staged_in.bytes_read
                    stage.remove(k)  # the disk holds one group's staged rows at most
                    del ids
                    yield a, b, y
            finally:
                stats["bytes_staged"] += stage.bytes_written
                stats["bytes_read_staged"] += stage.bytes_read
                stage.close()


# ---------------------------------------------------------------------------------------------- inference
@dataclass(frozen=True)
class LayerwiseRows:
    """One interval of the last layer (:func:`layerwise_stream`): the nodes ``nodes`` (sorted ids, ascending from
    one interval to the next), their ``logits`` (``(len(nodes), out_dim)`` float32) and, when asked for, their
    ``hidden`` rows: the last layer's input (``(len(nodes), in_dim of the last layer)`` float32, after the ReLU
    of the layer before; the input features for a one-layer model)."""

    nodes: np.ndarray
    logits: np.ndarray
    hidden: np.ndarray | None = None


def _check_nodes(graph: LayerwiseGraph, nodes: np.ndarray) -> None:
    if len(nodes) and (int(nodes.min()) < 0 or int(nodes.max()) >= graph.num_nodes):
        bad = int(np.flatnonzero((nodes < 0) | (nodes >= graph.num_nodes))[0])
        raise IndexError(f"'nodes' expected ids < {graph.num_nodes} (got {int(nodes[bad])} at {bad})")


@torch.no_grad()
def layerwise_stream(model: torch.nn.Module, graph: LayerwiseGraph, nodes: np.ndarray | None = None,
                     device: torch.device | str = "cpu", hidden: bool = False,
                     report: list[dict[str, int]] | None = None) -> Iterator[LayerwiseRows]:
    """Full-neighbourhood logits of ``nodes`` (default: every node of the graph), handed out one interval of the
    last layer at a time (:class:`LayerwiseRows`, in ascending node id), so the caller writes them away and
    never holds the ``N x out_dim`` result: the memory is that of :func:`layerwise_logits` less the last table.
    ``hidden`` adds each node's input row of the last layer (read back from the previous layer's table).
    ``model`` is in eval mode until the iterator is exhausted or closed; ``report`` as for
    :func:`layerwise_logits`."""
    device = torch.device(device)
    layers = getattr(model, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        raise ValueError(f"'train.eval_mode' layerwise expected a model with per-layer modules in 'layers' "
                         f"(graphsage, gcn, gat) (got {type(model).__name__})")
    num_layers = len(layers)
    out_degree = graph.out_degree if any(isinstance(layer, GCNConv) for layer in layers) else None
    forms = [layer_form(layer, out_degree) for layer in layers]
    # a layer reading a table reads it pre-projected where that is narrower (not the last when its input rows
    # are asked for): folds[i] is applied by layer i - 1 to its outputs
    folds: list[Fold | None] = [fold(f) if 0 < i and not (hidden and i == num_layers - 1) else None
                                for i, f in enumerate(forms)]
    forms = [f.form if f is not None else form for f, form in zip(folds, forms, strict=True)]
    budget = _Budget.of(graph.memory_bytes)
    # [S, T_0, ..., T_{L-1}]: layer i reads the rows of targets[i] and computes those of targets[i + 1]; the
    # last is the asked nodes, each earlier one the next with its in-neighbours, the first read from the file
    if nodes is None:  # every node: every layer's frontier is the whole graph
        targets = [np.arange(graph.num_nodes, dtype=np.int64)] * (num_layers + 1)
    else:
        nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        _check_nodes(graph, nodes)
        max_edges = max(budget.interval // EDGE_BYTES, 1)
        targets = [np.unique(nodes)]
        for _ in range(num_layers):
            targets.insert(0, with_neighbours(graph, targets[0], max_edges))
    half = read_header(graph.features_path).dtype == np.float16  # rows of 4-byte words: decode them
    file = FileRows(graph.features_path, num_threads=graph.num_threads,
                    max_buffer_bytes=max(budget.window, 1 << 20))
    inp = _Rows(file=file, ids=targets[0], decode_dim=graph.feature_dim if half else 0,
                num_threads=graph.num_threads)
    was_training = model.training
    model.eval()
    # named as this process's scratch: in a store's temp dir, cleanup_tmp removes it if the process is killed
    scratch = Path(graph.scratch_dir or tempfile.gettempdir()) / owned_tmp_name("layerwise")
    scratch.mkdir(parents=True)
    try:
        try:
            for i, form in enumerate(forms):
                sources, mine = targets[i], targets[i + 1]
                intervals = 0
                stats: dict[str, int | str] = {"groups": 0, "staged": "rows", "bytes_staged": 0, "bytes_read_staged": 0,
                                               "input_cols": form.in_dim, "folded": int(folds[i] is not None)}
                then = folds[i + 1] if i < num_layers - 1 else None
                run = functools.partial(_run_layer, form, i == num_layers - 1, inp, sources, mine, graph, budget,
                                        device, scratch, stats, then)
                if i < num_layers - 1:
                    cols = then.width if then is not None else form.out_dim
                    out = _Table(len(mine), cols, len(mine) * cols * 4 <= budget.table, Path(scratch),
                                 max(budget.window, 1 << 20))
                    try:
                        for _, _, y in run():
                            out.append(y)
                            intervals += 1
                    except BaseException:
                        out.abort()
                        raise
                else:
                    own = positions_in(sources, mine, graph) if hidden else None  # the targets' input rows
                    for a, b, y in run():
                        h = inp.read(own[a:b]).numpy() if own is not None else None
                        intervals += 1
                        yield LayerwiseRows(mine[a:b], y, h)
                step = {"targets": len(mine), "sources": len(sources), "intervals": intervals,
                        "bytes_read": inp.bytes_read + stats["bytes_read_staged"], **stats}
                log.info("layer-wise layer %d: %s", i, step)
                if report is not None:
                    report.append(step)
                if i < num_layers - 1:
                    inp.close()
                    inp = out.as_input(graph.num_threads)
        finally:
            inp.close()
            model.train(was_training)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def layerwise_logits(model: torch.nn.Module, graph: LayerwiseGraph, nodes: np.ndarray,
                     device: torch.device | str = "cpu", report: list[dict[str, int]] | None = None) -> np.ndarray:
    """Full-neighbourhood logits of ``nodes`` (``(len(nodes), out_dim)`` float32), computed layer by layer over
    the nodes they depend on (see the module docstring). ``model`` is switched to eval mode and back.
    ``report``, when given, receives one dict per layer: ``targets``, ``sources``, ``intervals``, ``bytes_read``
    (every read of the layer's input -- the feature file or the scratch table; 0 for a table in RAM -- and of its
    staged files), ``groups`` (the staging passes over the input; 0 when unstaged), ``staged`` (what the layer
    stages, or would: ``rows`` or ``messages``), ``bytes_staged`` (the staged ids, rows or messages and own terms
    written) and ``bytes_read_staged`` (the part of ``bytes_read`` that read them back)."""
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    _check_nodes(graph, nodes)
    asked = np.unique(nodes)
    table: np.ndarray | None = None
    with contextlib.closing(layerwise_stream(model, graph, asked, device, report=report)) as rows:
        for part in rows:
            if not len(part.nodes):
                continue
            if table is None:
                table = np.empty((len(asked), part.logits.shape[1]), dtype=np.float32)
            at = np.searchsorted(asked, part.nodes[0])
            table[at : at + len(part.nodes)] = part.logits
    if table is None:  # no node asked: no interval
        return np.empty((len(nodes), int(getattr(model, "out_dim", 0))), dtype=np.float32)
    return table[np.searchsorted(asked, nodes)]


def layerwise_accuracies(model: torch.nn.Module, graph: LayerwiseGraph, splits: Sequence[str],
                         device: torch.device | str = "cpu") -> dict[str, float]:
    """Accuracy of the full-neighbourhood predictions on each of ``splits``' labelled nodes (nan for a split
    with none), from one pass over the union of their nodes: the splits' frontiers overlap (on a large graph
    each is most of it at the first layer), so the feature file is read once, not once per split."""
    asked: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split in splits:
        if split not in graph.splits:
            raise ValueError(f"'splits' expected {split!r} among {sorted(graph.splits)} (got none)")
        nodes = np.asarray(graph.splits[split], dtype=np.int64)
        labels = np.asarray(graph.labels)[nodes]
        keep = labels >= 0
        asked[split] = nodes[keep], labels[keep]
    union = np.unique(np.concatenate([nodes for nodes, _ in asked.values()] + [np.empty(0, np.int64)]))
    pred = layerwise_logits(model, graph, union, device).argmax(axis=1) if len(union) else union
    return {split: float(np.mean(pred[np.searchsorted(union, nodes)] == labels)) if len(nodes) else float("nan")
            for split, (nodes, labels) in asked.items()}


def layerwise_accuracy(model: torch.nn.Module, graph: LayerwiseGraph, split: str,
                       device: torch.device | str = "cpu") -> float:
    """Accuracy of the full-neighbourhood predictions on ``graph.splits[split]``'s labelled nodes (nan when
    none is labelled)."""
    return layerwise_accuracies(model, graph, [split], device)[split]

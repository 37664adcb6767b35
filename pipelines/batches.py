"""Strata's out-of-core mini-batches in your own training loop, in PyG's ``NeighborLoader`` conventions.

``strata run`` trains the registered models (``trainer.models.MODELS``). To train anything else -- a PyG model,
a custom loss, a research loop -- open the same batches here. Opening runs the pipeline up to ``pack`` for
the configuration (reusing what is built, under the dataset's run lock, with every stage's blocking checks),
then opens the policy's feature source; each batch's features come through the pipelined loader, from the
policy's caches and packed chunks with direct I/O, exactly as ``strata run`` trains:

>>> from pipelines.batches import open_training_data
>>> with open_training_data("tiny", root="strata_data", overrides=["policy=diskgnn"]) as data:  # doctest: +SKIP
...     model = MyGNN(data.num_features, 64, data.num_classes)
...     for epoch in range(20):
...         for batch in data.batches("train", epoch):
...             out = model(batch.x, batch.edge_index)[: batch.batch_size]
...             loss = F.cross_entropy(out, batch.y)

A :class:`Batch` holds what ``NeighborLoader`` gives: ``x`` (input node features), ``edge_index`` (local
indices, source -> target, the seeds' edges first, every node's neighbourhood once: :func:`pyg_topology`),
``n_id`` (the source's node ids; :meth:`TrainingData.original_ids` turns them into the input's names for a graph
with string ids), ``batch_size`` (the seeds are the first ``batch_size`` nodes), ``y`` (the
seeds' labels), ``num_sampled_nodes`` and ``num_sampled_edges`` per hop (for PyG's ``trim_to_layer``), plus
``blocks``, Strata's per-layer form (DGL's message flow graphs, which ``strata run``'s models take).

Training batches are the sample stage's offline batches of sampled epoch ``epoch % sample.epochs`` (as
``strata run`` trains). ``mariusgnn`` trains on its own per-partition-set batches, served here too. A policy
whose batches only train inside Strata's own step is refused (``Policy.own_training_step``: ``outre``, whose
historical embeddings replace part of the model's input; train it with ``strata run``).

The dataset's run lock is held while the data is open: ``strata run`` and ``strata gc`` on the same dataset and
root wait (or skip it) until :meth:`TrainingData.close`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from pipelines.config import PipelineConfig
    from storage_kernels.sampleset import SampledBatch, SampleSet
    from trainer.models import TensorBlock

__all__ = ["Batch", "TrainingData", "open_training_data", "pyg_topology"]

@dataclass
class Batch:
    """One mini-batch in ``NeighborLoader``'s conventions (module docstring); tensors on the data's device."""

    x: torch.Tensor  # (num_nodes, F) float32: the input nodes' features, seeds first
    edge_index: torch.Tensor  # (2, E) int64 local indices, row 0 the neighbour (source), row 1 the target
    n_id: torch.Tensor  # (num_nodes,) int64: node ids as the source numbered them (before Strata's reordering)
    y: torch.Tensor  # (batch_size,) int64: the seeds' labels (-1: unlabelled)
    batch_size: int  # the seeds: the first batch_size nodes
    num_sampled_nodes: list[int]  # per hop: [batch_size, new nodes at hop 1, ...]
    num_sampled_edges: list[int]  # per hop: [edges into the seeds, edges into hop-1 nodes, ...]
    blocks: list[TensorBlock]  # Strata's form (input layer first): what trainer.models' modules take
    batch_id: int  # the batch in the sample set (in mariusgnn's per-set batches for its training batches)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])


def pyg_topology(record: SampledBatch) -> tuple[np.ndarray, list[int], list[int]]:
    """``(edge_index, num_sampled_nodes, num_sampled_edges)`` of an offline-sampled batch in ``NeighborLoader``'s
    form: every node's neighbours once, those sampled at the hop after the one that reached it (the seeds' at
    hop 0, hop-1 nodes' at hop 1, ...), hop by hop, as ``(source, target)`` rows of local indices.

    Strata's layered blocks (DGL's form) sample the nodes reached earlier again at every hop: the seeds are
    destinations of every block. Those repeat samples are left out, so a node has one neighbourhood, as PyG's
    message passing and ``trim_to_layer`` expect."""
    reached = np.asarray(record.hop_counts, dtype=np.int64)  # nodes known after each hop
    sources, targets, sampled_edges = [], [], []
    for hop, (indptr, cols) in enumerate(zip(record.indptrs, record.cols, strict=True)):
        lo = int(reached[hop - 1]) if hop else 0  # this hop's frontier: the nodes the previous hop reached
        hi = int(reached[hop])
        degree = np.diff(np.asarray(indptr[lo : hi + 1], dtype=np.int64))
        sources.append(np.asarray(cols[int(indptr[lo]) : int(indptr[hi])], dtype=np.int64))
        targets.append(np.repeat(np.arange(lo, hi, dtype=np.int64), degree))
        sampled_edges.append(int(degree.sum()))
    edge_index = np.stack([np.concatenate(sources), np.concatenate(targets)]) if sources else np.zeros((2, 0), np.int64)
    return edge_index, np.diff(reached, prepend=0).tolist(), sampled_edges


class TrainingData:
    """An opened configuration's batches (:func:`open_training_data`); close it (or use ``with``)."""

    def __init__(self, cfg: PipelineConfig, root: Path, device: str, artifacts: dict[str, Any], samples: SampleSet,
                 source: Any, lock: contextlib.ExitStack) -> None:
        import torch

        from pipelines.core.graphio import feature_dim, narrow_labels
        from trainer.train import compute_threads

        self.cfg, self.root, self.device = cfg, root, device
        self.artifacts = artifacts
        self.samples, self.source = samples, source
        self._lock = lock
        reorder = artifacts["reorder"]
        self.labels = narrow_labels(reorder.array("labels.npy"))  # int8 for <= 127 classes: 1 byte a node
        self._perm = reorder.array("perm.npy")  # Strata's id -> the source's id
        self.num_nodes = int(len(self.labels))
        self.num_features = feature_dim(reorder)
        self.num_classes = cfg.train.num_classes or int(self.labels.max()) + 1  # as strata run's model sizes it
        self._hook = source.train_hook
        self._closed = False
        # fixed at opening: asking again after torch.set_num_threads(...) would count one core fewer again
        self.compute_threads = compute_threads(cfg.train.num_threads, torch.device(device), False, source)
        """torch's intra-op threads ``strata run`` would train with here: ``train.num_threads`` when set; else
        those the plan chose from a probe of the model's step (``policy=auto``'s, or a forced policy's:
        ``pipelines.methods.policies.auto.threads``); else (a plan without a choice) :func:`trainer.train.
        compute_threads`'s rule. The data leaves torch's setting alone; a loop applies it with
        ``torch.set_num_threads(data.compute_threads)``."""

    @property
    def sample_epochs(self) -> int:
        """Sampled training epochs (``sample.epochs``); epoch ``e`` trains on sampled epoch ``e % sample_epochs``."""
        return self.samples.epochs

    @property
    def bytes_read(self) -> int:
        """Bytes the feature source has read from disk so far (every batch, every split)."""
        return int(self.source.bytes_read)

    @property
    def read_requests(self) -> int:
        """Read requests the feature source has issued so far."""
        return int(self.source.read_requests)

    def original_ids(self, n_id: Any) -> np.ndarray:
        """The ids the input gave the nodes ``n_id`` (a batch's ``n_id``, tensor or array): their names (an object
        array of ``str``) for a graph read with a node list (string ids), else ``n_id`` itself as int64."""
        from pipelines.core.nodeids import original_ids

        ids = np.asarray(n_id.cpu() if hasattr(n_id, "cpu") else n_id, dtype=np.int64)
        names = original_ids(self.artifacts["reorder"], ids)
        return ids if names is None else names

    def batch_ids(self, split: str, epoch: int = 0) -> list[int]:
        """The batches :meth:`batches` yields for ``split`` (``train``, ``val``, ``test``) and ``epoch``."""
        self._check_open()
        if split == "train":
            sampled = epoch % max(self.samples.epochs, 1)
            own = self._hook.batch_ids(sampled) if self._hook is not None else None
            return list(own) if own is not None else self.samples.batch_ids("train", sampled)
        return self.samples.batch_ids(split)

    def batches(self, split: str = "train", epoch: int = 0, prefetch: int | None = None) -> Iterator[Batch]:
        """The batches of ``split`` (and, for ``train``, of ``epoch``) in order, read and assembled ahead of the
        loop on the loader's threads (``prefetch`` batches ahead; default ``train.prefetch``), their PyG form
        included. Leaving the loop early stops them.

        Every batch is the loop's to keep: ``batch.x`` may outlive the step (a list of batches, a model that
        caches its input), so its host block is never reused for a later batch (the loader's default;
        ``strata run``'s own loop instead releases each batch when it asks for the next: ``trainer.loader``)."""
        from trainer.loader import BatchLoader

        ids = self.batch_ids(split, epoch)
        samples = self._hook.samples if split == "train" and self._hook is not None else self.samples
        loader = BatchLoader(samples, self.source, ids, self.labels, prefetch=prefetch or self.cfg.train.prefetch,
                             device=self.device, extra=self._pyg_form)
        with contextlib.closing(loader):
            for lb in loader:
                yield Batch(x=lb.x, y=lb.y, batch_size=lb.num_seeds, blocks=list(lb.blocks), batch_id=int(lb.batch_id),
                            **lb.extra)

    def _pyg_form(self, record: SampledBatch, device: torch.device) -> dict[str, Any]:
        """``edge_index``, ``n_id`` and the per-hop counts of a batch (the loader's assemble stage runs this)."""
        import torch

        edge_index, num_nodes, num_edges = pyg_topology(record)
        n_id = np.asarray(self._perm[np.asarray(record.nodes)], dtype=np.int64)  # the source's ids
        return {"edge_index": torch.from_numpy(edge_index).to(device, non_blocking=True),
                "n_id": torch.from_numpy(n_id).to(device, non_blocking=True),
                "num_sampled_nodes": num_nodes, "num_sampled_edges": num_edges}

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("'TrainingData' expected to be open (got a closed one)")

    def close(self) -> None:
        """Close the feature source and release the dataset's run lock."""
        if self._closed:
            return
        self._closed = True
        try:
            self.source.close()
        finally:
            self._lock.close()

    def __enter__(self) -> TrainingData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_training_data(dataset: str | None = None, *, root: str | Path | None = None,
                       overrides: Iterable[str] = (), config: str | Path | None = None, device: str | None = None,
                       policy: str | None = None) -> TrainingData:
    """Build (or reuse) ``dataset``'s artifacts up to ``pack`` and open its batches.

    ``overrides`` are ``--set`` items (``["policy=ginex", "sample.fanouts=[10,5]"]``), ``config`` a config file,
    ``policy`` a shortcut for ``policy=...``; ``device`` defaults to ``train.device`` (``auto``: CUDA when
    present). ``root`` defaults to ``STRATA_HOME`` or ``./strata_data``. ``ValueError`` names a bad setting or a
    policy whose training step is Strata's own; a failing blocking check raises as it does in ``strata run``.
    """
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths
    from pipelines.methods.policies import POLICIES
    from pipelines.methods.policies.auto import resolved as resolved_policy
    from pipelines.runner import StageRunner
    from pipelines.stages.train import check_reused_plan, open_features
    from storage_kernels.locks import dataset_lock
    from storage_kernels.sampleset import SampleSet
    from trainer.device import resolve_device
    from trainer.features.iobackend import set_io_defaults

    cfg = PipelineConfig.load(config, overrides, dataset=dataset, policy=policy)
    own_step = POLICIES.get(cfg.policy).own_training_step
    if own_step:
        raise ValueError(f"'policy' expected one whose batches train any model (got {cfg.policy!r}: {own_step}; "
                         "train it with `strata run`)")
    if cfg.train.task != "node":
        raise ValueError(f"'train.task' expected node (got {cfg.train.task!r}: link prediction trains with "
                         "`strata run`)")
    paths = StrataPaths.at(root)
    lock = contextlib.ExitStack()
    lock.enter_context(dataset_lock(paths.root, cfg.dataset_name))
    try:
        runner = StageRunner(cfg, paths.store())
        runner.run_until("pack")
        artifacts = {name: runner.artifact(name) for name in ("reorder", "sample", "plan", "pack")}
        cfg = resolved_policy(cfg, artifacts["plan"].stats)  # policy=auto: the policy, settings, threads
        own_step = POLICIES.get(cfg.policy).own_training_step
        if own_step:
            raise ValueError(f"'policy' expected one whose batches train any model (got {cfg.policy!r}, chosen "
                             f"by auto: {own_step}; train it with `strata run`)")
        check_reused_plan(cfg, artifacts["reorder"])
        set_io_defaults(cfg.train.io_backend, cfg.train.io_queue_depth)
        resolved = resolve_device(device or cfg.train.device)
        samples = SampleSet(artifacts["sample"].path)
        source = open_features(cfg, cfg.policy, artifacts["reorder"], artifacts["pack"], samples, resolved)
    except BaseException:
        lock.close()
        raise
    try:
        return TrainingData(cfg, paths.root, resolved, artifacts, samples, source, lock)
    except BaseException:
        source.close()
        lock.close()
        raise

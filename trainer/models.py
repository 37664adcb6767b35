"""Models over layered sampled blocks -- GraphSAGE (mean aggregation) and the registry of architectures
(``graphsage``; ``gcn`` from :mod:`trainer.gcn`, ``gat`` from :mod:`trainer.gat`) -- in plain PyTorch and
exportable to ONNX.

A sampled batch (``storage_kernels.sampleset.SampledBatch``) has nodes ``nodes[:hop_counts[L]]`` with the
seeds first, and one CSR block per hop. Layer ``i`` of the model consumes ``blocks()[i]`` (hop ``L-1-i``):
its source nodes are the first ``num_src`` rows of the layer input, its destination nodes the first
``num_dst`` of them (a prefix), and its output has ``num_dst`` rows. The last layer outputs one row per seed.

Aggregation is ``scatter_reduce(reduce="sum")`` divided by a degree vector computed the same way. It is not
``index_add_``: the ONNX exporter turns ``index_add_`` into ScatterElements without a reduction, which is
wrong when destination indices repeat (pytorch #111159); ``scatter_reduce`` exports as
ScatterElements(reduction="add") (opset >= 16).

Architectures are entries of :data:`MODELS` (``TrainConfig.model`` names one). An entry is a constructor
``(in_dim, hidden_dim, out_dim, num_layers, dropout) -> nn.Module`` whose module follows :class:`GraphModel`:
``forward(x, blocks)``, ``forward_dst_pos(x, edges)`` (the ONNX form), ``in_dim``, ``num_layers`` and
``model_args`` (its constructor arguments). An entry may declare ``reads``: further ``train`` settings it
takes as keywords (GAT's ``heads``, see :func:`model_reads`). :func:`build_model` builds one by name;
:func:`load_trained` rebuilds a trained one from the train stage's ``model.json`` and ``state_dict.pt``. The
block types the models consume (:class:`~trainer.blocks.TensorBlock`, :func:`~trainer.blocks.to_tensor_blocks`)
live in :mod:`trainer.blocks` and are re-exported here.

>>> @MODELS.register("my-gnn")
... class MyGNN(nn.Module): ...            # (in_dim, hidden_dim, out_dim, num_layers, dropout)
>>> net = build_model("my-gnn", in_dim=8, hidden_dim=16, out_dim=3, num_layers=2, dropout=0.5)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from storage_kernels.registry import Registry
from trainer.architectures import MODELS as _ARCHITECTURES
from trainer.blocks import BlockLike, TensorBlock, to_tensor_blocks  # re-exported: their home before trainer.blocks
from trainer.gat import GAT
from trainer.gcn import GCN
from trainer.message_passing import project_first
from trainer.native_ops import csr_mean, dropout, native_applies

__all__ = [
    "MODELS",
    "MODEL_ARGS",
    "GAT",
    "GCN",
    "BlockLike",
    "GraphModel",
    "GraphSAGE",
    "ModelConstructor",
    "SAGEConv",
    "TensorBlock",
    "build_model",
    "load_trained",
    "gather_scatter_sum",
    "mean_aggregate",
    "model_options",
    "model_reads",
    "to_tensor_blocks",
]

#: The constructor arguments every model entry takes (``model_args`` minus the ``model`` name).
MODEL_ARGS = ("in_dim", "hidden_dim", "out_dim", "num_layers", "dropout")


#: Messages (edges x features) materialised at once by :func:`gather_scatter_sum` without autograd: a large
#: evaluation batch aggregates in slices of this many elements instead of one (E, F) tensor (~GBs).
NO_GRAD_MESSAGE_ELEMENTS = 1 << 24


def gather_scatter_sum(h_src: torch.Tensor, like: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor
                       ) -> torch.Tensor:
    """``out[i] = sum_{k: edge_dst[k] = i} h_src[edge_src[k]]``, ``out`` shaped ``like`` (D, F).

    With autograd (training) or while tracing for ONNX it is one gather and one ``scatter_reduce``; without
    (evaluation) the edges go in slices of at most :data:`NO_GRAD_MESSAGE_ELEMENTS` messages accumulated with
    ``index_add_``, so the memory of a large evaluation batch stays bounded (equal up to float rounding: the
    order of additions may differ).
    """
    feature_dim = max(int(h_src.shape[1]), 1)
    step = max(NO_GRAD_MESSAGE_ELEMENTS // feature_dim, 1)
    sliced = (not torch.is_grad_enabled() and edge_src.shape[0] > step
              and not torch.jit.is_tracing() and not torch.onnx.is_in_onnx_export())
    if not sliced:
        msg = h_src.index_select(0, edge_src)  # (E, F)
        index = edge_dst.unsqueeze(1).expand_as(msg)  # (E, F)
        return torch.zeros_like(like).scatter_reduce(0, index, msg, reduce="sum", include_self=True)
    total = torch.zeros_like(like)  # (D, F)
    for lo in range(0, int(edge_src.shape[0]), step):
        msg = h_src.index_select(0, edge_src[lo : lo + step])  # (e, F)
        total.index_add_(0, edge_dst[lo : lo + step], msg)  # in place: not traced, so not exported
    return total


def mean_aggregate(
    h_src: torch.Tensor, h_dst: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor
) -> torch.Tensor:
    """``out[i] = mean_{k: edge_dst[k] = i} h_src[edge_src[k]]`` (0 for a destination with no edge).

    ``h_dst`` only supplies the output shape ``(num_dst, F)`` as a tensor, so the ONNX graph stays dynamic.
    """
    total = gather_scatter_sum(h_src, h_dst, edge_src, edge_dst)  # (D, F)
    ones = torch.ones_like(edge_dst, dtype=h_dst.dtype).unsqueeze(1)  # (E, 1)
    degree = torch.zeros_like(h_dst[:, :1]).scatter_reduce(  # (D, 1)
        0, edge_dst.unsqueeze(1), ones, reduce="sum", include_self=True
    )
    return total / degree.clamp(min=1.0)  # (D, F) / (D, 1)


class SAGEConv(nn.Module):
    """``h_dst' = lin_self(h_dst) + lin_neigh(mean_{j in N(i)} h_src[j])`` (one bias, on ``lin_self``)."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def forward(
        self, h_src: torch.Tensor, h_dst: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
        indptr: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``indptr`` (the edges' CSR over the destinations, :class:`TensorBlock`) lets a float32 CPU layer
        aggregate in C (:func:`trainer.native_ops.csr_mean`: the same numbers, no (E, F) message tensor)."""
        if indptr is not None and native_applies(h_src):
            neigh = csr_mean(h_src, indptr, edge_src)  # (num_dst, in_dim)
        else:
            neigh = mean_aggregate(h_src, h_dst, edge_src, edge_dst)
        return self.lin_self(h_dst) + self.lin_neigh(neigh)

    @property
    def message_width(self) -> int:
        """Columns of the per-edge messages in :meth:`forward_dst_pos` (the ONNX form)."""
        return min(self.lin_neigh.in_features, self.lin_neigh.out_features)

    def forward_dst_pos(self, h_src: torch.Tensor, h_dst: torch.Tensor, edge_src: torch.Tensor,
                        edge_dst: torch.Tensor) -> torch.Tensor:
        """The ONNX form of :meth:`forward`: the mean runs at the narrower of the two widths. The mean is linear,
        so where ``out_dim < in_dim`` (:func:`~trainer.message_passing.project_first`) ``lin_neigh`` projects
        the source rows first and the edges carry ``out_dim``-wide messages: the exported graph's largest
        tensor is edges x :attr:`message_width`, not edges x ``in_dim`` (equal up to float rounding)."""
        own = self.lin_self(h_dst)  # (D, out)
        if not project_first(self.lin_neigh.in_features, self.lin_neigh.out_features):
            return own + self.lin_neigh(mean_aggregate(h_src, h_dst, edge_src, edge_dst))
        return own + mean_aggregate(self.lin_neigh(h_src), own, edge_src, edge_dst)  # (S, out) -> (D, out)


class GraphSAGE(nn.Module):
    """``num_layers`` SAGE layers with ReLU + dropout between them.

    >>> model = GraphSAGE(in_dim=8, hidden_dim=16, out_dim=3, num_layers=2)
    >>> logits = model(x, blocks)   # x (num_nodes, 8), blocks: list[TensorBlock] input layer first
    """

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, num_layers: int, dropout: float = 0.5) -> None:
        super().__init__()
        for name, value in {"in_dim": in_dim, "hidden_dim": hidden_dim, "out_dim": out_dim,
                            "num_layers": num_layers}.items():
            if int(value) < 1:
                raise ValueError(f"'GraphSAGE.{name}' expected >= 1 (got {value})")
        self.in_dim, self.hidden_dim, self.out_dim = int(in_dim), int(hidden_dim), int(out_dim)
        self.num_layers, self.dropout = int(num_layers), float(dropout)
        dims = [self.in_dim] + [self.hidden_dim] * (self.num_layers - 1) + [self.out_dim]
        self.layers = nn.ModuleList(SAGEConv(dims[i], dims[i + 1]) for i in range(self.num_layers))

    @property
    def model_args(self) -> dict[str, Any]:
        """Constructor arguments (checkpoint ``model_args``, ``model.json``)."""
        return {"in_dim": self.in_dim, "hidden_dim": self.hidden_dim, "out_dim": self.out_dim,
                "num_layers": self.num_layers, "dropout": self.dropout}

    def forward(self, x: torch.Tensor, blocks: Sequence[TensorBlock]) -> torch.Tensor:
        """``x`` (num_nodes, in_dim) in the batch's node order -> logits (num_seeds, out_dim)."""
        if len(blocks) != self.num_layers:
            raise ValueError(f"'blocks' expected {self.num_layers} (one per layer) (got {len(blocks)})")
        if x.dim() != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"'x' expected shape (num_nodes, {self.in_dim}) (got {tuple(x.shape)})")
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(h, h[: block.num_dst], block.edge_src, block.edge_dst, block.indptr)  # (num_dst_i, dims[i+1])
            h = self._between_layers(h, i)
        return h

    def forward_lower(self, x: torch.Tensor, blocks: Sequence[TensorBlock]) -> torch.Tensor:
        """Layers ``0..L-2`` on ``blocks`` (the first ``L-1``): the last layer's input h^{L-1}, before its
        dropout, ``(blocks[-1].num_dst, hidden_dim)`` (``x`` itself for one layer). With :meth:`forward_last`
        it is :meth:`forward`, same operations in the same order (OUTRE's historical cache swaps rows
        between the two: ``trainer.history``)."""
        h = x
        for i, (layer, block) in enumerate(zip(self.layers[:-1], blocks, strict=True)):
            h = layer(h, h[: block.num_dst], block.edge_src, block.edge_dst, block.indptr)  # (num_dst_i, hidden)
            h = F.relu(h) if i == self.num_layers - 2 else self._between_layers(h, i)
        return h

    def forward_last(self, h: torch.Tensor, block: TensorBlock) -> torch.Tensor:
        """The last layer on its input ``h`` (from :meth:`forward_lower`) -> logits (num_seeds, out_dim)."""
        if self.num_layers > 1:
            h = dropout(h, self.dropout, self.training)
        return self.layers[-1](h, h[: block.num_dst], block.edge_src, block.edge_dst, block.indptr)

    def forward_dst_pos(
        self, x: torch.Tensor, edges: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """The same computation with each layer's destinations given as positions ``dst_pos`` (ONNX form:
        ``num_dst`` is ``dst_pos.shape[0]``, a dynamic shape, not a Python int); each layer aggregates at the
        narrower of its widths (:meth:`SAGEConv.forward_dst_pos`)."""
        h = x
        for i, (layer, (edge_src, edge_dst, dst_pos)) in enumerate(zip(self.layers, edges, strict=True)):
            h = layer.forward_dst_pos(h, h.index_select(0, dst_pos), edge_src, edge_dst)  # (num_dst_i, dims[i+1])
            h = self._between_layers(h, i)
        return h

    def _between_layers(self, h: torch.Tensor, i: int) -> torch.Tensor:
        if i == self.num_layers - 1:
            return h
        return dropout(F.relu(h), self.dropout, self.training)


# ------------------------------------------------------------------------------------------------ registry
class GraphModel(Protocol):
    """What the trainer and the exporter use of a model built from a :data:`MODELS` entry (an ``nn.Module``).

    ``forward(x, blocks)``: ``x`` (num_nodes, in_dim) in the batch's node order, ``blocks`` input layer first
    -> logits (num_seeds, out_dim). ``forward_dst_pos(x, edges)``: the same with ``edges[i] = (edge_src,
    edge_dst, dst_pos)`` per layer, where ``num_dst`` is ``dst_pos.shape[0]`` (ONNX-traceable: no Python int
    from a tensor). ``model_args``: the constructor's keyword arguments, so ``build_model(name,
    **module.model_args)`` builds the same architecture. Optional, for ``policy=outre``:
    ``forward_lower(x, blocks[:-1])`` -> the last layer's input and ``forward_last(h, blocks[-1])`` -> logits
    (``trainer.history.HistoryModel``; :class:`GraphSAGE` has both, GCN and GAT through
    ``trainer.split_forward.LayerwiseSplit``).
    """

    in_dim: int
    num_layers: int
    training: bool

    @property
    def model_args(self) -> dict[str, Any]: ...

    def __call__(self, x: torch.Tensor, blocks: Sequence[TensorBlock]) -> torch.Tensor: ...

    def forward(self, x: torch.Tensor, blocks: Sequence[TensorBlock]) -> torch.Tensor: ...

    def forward_dst_pos(
        self, x: torch.Tensor, edges: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor: ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any: ...

    def to(self, device: torch.device | str) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...


class ModelConstructor(Protocol):
    """A :data:`MODELS` entry: builds an untrained :class:`GraphModel` (a class or a factory function)."""

    def __call__(self, in_dim: int, hidden_dim: int, out_dim: int, num_layers: int, dropout: float
                 ) -> GraphModel: ...


#: Architectures by name (``TrainConfig.model``; :mod:`trainer.architectures` declares the built-in names so that
#: configurations validate without torch); register one with ``@MODELS.register("name")``.
MODELS: Registry[ModelConstructor] = _ARCHITECTURES
MODELS.register("graphsage", GraphSAGE)
MODELS.register("gcn", GCN)
MODELS.register("gat", GAT)


def model_reads(model: str) -> tuple[str, ...]:
    """The ``train`` settings entry ``model`` takes beyond :data:`MODEL_ARGS` (its ``reads``, e.g. GAT's
    ``heads``): constructor keywords with defaults, recorded in ``model_args``, and the only
    ``artifact="selected"`` train settings that enter the train artifact's version when ``model`` is selected."""
    return tuple(getattr(MODELS.get(model), "reads", ()))


def model_options(cfg: Any) -> dict[str, Any]:
    """``{setting: value}`` of ``cfg`` (a ``TrainConfig``) for the settings ``cfg.model`` reads."""
    return {name: getattr(cfg, name) for name in model_reads(cfg.model)}


def build_model(model: str, **model_args: Any) -> GraphModel:
    """An untrained ``model`` (a :data:`MODELS` name) with the constructor arguments :data:`MODEL_ARGS` and,
    optionally, the settings the model reads (:func:`model_reads`).

    The keyword is ``model`` so a checkpoint's or a ``TrainResult``'s ``model_args`` (which record the
    name under that key) rebuild their model as ``build_model(**model_args)``.
    """
    entry = MODELS.get(model)
    known = [*MODEL_ARGS, *model_reads(model)]  # the model's own settings are optional (defaults)
    unknown, missing = sorted(set(model_args) - set(known)), [k for k in MODEL_ARGS if k not in model_args]
    if unknown or missing:
        raise ValueError(f"'model_args' expected exactly {known} (got unknown {unknown}, missing {missing})")
    return entry(**model_args)


def load_trained(info: Mapping[str, Any], state_path: str | Path, map_location: str | torch.device = "cpu"
                 ) -> GraphModel:
    """Rebuild a trained model in eval mode from the train stage's ``model.json`` (``info``: the
    registry name under ``model`` and the :data:`MODEL_ARGS`) and its ``state_dict.pt`` (read with
    ``weights_only=True``: nothing is unpickled).

    A ``model.json`` written before the registry names its architecture under ``architecture`` and may
    lack ``dropout`` (0.0 then: it only matters in training).
    """
    name = info.get("model", info.get("architecture"))
    if not isinstance(name, str):
        raise ValueError(f"'model.json' expected a model name under 'model' (got keys {sorted(info)})")
    args = {k: info[k] for k in (*MODEL_ARGS, *model_reads(name)) if k in info}
    args.setdefault("dropout", 0.0)
    path = Path(state_path)
    if not path.exists():
        raise FileNotFoundError(f"'state_dict' expected a file at {path} (got no such file)")
    net = build_model(name, **args)
    net.load_state_dict(torch.load(path, map_location=map_location, weights_only=True))
    net.eval()
    return net

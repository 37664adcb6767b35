"""Export a trained model to ONNX with dynamic subgraph shapes.

Any :data:`trainer.models.MODELS` architecture exports to ONNX (through its ``forward_dst_pos``); its fp16 and
int8 variants are :mod:`trainer.export_variants`, the browser app that runs them :mod:`pipelines.web.app`.

ONNX graph (``export_onnx``): inputs ``x`` (num_nodes, in_dim) float32 and, per layer ``i`` (input layer
first), ``edge_src_i`` / ``edge_dst_i`` (num_edges_i,) int64 and ``dst_pos_i`` (num_dst_i,) int64, the positions
of the layer's destination nodes in its input (``arange(num_dst_i)`` for Strata's prefix layout). Every first
axis is dynamic, so one graph serves subgraphs of any size; ``dst_pos_i`` is what carries ``num_dst_i`` as a
shape. Output ``logits`` (num_seeds, out_dim). Aggregation is ScatterElements(reduction="add") (opset >= 16;
18 by default), exported by the TorchScript-based exporter (``dynamo=False``).

A layer whose aggregation is linear (GraphSAGE's mean, GCN's normalised sum) projects its source rows before it
aggregates where its output is narrower than its input (the layers' ``forward_dst_pos``,
:func:`trainer.message_passing.project_first`; GAT always does): the graph's edge-sized tensors are edges x
min(in, out) wide, not edges x the feature width, which for wide features (thousands of columns) would be
gigabytes per batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from trainer.models import GraphModel, TensorBlock

if TYPE_CHECKING:
    import onnx

__all__ = [
    "export_onnx",
    "onnx_feed",
    "onnx_input_names",
    "random_subgraph",
    "verify_onnx",
]


def onnx_input_names(num_layers: int) -> list[str]:
    """``["x", "edge_src_0", "edge_dst_0", "dst_pos_0", "edge_src_1", ...]``."""
    names = ["x"]
    for i in range(num_layers):
        names += [f"edge_src_{i}", f"edge_dst_{i}", f"dst_pos_{i}"]
    return names


class _OnnxModel(nn.Module):
    """Flat-input wrapper: ``forward(x, edge_src_0, edge_dst_0, dst_pos_0, ...)``."""

    def __init__(self, model: GraphModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, *edges: torch.Tensor) -> torch.Tensor:
        triples = [(edges[3 * i], edges[3 * i + 1], edges[3 * i + 2]) for i in range(self.model.num_layers)]
        return self.model.forward_dst_pos(x, triples)


def random_subgraph(in_dim: int, num_layers: int, num_seeds: int = 4, fanout: int = 3,
                    seed: int = 0) -> tuple[torch.Tensor, list[TensorBlock]]:
    """A random layered subgraph in Strata's layout (seeds first, destination prefixes), with repeated
    destination indices: ``(x (num_nodes, in_dim), blocks input layer first)``."""
    gen = torch.Generator().manual_seed(seed)
    counts = [num_seeds]
    for _ in range(num_layers):  # nodes known after each hop
        counts.append(counts[-1] + int(torch.randint(1, counts[-1] * fanout + 1, (1,), generator=gen)))
    blocks = []
    for hop in reversed(range(num_layers)):
        num_dst, num_src = counts[hop], counts[hop + 1]
        degree = torch.randint(0, fanout + 1, (num_dst,), generator=gen)  # some nodes with no edge
        edge_dst = torch.repeat_interleave(torch.arange(num_dst), degree)  # (E,)
        edge_src = torch.randint(0, num_src, (int(degree.sum()),), generator=gen)  # (E,)
        blocks.append(TensorBlock(edge_src, edge_dst, num_dst))
    x = torch.randn(counts[-1], in_dim, generator=gen)  # (num_nodes, in_dim)
    return x, blocks


def _flat_inputs(x: torch.Tensor, blocks: Sequence[TensorBlock]) -> tuple[torch.Tensor, ...]:
    flat: list[torch.Tensor] = [x]
    for b in blocks:
        flat += [b.edge_src, b.edge_dst, b.dst_pos()]
    return tuple(flat)


def onnx_feed(x: torch.Tensor, blocks: Sequence[TensorBlock]) -> dict[str, np.ndarray]:
    """onnxruntime input dict for ``(x, blocks)``."""
    names = onnx_input_names(len(blocks))
    return {n: t.detach().cpu().numpy() for n, t in zip(names, _flat_inputs(x, blocks), strict=True)}


def export_onnx(model: GraphModel, path: str | Path, in_dim: int | None = None, num_layers: int | None = None,
                opset: int = 18) -> Path:
    """Export ``model`` (eval mode, on CPU) to ONNX with dynamic subgraph shapes; returns ``path``."""
    if in_dim is not None and in_dim != model.in_dim:
        raise ValueError(f"'in_dim' expected {model.in_dim} (the model's) (got {in_dim})")
    if num_layers is not None and num_layers != model.num_layers:
        raise ValueError(f"'num_layers' expected {model.num_layers} (the model's) (got {num_layers})")
    if opset < 16:
        raise ValueError(f"'opset' expected >= 16 (ScatterElements with reduction) (got {opset})")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    device = next(model.parameters()).device
    wrapper = _OnnxModel(model).cpu().eval()
    x, blocks = random_subgraph(model.in_dim, model.num_layers, num_seeds=5, fanout=3, seed=1)
    names = onnx_input_names(model.num_layers)
    dynamic_axes: dict[str, dict[int, str]] = {"x": {0: "num_nodes"}, "logits": {0: "num_seeds"}}
    for i in range(model.num_layers):
        dynamic_axes[f"edge_src_{i}"] = {0: f"num_edges_{i}"}
        dynamic_axes[f"edge_dst_{i}"] = {0: f"num_edges_{i}"}
        dynamic_axes[f"dst_pos_{i}"] = {0: f"num_dst_{i}"}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # dynamo=False is deliberate (the checked scatter_reduce path); silence "legacy exporter" notices
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(
                wrapper, _flat_inputs(x, blocks), str(path), input_names=names, output_names=["logits"],
                dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False, do_constant_folding=True,
            )
    finally:
        model.to(device).train(was_training)
    _inline_rank_ifs(path)
    _declare_every_input(path, names)
    return path


def _declare_every_input(path: Path, names: Sequence[str]) -> None:
    """Keep the input contract whatever the model reads: the exporter drops inputs a model never uses (an
    MLP ignores the edges), which would make runtimes refuse the standard feed; re-declare them, unused."""
    import onnx

    proto = onnx.load(str(path))
    present = {i.name for i in proto.graph.input}
    missing = [n for n in names if n not in present]
    if not missing:
        return
    for name in missing:  # every non-"x" input is a 1-D int64 vector of dynamic length
        proto.graph.input.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.INT64, [f"len_{name}"]))
    order = {n: i for i, n in enumerate(names)}
    inputs = sorted(proto.graph.input, key=lambda i: order.get(i.name, len(order)))
    del proto.graph.input[:]
    proto.graph.input.extend(inputs)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


def _inline_rank_ifs(path: Path) -> int:
    """Replace the exporter's rank guards by their static branch; returns how many were inlined.

    The TorchScript exporter wraps every ``scatter_reduce`` in ``If(Size(Shape(t)) == 0)`` (a rank-0
    special case) whose then-branch declares wrong output ranks, so onnxruntime warns on every run. The
    rank of ``t`` is known after shape inference, so the ``If`` is replaced by its else-branch and the
    guard nodes are dropped.
    """
    import onnx

    proto = onnx.load(str(path))
    total = 0
    while True:  # inlining one guard lets shape inference see through it and resolve the next one
        inlined = _inline_rank_ifs_once(proto)
        total += inlined
        if not inlined:
            break
    _redeclare_outputs(proto)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))
    return total


def _redeclare_outputs(proto: onnx.ModelProto) -> None:
    """Declare each output with the rank shape inference finds once the guards are gone: the exporter took a
    model output straight from a guarded scatter (GCN's last layer) as rank 1 from the then-branch, which
    onnxruntime warns about on every run. A dynamic dimension keeps its declared name (``num_seeds``)."""
    import onnx

    declared = {o.name: [d.dim_param for d in o.type.tensor_type.shape.dim] for o in proto.graph.output}
    for output in proto.graph.output:
        output.type.tensor_type.ClearField("shape")
    inferred = {o.name: o for o in onnx.shape_inference.infer_shapes(proto).graph.output}
    for output in proto.graph.output:
        names = declared[output.name]
        if not inferred[output.name].type.tensor_type.HasField("shape"):
            output.type.tensor_type.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_param=n) for n in names)
            continue
        for i, dim in enumerate(inferred[output.name].type.tensor_type.shape.dim):
            new = output.type.tensor_type.shape.dim.add()
            if dim.HasField("dim_value"):
                new.dim_value = dim.dim_value
            elif i < len(names) and names[i]:
                new.dim_param = names[i]  # the export's dynamic axis name
            else:
                new.dim_param = f"{output.name}_dim_{i}"


def _inline_rank_ifs_once(proto: onnx.ModelProto) -> int:
    import onnx
    from onnx import numpy_helper

    graph = proto.graph
    inferred = onnx.shape_inference.infer_shapes(proto).graph
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim)
             for vi in [*inferred.value_info, *inferred.input, *inferred.output]
             if vi.type.tensor_type.HasField("shape")}
    producer = {out: node for node in graph.node for out in node.output}

    def static_rank_is_zero(cond: str) -> bool | None:
        eq = producer.get(cond)
        if eq is None or eq.op_type != "Equal":
            return None
        size, zero = producer.get(eq.input[0]), producer.get(eq.input[1])
        shape = producer.get(size.input[0]) if size is not None and size.op_type == "Size" else None
        if shape is None or shape.op_type != "Shape" or zero is None or zero.op_type != "Constant":
            return None
        if numpy_helper.to_array(zero.attribute[0].t).tolist() != 0 or shape.input[0] not in ranks:
            return None
        return ranks[shape.input[0]] == 0

    nodes: list[onnx.NodeProto] = []
    inlined = 0
    for node in graph.node:
        is_zero = static_rank_is_zero(node.input[0]) if node.op_type == "If" else None
        if is_zero is None:
            nodes.append(node)
            continue
        branch = next(a.g for a in node.attribute if a.name == ("then_branch" if is_zero else "else_branch"))
        nodes.extend(branch.node)
        for inner, outer in zip(branch.output, node.output, strict=True):
            nodes.append(onnx.helper.make_node("Identity", [inner.name], [outer], name=f"{outer}/inlined"))
        inlined += 1
    # drop nodes whose outputs nothing reads (the guards); subgraphs read outer names implicitly
    needed = {o.name for o in graph.output}
    kept: list[onnx.NodeProto] = []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(_node_reads(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))
    del graph.value_info[:]  # stale after the rewrite; onnxruntime re-infers
    return inlined


def _node_reads(node: onnx.NodeProto) -> set[str]:
    """Names a node reads, including outer-scope names used inside its subgraphs."""
    reads = {i for i in node.input if i}
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in sub.node:
                reads |= _node_reads(inner)
    return reads


def verify_onnx(path: str | Path, model: GraphModel, example: tuple[torch.Tensor, Sequence[TensorBlock]]) -> float:
    """Run the ONNX graph in onnxruntime (CPU) on ``example = (x, blocks)``; max |onnx - torch| logits."""
    import onnxruntime as ort

    x, blocks = example
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], onnx_feed(x, blocks))
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        want = model(x.to(device), [b.to(device) for b in blocks]).cpu().numpy()
    model.train(was_training)
    if got.shape != want.shape:
        raise ValueError(f"'onnx logits' expected shape {want.shape} (got {got.shape})")
    return float(np.abs(got - want).max()) if want.size else 0.0

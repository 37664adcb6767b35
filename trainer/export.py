"""Export a trained model: ONNX with dynamic subgraph shapes, and a compact WASM-ready bundle.

Any :data:`trainer.models.MODELS` architecture exports to ONNX (through its ``forward_dst_pos``); the bundle
needs the model to describe its layers for the runtime (``bundle_descriptor()``, which ``GraphSAGE`` has; GCN
and GAT are ONNX only, see :func:`supports_bundle`).

ONNX graph (``export_onnx``): inputs ``x`` (num_nodes, in_dim) float32 and, per layer ``i`` (input layer
first), ``edge_src_i`` / ``edge_dst_i`` (num_edges_i,) int64 and ``dst_pos_i`` (num_dst_i,) int64, the positions
of the layer's destination nodes in its input (``arange(num_dst_i)`` for Strata's prefix layout). Every first
axis is dynamic, so one graph serves subgraphs of any size; ``dst_pos_i`` is what carries ``num_dst_i`` as a
shape. Output ``logits`` (num_seeds, out_dim). Aggregation is ScatterElements(reduction="add") (opset >= 16;
18 by default), exported by the TorchScript-based exporter (``dynamo=False``).

Bundle (``export_bundle``): ``model.json`` (architecture descriptor: layers, dims, activation, aggregation,
input/output names, opset, quantization, tensor table, weights checksum) + ``weights.bin`` (little-endian
tensors at 16-byte-aligned offsets; weight matrices int8 symmetric per-tensor ``w = q * scale``, or float32;
biases float32). ``load_bundle`` rebuilds the model by its registry name (``architecture``). Nothing is
pickled.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import nn

from trainer.models import GraphModel, TensorBlock, build_model

if TYPE_CHECKING:
    import onnx

__all__ = [
    "BUNDLE_FORMAT",
    "BundleModel",
    "export_bundle",
    "export_onnx",
    "load_bundle",
    "onnx_feed",
    "onnx_input_names",
    "supports_bundle",
    "random_subgraph",
    "verify_onnx",
]

BUNDLE_FORMAT = "strata-wasm-bundle"
_ALIGN = 16  # byte alignment of every tensor in weights.bin (typed-array views in JS need 4)


def onnx_input_names(num_layers: int) -> list[str]:
    """``["x", "edge_src_0", "edge_dst_0", "dst_pos_0", "edge_src_1", ...]``."""
    names = ["x"]
    for i in range(num_layers):
        names += [f"edge_src_{i}", f"edge_dst_{i}", f"dst_pos_{i}"]
    return names


class BundleModel(GraphModel, Protocol):
    """A model :func:`export_bundle` can describe: it names its architecture and layers for the runtime."""

    def bundle_descriptor(self) -> dict[str, Any]:
        """``{"architecture": MODELS name, "layers": [...], "formula", "aggregation", "activation"}``."""
        ...


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


# ------------------------------------------------------------------------------------------------ bundle
def _quantize_int8(w: np.ndarray) -> tuple[np.ndarray, float]:
    """Symmetric per-tensor int8: ``w ~= q * scale`` with ``q`` in [-127, 127]."""
    peak = float(np.abs(w).max()) if w.size else 0.0
    scale = peak / 127.0 if peak > 0 else 1.0
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def supports_bundle(model: GraphModel) -> bool:
    """Whether ``model`` describes its layers for the bundle's runtime (has ``bundle_descriptor()``): the
    built-in ``graphsage`` does; ``gcn`` and ``gat`` do not (their layers are not in the runtime), so they
    export as ONNX only and :func:`export_bundle` refuses them."""
    return callable(getattr(model, "bundle_descriptor", None))


def export_bundle(model: BundleModel, out_dir: str | Path, quantization: str = "int8", opset: int = 18,
                  onnx_file: str | None = None) -> Path:
    """Write ``model.json`` + ``weights.bin`` into ``out_dir``; returns the path of ``model.json``.

    ``quantization`` is ``"int8"`` (weight matrices int8, biases float32) or ``"fp32"``. ``onnx_file``
    names an ONNX file shipped beside the bundle (recorded in the descriptor, not written here).
    """
    if quantization not in ("int8", "fp32"):
        raise ValueError(f"'quantization' expected 'int8' or 'fp32' (got {quantization!r})")
    if not supports_bundle(model):
        raise ValueError(f"'export_bundle' expected a model with bundle_descriptor() (the layer description "
                         f"the runtime reads) (got {type(model).__name__})")
    architecture = model.bundle_descriptor()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    tensors: list[dict[str, Any]] = []
    blob = bytearray()
    for name, w in state.items():
        entry: dict[str, Any] = {"name": name, "shape": list(w.shape)}
        if quantization == "int8" and w.ndim == 2:
            q, scale = _quantize_int8(w)
            data = q.tobytes()
            entry.update(dtype="int8", scale=scale)
        else:
            data = w.astype("<f4").tobytes()
            entry.update(dtype="float32", scale=None)
        blob += b"\0" * (-len(blob) % _ALIGN)
        entry.update(offset=len(blob), nbytes=len(data))
        blob += data
        tensors.append(entry)
    (out_dir / "weights.bin").write_bytes(bytes(blob))
    descriptor = {
        "format": BUNDLE_FORMAT,
        "format_version": 1,
        "architecture": architecture["architecture"],
        "model_args": model.model_args,
        **{k: v for k, v in architecture.items() if k != "architecture"},
        "inputs": onnx_input_names(model.num_layers),
        "outputs": ["logits"],
        "opset": opset,
        "onnx": onnx_file,
        "quantization": {"scheme": "int8-symmetric-per-tensor" if quantization == "int8" else "none",
                         "applies_to": "2-D weight matrices" if quantization == "int8" else "nothing",
                         "dequantize": "w = q * scale"},
        "byte_order": "little",
        "weights": {"file": "weights.bin", "bytes": len(blob),
                    "sha256": hashlib.sha256(bytes(blob)).hexdigest()},
        "tensors": tensors,
    }
    path = out_dir / "model.json"
    path.write_text(json.dumps(descriptor, indent=2) + "\n")
    return path


def load_bundle(bundle_dir: str | Path) -> GraphModel:
    """Rebuild the (dequantized, eval-mode) model from ``model.json`` + ``weights.bin``: ``architecture``
    names its :data:`trainer.models.MODELS` entry."""
    bundle_dir = Path(bundle_dir)
    desc_path = bundle_dir / "model.json"
    if not desc_path.exists():
        raise FileNotFoundError(f"'bundle' expected {desc_path} (got no such file)")
    desc = json.loads(desc_path.read_text())
    if desc.get("format") != BUNDLE_FORMAT:
        raise ValueError(f"'{desc_path}' expected format {BUNDLE_FORMAT!r} (got {desc.get('format')!r})")
    blob = (bundle_dir / desc["weights"]["file"]).read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != desc["weights"]["sha256"]:
        raise ValueError(f"'{bundle_dir / desc['weights']['file']}' expected sha256 {desc['weights']['sha256']} "
                         f"(got {digest})")
    state: dict[str, torch.Tensor] = {}
    for t in desc["tensors"]:
        raw = blob[t["offset"] : t["offset"] + t["nbytes"]]
        if t["dtype"] == "int8":
            w = np.frombuffer(raw, dtype=np.int8).astype(np.float32) * np.float32(t["scale"])
        elif t["dtype"] == "float32":
            w = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        else:
            raise ValueError(f"'{desc_path}' tensor {t['name']} expected dtype int8 or float32 (got {t['dtype']})")
        state[t["name"]] = torch.from_numpy(w.reshape(t["shape"]))
    model = build_model(desc["architecture"], **desc["model_args"])
    model.load_state_dict(state)
    model.eval()
    return model

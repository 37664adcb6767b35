"""Smaller variants of an exported ONNX model for the browser: fp16 and int8 (QDQ), both run by
onnxruntime-web's WASM backend.

``fp16`` (:func:`to_fp16`): onnxruntime's own float16 converter with the inputs and outputs kept float32 and the
aggregation kept float32: ``ScatterElements`` and the normalisation ops around it (:data:`FP32_OPS`) get
``Cast`` nodes around them, so sums over many neighbours never round or overflow in half precision. Weights
are stored in fp16 (half the file). onnxruntime's CPU/WASM backends have few fp16 kernels; they run a node
without one in float32 between inserted casts, so the result is fp32 arithmetic on fp16-rounded weights and
intermediate tensors.

``int8`` (:func:`to_int8`): ``onnxruntime.quantization.quantize_static`` in QDQ format: ``MatMul`` / ``Gemm``
weights int8 per output channel, their activations uint8 with min/max ranges calibrated on sampled training
subgraphs (``QuantizeLinear`` / ``DequantizeLinear`` pairs, which onnxruntime-web runs; the scatter
aggregation stays float32). The weights use 7 of their 8 bits (``reduce_range``): onnxruntime's uint8 x int8
kernel on x86 CPUs without VNNI (AVX2, AVX-512F) sums pairs of products in int16, which saturates with full
8-bit weights; there the int8 model agreed with fp32 on 83-94% of predictions instead of >= 97%, and the
native runtime no longer computed what onnxruntime-web computes. The model has to run the same everywhere.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx
    import onnxruntime as ort

__all__ = ["FP32_OPS", "VARIANTS", "accuracy", "session", "to_fp16", "to_int8"]

#: The variants the export writes, in order (``fp32`` is the exported model itself).
VARIANTS = ("fp32", "fp16", "int8")
#: Ops kept float32 in the fp16 variant: the scatter aggregation and the normalisations next to it.
FP32_OPS = ("ScatterElements", "ScatterND", "Div", "Sqrt", "Exp", "Clip", "ReduceSum", "ReduceMean", "ReduceMax",
            "Softmax")


def to_fp16(src: str | Path, dst: str | Path) -> Path:
    """Write the fp16 variant of ``src`` (float32 inputs/outputs, :data:`FP32_OPS` in float32) to ``dst``."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    proto = onnx.load(str(src))
    with _quiet("onnxruntime.transformers"):
        half = convert_float_to_float16(proto, keep_io_types=True, op_block_list=list(FP32_OPS))
    _sort_nodes(half.graph)  # the converter appends its input casts after their readers
    del half.graph.value_info[:]  # the converter's shape annotations: bulk that onnxruntime re-infers
    onnx.checker.check_model(half)
    onnx.save(half, str(dst))
    return Path(dst)


def _sort_nodes(graph: onnx.GraphProto) -> None:
    """Order ``graph``'s nodes so every node comes after the producers of what it reads (stable otherwise)."""
    from trainer.export import _node_reads

    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if _node_reads(n) <= available | _subgraph_locals(n)]
        if not ready:
            raise ValueError(f"'onnx graph' expected an acyclic graph (got {len(pending)} nodes with unmet inputs)")
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        pending = [n for n in pending if n not in ready]
    del graph.node[:]
    graph.node.extend(ordered)


def _subgraph_locals(node: onnx.NodeProto) -> set[str]:
    """Names produced inside a node's subgraphs (If/Loop bodies), which its reads include but never wait on."""
    names: set[str] = set()
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            names |= {i.name for i in sub.input} | {t.name for t in sub.initializer}
            for inner in sub.node:
                names.update(inner.output)
    return names


def to_int8(src: str | Path, dst: str | Path, calibration: Iterable[Mapping[str, np.ndarray]]) -> Path:
    """Write the int8 QDQ variant of ``src`` to ``dst``, activation ranges from the ``calibration`` feeds.

    The feeds are read one at a time, as the calibrator asks for them (it keeps only each tensor's min and max),
    so a generator of feeds holds one batch's features at once."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    feeds = iter(calibration)
    first = next(feeds, None)
    if first is None:
        raise ValueError("'calibration' expected at least one feed (got none)")

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = itertools.chain([first], feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            feed = next(self._it, None)
            return dict(feed) if feed is not None else None

    dst = Path(dst)
    # the calibrator writes an augmented model next to its working files; keep those out of the artifact
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp, _quiet("onnxruntime", "root"):
        staged = Path(tmp) / "model.onnx"
        quantize_static(str(src), str(staged), _Reader(), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8, reduce_range=True,
                        extra_options={"CalibTensorRangeSymmetric": False})
        staged.replace(dst)
    return dst


def session(path: str | Path) -> ort.InferenceSession:
    """An onnxruntime CPU session of the model at ``path`` (``.run(["logits"], feed)``). Without the CPU memory
    arena: a run's tensors go back when it ends, instead of each session keeping its largest run's memory."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def accuracy(outputs: Iterable[np.ndarray], labels: Iterable[np.ndarray]) -> float:
    """Share of labelled seeds (label >= 0) whose argmax logit is the label (nan when none is labelled)."""
    correct = total = 0
    for out, y in zip(outputs, labels, strict=True):
        labelled = np.asarray(y) >= 0
        correct += int((out.argmax(axis=1) == y)[labelled].sum())
        total += int(labelled.sum())
    return correct / total if total else float("nan")


@contextlib.contextmanager
def _quiet(*names: str):  # noqa: ANN202 - a context manager
    """Silence the quantization tools' per-call logging (they log at WARNING for expected situations)."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)

"""The invariants of the trained model and its export: blocking checks on the ``train`` and ``export`` assets.

- ``accuracy_recorded`` (train): validation and test accuracy are in the stats, finite and in [0, 1], the
  history's best epoch has that validation accuracy, and the weights load with ``weights_only=True``;
- ``export_files`` (export): ``model.onnx`` and every file the manifest lists are present with their recorded
  sizes, and the ONNX size is in the stats;
- ``onnx_matches_torch`` (export): the exported graph, run in onnxruntime on a fresh random subgraph (not the
  one the export verified on), gives the PyTorch model's logits within :data:`ONNX_TOLERANCE`.
"""

from __future__ import annotations

import math

from pipelines.checks.base import CheckInputs, Finding, StageCheck

__all__ = ["ACCURACY_RECORDED", "EXPORT_FILES", "ONNX_MATCHES_TORCH", "ONNX_TOLERANCE", "check_accuracy"]

ONNX_TOLERANCE = 1e-4
_CHECK_SEEDS, _CHECK_FANOUT, _CHECK_SEED = 32, 6, 20240611  # a subgraph other than the export's own


def check_accuracy(stats: dict, history: dict) -> Finding:
    """``val_acc``/``test_acc`` present, finite, in [0, 1]; ``val_acc`` is the history's value at its
    ``best_epoch`` (not necessarily its maximum: a gain below ``train.min_delta`` is no new best)."""
    f = Finding()
    for key in ("val_acc", "test_acc"):
        value = stats.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            f.fail(f"'stats.{key}' expected a number (got {value!r})")
            continue
        f.facts[key] = float(value)
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            f.fail(f"'stats.{key}' expected a finite accuracy in [0, 1] (got {value})")
    curve = list(history.get("val_acc", []))
    best = history.get("best_epoch")
    f.facts["evaluations"] = sum(1 for v in curve if isinstance(v, (int, float)) and math.isfinite(v))
    if not isinstance(best, int) or not 0 <= best < len(curve):
        f.fail(f"'history.json' expected a best_epoch in [0, {len(curve)}) (got {best!r})")
    elif "val_acc" in f.facts and not math.isclose(curve[best], f.facts["val_acc"], abs_tol=1e-12):
        f.fail(f"'stats.val_acc' expected the validation accuracy of best epoch {best}, {curve[best]} "
               f"(got {f.facts['val_acc']})")
    return f


def _accuracy_recorded(c: CheckInputs) -> Finding:
    import torch

    art = c.artifact
    if art.stats.get("task") == "link":  # ranking metrics instead of accuracies
        from pipelines.checks.link import check_link_metrics

        f = check_link_metrics(art.stats, art.json("history.json"))
    else:
        f = check_accuracy(art.stats, art.json("history.json"))
    try:
        state = torch.load(art.file("state_dict.pt"), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any load failure is the finding
        f.fail(f"'{art.path / 'state_dict.pt'}' expected weights loadable with weights_only=True (got {e})")
    else:
        f.facts["tensors"] = len(state)
    return f


def _export_files(c: CheckInputs) -> Finding:
    art = c.artifact
    f = Finding()
    if "model.onnx" not in art.files:
        f.fail(f"'{art.path}' expected model.onnx among its files (got {sorted(art.files)})")
    for name, info in sorted(art.files.items()):
        path = art.path / name
        if not path.is_file():
            f.fail(f"'{path}' expected a file (got none)")
            continue
        size = path.stat().st_size
        f.facts[f"{name}_bytes"] = size
        if size != info.bytes or size == 0:
            f.fail(f"'{path}' expected {info.bytes} bytes, more than 0 (got {size})")
    recorded = art.stats.get("onnx_bytes")
    if recorded != f.facts.get("model.onnx_bytes"):
        f.fail(f"'stats.onnx_bytes' expected the size of model.onnx {f.facts.get('model.onnx_bytes')} "
               f"(got {recorded!r})")
    return f


def _onnx_matches_torch(c: CheckInputs) -> Finding:
    from pipelines.stages.train import load_model
    from trainer.export import random_subgraph, verify_onnx

    if c.upstream("train").stats.get("task") == "link":
        from pipelines.checks.link import link_onnx_matches_torch

        return link_onnx_matches_torch(c)
    f = Finding()
    net = load_model(c.upstream("train"))
    example = random_subgraph(net.in_dim, net.num_layers, num_seeds=_CHECK_SEEDS, fanout=_CHECK_FANOUT,
                              seed=_CHECK_SEED)
    diff = float(verify_onnx(c.artifact.file("model.onnx"), net, example))
    f.facts.update({"max_abs_diff": diff, "tolerance": ONNX_TOLERANCE, "seeds": _CHECK_SEEDS,
                    "nodes": int(example[0].shape[0])})
    if not diff <= ONNX_TOLERANCE:
        f.fail(f"'{c.artifact.path / 'model.onnx'}' expected onnxruntime logits within {ONNX_TOLERANCE} of "
               f"PyTorch (got max |diff| {diff:.3g})")
    return f


ACCURACY_RECORDED = StageCheck(
    "accuracy_recorded",
    "Validation and test accuracy recorded, finite and in [0, 1] (that of the history's best epoch), and the "
    "weights load with torch.load(weights_only=True).",
    _accuracy_recorded,
    quarantine=False,
)
EXPORT_FILES = StageCheck(
    "export_files",
    "model.onnx and every listed file present, non-empty and of its recorded size; the ONNX size in the stats.",
    _export_files,
    quarantine=False,
)
ONNX_MATCHES_TORCH = StageCheck(
    "onnx_matches_torch",
    f"The exported graph in onnxruntime equals the PyTorch model within {ONNX_TOLERANCE} on a fresh random "
    "subgraph.",
    _onnx_matches_torch,
    quarantine=False,
)

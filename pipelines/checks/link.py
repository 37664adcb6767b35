"""The ``train`` and ``export`` checks of a link predictor (``train.task=link``; ``pipelines.checks.model``
hands over to these when the artifact's stats say ``task: link``).

- ranking metrics recorded: ``mrr``, ``hits@1/3/10`` and ``val_mrr`` present, finite and in [0, 1], Hits@k
  non-decreasing in k, MRR between Hits@1 and 1, and the history's best epoch has the recorded validation MRR
  (when training kept the best epoch);
- the exported scorer in onnxruntime equals PyTorch on a fresh random input, within the tolerance relative to
  the largest score (``trainer.link.export``).
"""

from __future__ import annotations

import math
from typing import Any

from pipelines.checks.base import CheckInputs, Finding

__all__ = ["check_link_metrics", "link_onnx_matches_torch"]

_KEYS = ("mrr", "hits@1", "hits@3", "hits@10", "val_mrr")
_CHECK_SEED = 20240611


def check_link_metrics(stats: dict[str, Any], history: dict[str, Any]) -> Finding:
    """See the module docstring."""
    f = Finding()
    for key in _KEYS:
        value = stats.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                or not 0.0 <= value <= 1.0:
            f.fail(f"'stats.{key}' expected a finite number in [0, 1] (got {value!r})")
        else:
            f.facts[key] = float(value)
    if all(k in f.facts for k in ("hits@1", "hits@3", "hits@10", "mrr")):
        if not f.facts["hits@1"] <= f.facts["hits@3"] <= f.facts["hits@10"]:
            f.fail(f"'stats.hits@k' expected non-decreasing in k (got {f.facts['hits@1']}, {f.facts['hits@3']}, "
                   f"{f.facts['hits@10']})")
        if not f.facts["hits@1"] - 1e-12 <= f.facts["mrr"]:
            f.fail(f"'stats.mrr' expected at least hits@1 {f.facts['hits@1']} (got {f.facts['mrr']})")
    curve = list(history.get("val_mrr", []))
    best = history.get("best_epoch")
    if not isinstance(best, int) or not 0 <= best < len(curve):
        f.fail(f"'history.json' expected a best_epoch in [0, {len(curve)}) (got {best!r})")
    return f


def link_onnx_matches_torch(c: CheckInputs) -> Finding:
    """onnxruntime vs PyTorch scores of the exported link scorer on a fresh random input."""
    from pipelines.stages.train_link import LINK_ONNX_TOLERANCE, load_scorer
    from trainer.link.export import link_example, verify_link_onnx

    f = Finding()
    scorer = load_scorer(c.upstream("train"))
    diff, scaled = verify_link_onnx(c.artifact.file("model.onnx"), scorer, link_example(scorer, 32, _CHECK_SEED))
    f.facts.update({"max_abs_diff": diff, "max_scaled_diff": scaled, "tolerance": LINK_ONNX_TOLERANCE})
    if not scaled <= LINK_ONNX_TOLERANCE:
        f.fail(f"'{c.artifact.path / 'model.onnx'}' expected onnxruntime scores within {LINK_ONNX_TOLERANCE} of "
               f"PyTorch, relative to the largest score (got max |diff| {diff:.3g}, scaled {scaled:.3g})")
    return f

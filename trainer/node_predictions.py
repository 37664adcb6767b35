"""Predictions by node id over a Strata data root: what the MLflow pyfunc (:mod:`trainer.mlflow_model`) answers
for an input frame with a ``node_id`` column.

The model knows the train artifact it was trained as (its model config: dataset and train version); the train
artifact's manifest names the ``reorder`` artifact holding the graph. Asked nodes are the ids the source gave them
(integers; for a graph with named nodes, the names: ``node_ids.parquet``'s ``original_id``); ``inverse.npy`` maps
them to Strata's ids, and :func:`trainer.layerwise.layerwise_logits` computes their full-neighbourhood logits
layer by layer over their frontier only, in ``memory_bytes``. The rows equal those ``strata predict`` writes for
the same nodes (``embedding``: the logits) up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["predict_nodes", "strata_ids"]

NODE_IDS_FILE = "node_ids.parquet"  # pipelines.core.nodeids.NODE_IDS_FILE (trainer cannot import pipelines)


def strata_ids(reorder: Any, node_ids: Sequence[Any]) -> np.ndarray:
    """Strata's ids (int64) of ``node_ids`` as the source names them: integers (the source's ids) or, for a
    graph with named nodes, strings. ``KeyError`` naming the first id the graph does not have."""
    import pyarrow.parquet as pq

    ids = list(node_ids)
    inverse = reorder.array("inverse.npy")  # the source's id -> Strata's id
    if ids and all(isinstance(i, str) for i in ids):
        if NODE_IDS_FILE not in reorder.files:
            raise ValueError(f"'node_id' expected integer ids (got strings; {reorder.path} is a graph with integer "
                             "ids)")
        found = pq.read_table(reorder.file(NODE_IDS_FILE), columns=["id", "original_id"],
                              filters=[("original_id", "in", sorted(set(ids)))]).to_pydict()
        by_name = dict(zip(found["original_id"], found["id"], strict=True))
        missing = [i for i in ids if i not in by_name]
        if missing:
            raise KeyError(f"'node_id' expected names of {reorder.dataset}'s nodes (got {missing[0]!r})")
        source = np.array([by_name[i] for i in ids], dtype=np.int64)
    else:
        try:
            source = np.array([int(i) for i in ids], dtype=np.int64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"'node_id' expected integer ids or names (got {ids[:5]!r})") from e
        bad = np.flatnonzero((source < 0) | (source >= len(inverse)))
        if len(bad):
            raise KeyError(f"'node_id' expected ids in [0, {len(inverse)}) (got {int(source[bad[0]])})")
    return np.asarray(inverse[source], dtype=np.int64)


def predict_nodes(model: Any, root: str | Path, dataset: str, train_version: str, node_ids: Sequence[Any],
                  memory_bytes: int = 256 << 20, device: str = "cpu") -> Any:
    """A pandas frame, one row per asked node in the order asked: ``node_id`` (as asked), ``predicted_class``,
    ``probability`` (softmax) and ``embedding`` (the logits), from ``model`` over the graph of the train artifact
    ``dataset``/``train_version`` under ``root``. ``FileNotFoundError`` naming the root when it lacks them."""
    import pandas as pd

    from storage_kernels.store import ArtifactStore
    from trainer.layerwise import LayerwiseGraph, layerwise_logits

    store = ArtifactStore(root, catalog=False)
    train = store.find(dataset, "train", train_version)
    reorder = store.find(dataset, "reorder", train.upstream.get("reorder", "")) if train is not None else None
    if train is None or reorder is None:
        missing = "train" if train is None else "reorder"
        raise FileNotFoundError(f"'root' expected the {missing} artifact of {dataset} (train {train_version}) under "
                                f"{root} (got none): pass params={{'root': DATA_ROOT}} or set STRATA_HOME to the data "
                                "root the model was trained in")
    nodes = strata_ids(reorder, node_ids)
    dim = reorder.stats.get("feature_dim") or reorder.array("features.npy").shape[1]
    store.tmp_dir.mkdir(parents=True, exist_ok=True)
    graph = LayerwiseGraph(np.asarray(reorder.array("indptr.npy")), reorder.array("indices.npy"),
                           reorder.file("features.npy"), int(dim), reorder.array("labels.npy"), {}, store.tmp_dir,
                           memory_bytes=memory_bytes)
    logits = layerwise_logits(model, graph, nodes, device)  # (len(nodes), classes)
    top = logits.argmax(axis=1)
    shifted = logits - logits[np.arange(len(logits)), top][:, None]
    prob = (1.0 / np.exp(shifted).sum(axis=1)).astype(np.float32)
    return pd.DataFrame({"node_id": list(node_ids), "predicted_class": top.astype(np.int32), "probability": prob,
                         "embedding": list(logits)})

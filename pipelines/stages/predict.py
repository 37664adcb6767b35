"""Predict stage: the trained model scores every node of the graph, layer-wise and streaming, into Parquet.

The ``predict`` artifact holds ``predictions.parquet``, one row per node in Strata's node order (row ``i`` is
node ``i`` of the ``reorder`` artifact the model was trained on), written row group by row group as the last
layer's intervals come out of :func:`trainer.layerwise.layerwise_stream` (full neighbourhood at every layer, in
``predict.memory_mb``): nothing of size ``N x classes`` is held in memory. Columns:

- ``node_id`` (int64): the node's id in the source the user gave (``perm[i]``: the ingest id, which is the
  source's own integer id; for a graph with named nodes its position in the node list);
- ``original_id`` (string, graphs with named nodes only): the node's name (:mod:`pipelines.core.nodeids`);
- ``predicted_class`` (int32) and ``probability`` (float32): the argmax of the softmax and its probability;
- ``embedding`` (fixed-size list of float32, unless ``predict.embedding=none``): the final layer's output (the
  logits; the built-in models have no separate classifier head) or, with ``predict.embedding=hidden``, the last
  layer's input (the representation the classifying layer reads).

The schema metadata says which (``strata.embedding``, ``strata.embedding_meaning``) and names the dataset and
the train and reorder versions. The version hashes the ``reorder`` and ``train`` versions and
``predict.embedding``; ``strata run`` does not run this stage unless asked (``--until predict`` or
``strata predict``): it is a full extra pass over the graph. :func:`lookup` answers a query by node id.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.core.formatting import format_bytes, markdown_table
from pipelines.core.graphio import feature_dim
from pipelines.core.nodeids import NodeNames, has_node_ids
from pipelines.core.progress import Progress
from pipelines.stages.common import StageResult, materialize
from pipelines.stages.train import load_model
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

if TYPE_CHECKING:
    import pyarrow as pa

    from storage_kernels.catalog import Catalog

__all__ = ["EMBEDDING_MEANING", "FORMAT_VERSION", "PREDICTIONS_FILE", "catalogued_predictions", "lookup", "run",
           "summary", "write_predictions"]

FORMAT_VERSION = 1
PREDICTIONS_FILE = "predictions.parquet"
#: What the ``embedding`` column holds, by ``predict.embedding`` (the Parquet's ``strata.embedding_meaning``).
EMBEDDING_MEANING = {
    "logits": "the final layer's output (logits): the model has no separate classifier head",
    "hidden": "the last layer's input (the previous layer's output after its ReLU): the representation the "
              "classifying layer reads",
}


def run(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, train: Artifact,
        progress: Progress | None = None) -> StageResult:
    """Score every node with ``train``'s model over ``reorder``'s graph and write the ``predict`` artifact."""
    if train.stats.get("task") == "link":
        raise ValueError(f"'{train.path}' expected a node classifier for predict (got a link predictor: "
                         "train.task=link scores pairs of nodes, not nodes)")

    def build(builder: ArtifactBuilder) -> None:
        path = builder.add_file(PREDICTIONS_FILE)
        about = {"dataset": cfg.dataset_name, "train_version": train.version, "reorder_version": reorder.version}
        builder.stats.update(write_predictions(path, reorder, train, cfg, store.tmp_dir, about, progress))

    return materialize(store, cfg, "predict", FORMAT_VERSION, {"reorder": reorder, "train": train}, build)


def _softmax_top(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's argmax and its softmax probability (float32, computed stably: shifted by the row's max)."""
    top = logits.argmax(axis=1)
    shifted = logits - logits[np.arange(len(logits)), top][:, None]  # the top entry is 0: exp 1
    return top.astype(np.int32), (1.0 / np.exp(shifted).sum(axis=1)).astype(np.float32)


def _schema(named: bool, embedding: str, dim: int, meta: dict[str, str]) -> pa.Schema:
    import pyarrow as pa

    fields = [pa.field("node_id", pa.int64(), nullable=False)]
    if named:
        fields.append(pa.field("original_id", pa.string()))
    fields += [pa.field("predicted_class", pa.int32(), nullable=False),
               pa.field("probability", pa.float32(), nullable=False)]
    if embedding != "none":
        fields.append(pa.field("embedding", pa.list_(pa.float32(), dim), nullable=False))
    return pa.schema(fields, metadata={f"strata.{k}": v for k, v in meta.items()})


def write_predictions(path: Path, reorder: Artifact, train: Artifact, cfg: PipelineConfig, scratch: Path,
                      about: dict[str, str], progress: Progress | None = None) -> dict[str, Any]:
    """Write ``path`` (the Parquet of the module docstring) for every node of ``reorder``'s graph, scored by
    ``train``'s model; returns the stats (rows, classes, the embedding and its width, the predicted class
    counts, the layer-wise passes: intervals and staging groups per layer, bytes read and staged)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer.device import resolve_device
    from trainer.layerwise import LayerwiseGraph, layerwise_stream

    pc = cfg.predict
    model = load_model(train)
    scratch.mkdir(parents=True, exist_ok=True)
    labels = reorder.array("labels.npy")  # memory-mapped, as the CSR: predict reads neither whole
    named = has_node_ids(reorder)
    # the names of an interval's nodes are scattered over node_ids.parquet: decoded row groups are kept in an
    # eighth of the budget (all of them for a graph whose names fit), the file opened once
    names_bytes = (pc.memory_mb << 20) // 8 if named else 0
    names = NodeNames(reorder, names_bytes) if named else None
    graph = LayerwiseGraph(np.asarray(reorder.array("indptr.npy")), reorder.array("indices.npy"),
                           reorder.file("features.npy"), feature_dim(reorder), labels, {}, scratch,
                           chunk_nodes=pc.chunk_nodes, memory_bytes=(pc.memory_mb << 20) - names_bytes,
                           num_threads=cfg.train.num_threads)
    n = graph.num_nodes
    perm = reorder.array("perm.npy")  # Strata's id -> the source's id
    args = model.model_args  # every hidden layer is hidden_dim wide: the last layer reads that (or the input)
    dim = int(args["out_dim"]) if pc.embedding != "hidden" else int(
        args["hidden_dim"] if args["num_layers"] > 1 else args["in_dim"])
    meta = {**about, "rows": "one per node, in Strata's node order: row i is node i of the reorder artifact",
            "embedding": pc.embedding, "embedding_dim": str(dim if pc.embedding != "none" else 0),
            "embedding_meaning": EMBEDDING_MEANING.get(pc.embedding, "no embedding column"),
            "architecture": str(train.json("model.json").get("architecture", "")), "num_classes": str(model.out_dim)}
    schema = _schema(named, pc.embedding, dim, meta)
    counts = np.zeros(int(model.out_dim), dtype=np.int64)
    report: list[dict[str, int]] = []
    pending: list[pa.RecordBatch] = []
    buffered = done = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        def flush(final: bool) -> None:
            nonlocal pending, buffered
            while buffered >= pc.row_group_rows or (final and buffered):
                table = pa.Table.from_batches(pending, schema)
                writer.write_table(table.slice(0, pc.row_group_rows), row_group_size=pc.row_group_rows)
                rest = table.slice(pc.row_group_rows)
                pending, buffered = rest.to_batches(), rest.num_rows

        rows = contextlib.closing(layerwise_stream(model, graph, None, resolve_device(cfg.train.device),
                                                   hidden=pc.embedding == "hidden", report=report))
        with rows as parts:  # closed on an error too: its scratch tables go at once
            for part in parts:
                top, prob = _softmax_top(part.logits)
                counts += np.bincount(top, minlength=len(counts))
                ids = np.asarray(perm[part.nodes], dtype=np.int64)
                columns: list[pa.Array] = [pa.array(ids)]
                if names is not None:  # the row groups of node_ids.parquet holding these ids (most of them)
                    columns.append(names.take(ids))
                columns += [pa.array(top), pa.array(prob)]
                if pc.embedding != "none":
                    values = np.ascontiguousarray(part.hidden if pc.embedding == "hidden" else part.logits)
                    columns.append(pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), dim))
                pending.append(pa.RecordBatch.from_arrays(columns, schema=schema))
                buffered += len(part.nodes)
                done += len(part.nodes)
                flush(final=False)
                if progress:
                    progress("predict: nodes", done, n)
        flush(final=True)
    if done != n:
        raise RuntimeError(f"'{path}' expected {n} rows, one per node (got {done})")
    return {"rows": n, "num_classes": int(model.out_dim), "embedding": pc.embedding,
            "embedding_dim": dim if pc.embedding != "none" else 0, "named_nodes": named,
            "predicted_class_counts": counts.tolist(), "intervals": report[-1]["intervals"] if report else 0,
            "layer_intervals": [step["intervals"] for step in report],
            "layer_groups": [step["groups"] for step in report], "layer_staged": [step["staged"] for step in report],
            "bytes_read": int(sum(step["bytes_read"] for step in report)),
            "bytes_staged": int(sum(step["bytes_staged"] for step in report)), "predictions_bytes": path.stat().st_size}


def lookup(path: str | Path, node_ids: Sequence[int] | Sequence[str], columns: Sequence[str] | None = None
           ) -> pa.Table:
    """The rows of ``path`` (a ``predictions.parquet``) whose ``node_id`` is among ``node_ids`` (integers) or,
    for strings, whose ``original_id`` is; in the order asked, one row per id found (DuckDB over the file:
    ``SELECT * FROM read_parquet(path) WHERE node_id IN (...)``)."""
    import duckdb

    ids = list(node_ids)
    key = "original_id" if ids and all(isinstance(i, str) for i in ids) else "node_id"
    if key == "node_id":
        try:
            ids = [int(i) for i in ids]
        except (TypeError, ValueError) as e:
            raise ValueError(f"'node_ids' expected integers or strings (original ids) (got {ids[:5]!r})") from e
    wanted = ", ".join(f'p."{c}"' for c in columns) if columns else "p.*"
    con = duckdb.connect()  # its own connection: never the module default (pipelines share the process)
    try:
        if key == "original_id" and key not in {c[0] for c in con.execute(
                "DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()}:
            raise ValueError(f"'{path}' expected an original_id column for string ids (got a graph with integer ids)")
        return con.sql(
            f"SELECT {wanted} FROM read_parquet($path) p JOIN (SELECT unnest($ids) AS id, "
            f"generate_subscripts($ids, 1) AS k) q ON p.{key} = q.id ORDER BY q.k",
            params={"path": str(path), "ids": ids}).to_arrow_table()
    finally:
        con.close()


def catalogued_predictions(catalog: Catalog, dataset: str, version: str | None = None) -> Path:
    """The ``predictions.parquet`` of ``dataset``'s ``predict`` artifact as the DuckDB catalog records it: the
    newest, or the one of ``version`` (a unique prefix). ``LookupError`` naming what is missing."""
    if version is not None:
        record = catalog.get(version, dataset, "predict")
        if record is None:
            raise LookupError(f"'version' expected a predict artifact of {dataset} in the catalog (got {version!r}; "
                              f"`strata catalog ls --stage predict` lists them)")
    else:
        found = catalog.list_artifacts(dataset, "predict")
        if not found:
            raise LookupError(f"'predict' artifact of {dataset} expected in the catalog (got none): run `strata "
                              "predict` first")
        record = found[-1]  # ordered by created_at: the newest last
    return Path(record["path"]) / PREDICTIONS_FILE


def summary(artifact: Artifact) -> dict[str, Any]:
    """Rows, embedding and file size (asset metadata)."""
    s = artifact.stats
    rows = {k: s[k] for k in ("rows", "num_classes", "embedding", "embedding_dim", "intervals") if k in s}
    if "predictions_bytes" in s:
        rows["predictions_bytes"] = format_bytes(int(s["predictions_bytes"]))
    return {"predictions": markdown_table(rows), "predictions_path": str(artifact.file(PREDICTIONS_FILE))}

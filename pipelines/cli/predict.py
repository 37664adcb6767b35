"""``strata predict [--out F.parquet]``: the predict stage's extra option and its checks before the run.

``strata predict`` is ``strata run --until predict`` for a model that is already trained: before anything runs it
resolves the stages up to ``train`` as ``strata run --until train`` would reuse them, building nothing
(:func:`pipelines.stages.common.reuse_only`), and without a train artifact for the configuration it says so in
one line and exits 2 (train it first: ``strata run --until train``). A bad ``--out`` (its directory missing or
not writable, a directory in its place) exits 2 before the run too. The stage writes the versioned ``predict``
artifact (catalogued like every artifact); ``--out`` then copies its ``predictions.parquet`` to ``F`` (a
temporary file beside ``F``, renamed into place: ``F`` is never half written). The summary gets a
``predictions`` entry (the artifact's file, ``--out``, rows).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from pipelines.cli.options import err, fail, load_config, strata_paths
from pipelines.cli.stage_options import StageOptions, option_param

__all__ = ["PREDICT_OPTIONS", "check_out", "copy_atomically", "require_trained"]


def check_out(out: Path) -> None:
    """Exit 2 (one line) unless ``out`` can be written: an existing, writable directory and no directory at
    ``out`` itself."""
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        fail(f"'--out' expected a Parquet file path (got a directory: {out})", code=2)
    if not parent.is_dir():
        fail(f"'--out' expected an existing directory for {out.name} (got {parent}: no such directory)", code=2)
    if not os.access(parent, os.W_OK | os.X_OK):
        fail(f"'--out' expected a writable directory (got {parent}: not writable)", code=2)


def require_trained(run: Mapping[str, Any]) -> None:
    """Exit 2 (one line) unless the train artifact the run's configuration would reuse exists; builds nothing
    (every stage up to train is a lookup; their files are verified by the run itself)."""
    from pipelines.runner import StageRunner
    from pipelines.stages.common import ArtifactMissing, reuse_only

    flags = [f"{key}={run[key]}" for key in ("memory_budget", "policy") if run.get(key) is not None]
    if run.get("dataset") is None and run.get("config") is None:
        fail("'--dataset' expected a built-in name or source spec (got none; see `strata datasets`)", code=2)
    cfg = load_config(run.get("dataset"), run.get("config"), [*(run.get("overrides") or []), *flags,
                                                               "verify.on_reuse=off"])
    paths = strata_paths(run.get("root"))
    with reuse_only():
        try:
            StageRunner(cfg, paths.store()).result("train")
        except ArtifactMissing as e:
            fail(f"'train' artifact of {cfg.dataset_name} expected under {paths.root} (got none for these settings: "
                 f"stage {e.stage} version {e.version} was never built): run `strata run --until train` with the "
                 "same settings first", code=2)


def copy_atomically(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` through a temporary file beside ``dst``, renamed into place (``dst`` is never
    half written; the temporary file is removed on failure)."""
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _predict_hook(out: Path | None, run: Mapping[str, Any]) -> Callable[[dict[str, Any]], None]:
    if out is not None:
        check_out(out)
    require_trained(run)

    def after(summary: dict[str, Any]) -> None:
        from pipelines.stages.predict import PREDICTIONS_FILE

        predict = next((a for a in summary["artifacts"] if a["stage"] == "predict"), None)
        if predict is None:
            raise RuntimeError("'predict' expected among the run's artifacts (got none)")
        path = Path(predict["path"]) / PREDICTIONS_FILE
        info: dict[str, Any] = {"artifact_file": str(path), "version": predict["version"]}
        if out is not None:
            copy_atomically(path, out)
            info["out"] = str(out)
        import pyarrow.parquet as pq

        info["rows"] = pq.ParquetFile(path).metadata.num_rows
        summary["predictions"] = info
        err.print(f"strata predict: {info['rows']} rows in {info.get('out', path)}"
                  + ("" if out is not None else " (the artifact's file; --out FILE copies it)"), highlight=False)

    return after


PREDICT_OPTIONS = StageOptions(
    params={
        "out": option_param(
            "out", typer.Option(None, "--out", "-o", help="Also write the predictions to this Parquet file (a copy "
                                "of the predict artifact's predictions.parquet: node_id, predicted_class, "
                                "probability, embedding; docs/usage/predict.md)."), Path | None),
    },
    hook=_predict_hook,
    sees_run=True,
    doc="Score every node with the trained model (layer-wise, full neighbourhood, within the memory budget) into "
        "the predict artifact's predictions.parquet, and --out FILE. Needs the train artifact of the same settings "
        "(`strata run --until train`); builds nothing before it. Query by node id: `strata catalog predictions`.",
)

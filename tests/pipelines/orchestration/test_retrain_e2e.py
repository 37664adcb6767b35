"""A changed source is retrained end to end: an edge-list dataset materialized once, its edge file changed, the
source sensor's run request executed as Dagster would launch it (``retrain_job`` with the request's run config
and tags, in process, on an in-memory instance); a new ingest version and a new registered model version
appear, and the next sensor tick requests nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np

from pipelines.config import PipelineConfig
from pipelines.orchestration.definitions import RETRAIN_JOB, STRATA_JOB, make_definitions
from pipelines.orchestration.resources import build_resources
from tests.pipelines.stage_fixtures import random_symmetric_csr

_QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
_N, _CLASSES, _DIM = 300, 3, 8


def _write_source(data: Path) -> PipelineConfig:
    """An edge-list source (CSV edges, .npy features and labels a GNN can learn) and short training settings:
    the resource's defaults, which the sensor's run config (dataset, source options, warm start) keeps."""
    rng = np.random.default_rng(0)
    indptr, indices = random_symmetric_csr(_N, 6, seed=0)
    src = np.repeat(np.arange(_N), np.diff(indptr))
    keep = src < indices  # one row per undirected edge
    data.mkdir()
    np.savetxt(data / "edges.csv", np.stack([src[keep], indices[keep]], 1), fmt="%d", delimiter=",")
    labels = rng.integers(0, _CLASSES, _N)
    centroids = rng.normal(size=(_CLASSES, _DIM))
    np.save(data / "x.npy", (centroids[labels] + 0.5 * rng.normal(size=(_N, _DIM))).astype(np.float32))
    np.save(data / "y.npy", labels.astype(np.int64))
    return PipelineConfig.load(dataset=f"edgelist:{data / 'edges.csv'}", overrides=[
        f"ingest.options.features={data / 'x.npy'}", f"ingest.options.labels={data / 'y.npy'}",
        f"ingest.options.num_nodes={_N}", "sample.epochs=1", "train.epochs=3", "train.hidden_dim=16"])


def _metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_a_changed_source_is_reingested_and_retrained_once(tmp_path: Path) -> None:
    cfg = _write_source(tmp_path / "data")
    root = str(tmp_path / "root")
    defs = make_definitions(build_resources(root=root, config=cfg))
    sensor = defs.resolve_sensor_def("source_sensor")
    with dg.DagsterInstance.ephemeral() as instance:  # in memory: no sqlite event log to write (seconds here)
        def tick(cursor: str | None) -> dg.SensorResult:
            context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                              resources=defs.resources, sensor_name="source_sensor")
            return sensor(context)

        first = defs.resolve_job_def(STRATA_JOB).execute_in_process(run_config=_QUIET, instance=instance)
        ingest1, export1 = _metadata(first, "ingest"), _metadata(first, "export")
        assert export1["model_version"] == 1
        baseline = tick(None)
        assert baseline.run_requests == [] and "baseline" in str(baseline.skip_reason)

        edges = Path(cfg.dataset.split(":", 1)[1])
        with edges.open("a") as f:  # new edges: the source's content changed
            f.write("0,299\n1,298\n2,297\n")
        changed = tick(baseline.cursor)
        [request] = changed.run_requests
        job = defs.resolve_job_def(request.job_name or RETRAIN_JOB)
        assert job.name == RETRAIN_JOB
        retrain = job.execute_in_process(run_config={**request.run_config, **_QUIET}, tags=request.tags,
                                         instance=instance)
        ingest2, train2, export2 = (_metadata(retrain, a) for a in ("ingest", "train", "export"))
        assert ingest2["version"] != ingest1["version"] and not ingest2["reused"]
        assert ingest2["num_edges"] == ingest1["num_edges"] + 6  # three new undirected edges
        assert not train2["reused"] and train2["warm_start_from"] == "1"  # from the champion of the first run
        assert export2["model_version"] == 2
        run = instance.get_run_by_id(retrain.run_id)
        assert run is not None and run.tags["strata/source_fingerprint"] == request.tags["strata/source_fingerprint"]

        after = tick(changed.cursor)  # the change was handled: nothing more is requested
        assert after.run_requests == [] and "unchanged" in str(after.skip_reason)

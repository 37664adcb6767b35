"""Asset ``samples``: every mini-batch of every epoch, sampled offline (the access trace).

Wraps :func:`pipelines.stages.sample.run`.
"""

from typing import Any

import dagster as dg
import numpy as np

from pipelines.assets.common import GROUP_PREPROCESS, markdown_table, run_stage_asset
from pipelines.resources import RunReporter, StrataResource

__all__ = ["samples"]


def describe(result: Any) -> dict[str, Any]:
    """Batches, seeds and sampled input nodes per split."""
    table = result.artifact.parquet("batches.parquet")
    split = np.asarray(table.column("split").to_pylist(), dtype=object)
    seeds = table.column("num_seeds").to_numpy()
    inputs = np.asarray([h[-1] for h in table.column("hop_counts").to_pylist()], dtype=np.int64)
    rows = []
    for name in ("train", "val", "test"):
        mask = split == name
        count = int(mask.sum())
        rows.append(
            {
                "split": name,
                "batches": count,
                "seeds": int(seeds[mask].sum()),
                "input nodes / batch": float(inputs[mask].mean()) if count else 0.0,
            }
        )
    return {"batches_by_split": dg.MetadataValue.md(markdown_table(rows))}


@dg.asset(
    name="samples",
    deps=["ordering", "partitioning"],
    code_version="1",
    group_name=GROUP_PREPROCESS,
    kinds={"numpy", "parquet"},
    description="Offline-sampled layered blocks of every training epoch and of the val/test batches, with "
    "a Parquet batch index; its node lists are the access trace the planner counts.",
)
def samples(
    context: dg.AssetExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.MaterializeResult:
    """Sample every batch (``pipelines.stages.sample.run``)."""
    return run_stage_asset(context, strata, reporter, "samples", describe)

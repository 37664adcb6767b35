"""Strata's pipeline: the stage graph, its configuration, the methods it runs, and every way to drive it.

The tree reads as the architecture (docs/ARCHITECTURE.md has the picture):

- :mod:`pipelines.core`: the shared vocabulary (data-root paths, formatting, the ordered graph, memory limits);
- :mod:`pipelines.methods`: the registries of methods a configuration names (sources, orders, partitioners,
  samplers, the cache/batching policies: one seed system each);
- :mod:`pipelines.config` and :mod:`pipelines.budget`: one typed configuration per run, sized by one budget;
- :mod:`pipelines.tracking`, :mod:`pipelines.ops`, :mod:`pipelines.web`: MLflow, data-root maintenance and the
  browser app, which the stages use;
- :mod:`pipelines.stages`: one module per stage; :mod:`pipelines.checks`: the invariants of their artifacts;
- :mod:`pipelines.graph` and :mod:`pipelines.runner`: the stage graph, written once, and the Dagster-free runner;
- :mod:`pipelines.batches`: the public API for a training loop of one's own;
- :mod:`pipelines.shards`, :mod:`pipelines.orchestration`, :mod:`pipelines.bench`, :mod:`pipelines.cli`: the
  sharded stages, the Dagster layer, the benchmarks and the ``strata`` command.

Old module names (before this layout) keep working through :mod:`storage_kernels.moved`.
"""

from storage_kernels.moved import install_moved

#: Where each module of the flat layout went.
MOVED = {
    "pipelines.settings": "pipelines.core.paths",
    "pipelines.formatting": "pipelines.core.formatting",
    "pipelines.confine": "pipelines.core.confine",
    "pipelines.stages.graphio": "pipelines.core.graphio",
    "pipelines.sources": "pipelines.methods.sources",
    "pipelines.orders": "pipelines.methods.orders",
    "pipelines.stages.locality": "pipelines.methods.orders.locality",
    "pipelines.partitioners": "pipelines.methods.partitioners",
    "pipelines.samplers": "pipelines.methods.samplers",
    "pipelines.policies": "pipelines.methods.policies",
    "pipelines.policies.diskgnn": "pipelines.methods.policies.diskgnn.policy",
    "pipelines.policies.diskgnn_layout": "pipelines.methods.policies.diskgnn.layout",
    "pipelines.policies.diskcache": "pipelines.methods.policies.diskgnn.search",
    "pipelines.policies.window": "pipelines.methods.policies.diskgnn.window",
    "pipelines.policies.mariusgnn": "pipelines.methods.policies.mariusgnn.policy",
    "pipelines.policies.marius_tuning": "pipelines.methods.policies.mariusgnn.tuning",
    "pipelines.policies.marius_orders": "trainer.partition_orders",
    "pipelines.policies.outre": "pipelines.methods.policies.outre.policy",
    "pipelines.policies.outre_trace": "pipelines.methods.policies.outre.trace",
    "pipelines.stages.link": "pipelines.stages.train_link",
    "pipelines.run_logging": "pipelines.tracking.run_logging",
    "pipelines.run_plots": "pipelines.tracking.plots",
    "pipelines.links": "pipelines.tracking.links",
    "pipelines.model_registry": "pipelines.tracking.model_registry",
    "pipelines.warmstart": "pipelines.tracking.warmstart",
    "pipelines.recovery": "pipelines.ops.recovery",
    "pipelines.verify": "pipelines.ops.verify",
    "pipelines.gc": "pipelines.ops.gc",
    "pipelines.webapp": "pipelines.web.app",
    "pipelines.browser": "pipelines.web.browser",
    "pipelines.checks_aligned": "pipelines.checks.aligned",
    "pipelines.checks_link": "pipelines.checks.link",
    "pipelines.checks_model": "pipelines.checks.model",
    "pipelines.definitions": "pipelines.orchestration.definitions",
    "pipelines.assets": "pipelines.orchestration.assets",
    "pipelines.resources": "pipelines.orchestration.resources",
    "pipelines.partitioned": "pipelines.orchestration.partitions",
    "pipelines.retrain": "pipelines.orchestration.sensors",
    "pipelines.gc_job": "pipelines.orchestration.jobs",
    "pipelines.source_watch": "pipelines.orchestration.source_watch",
    "pipelines.ui_datasets": "pipelines.orchestration.ui_datasets",
    "pipelines.sample_shards": "pipelines.shards.sample",
    "pipelines.pack_shards": "pipelines.shards.pack",
    "pipelines.bench_worker": "pipelines.bench.worker",
    "pipelines.bench_link": "pipelines.bench.link",
    "pipelines.bench_link_prefetch": "pipelines.bench.link_prefetch",
    "pipelines.bench_locality": "pipelines.bench.locality",
    "pipelines.clierrors": "pipelines.cli.errors",
    "pipelines.models_cli": "pipelines.cli.models",
    "pipelines.web_cli": "pipelines.cli.web",
    "pipelines.summary": "pipelines.cli.summary",
    "pipelines.distributed": "pipelines.cli.distributed",
    "pipelines.ui_process": "pipelines.cli.ui_process",
}

install_moved(MOVED)

"""The Dagster layer: strata's stage graph as assets, with the jobs, schedules, sensor and resources that run it.

- :mod:`~pipelines.orchestration.definitions`: ``defs``, wiring only (what ``dagster dev`` and ``strata ui`` load);
- :mod:`~pipelines.orchestration.assets`: one asset per stage and one blocking asset check per stage check;
- :mod:`~pipelines.orchestration.partitions`: the opt-in partitioned ``sample`` and ``pack`` assets and their jobs;
- :mod:`~pipelines.orchestration.jobs`: ``strata_job``, the per-dataset jobs, ``retrain_job``, ``artifact_gc_job``;
- :mod:`~pipelines.orchestration.schedules`: ``weekly_retrain`` and ``weekly_gc``;
- :mod:`~pipelines.orchestration.sensors`: ``source_sensor`` (with :mod:`~pipelines.orchestration.source_watch`,
  the source files' fingerprints);
- :mod:`~pipelines.orchestration.resources`: the ``strata`` resource (data root, typed configuration) and the
  run reporter;
- :mod:`~pipelines.orchestration.ui_datasets`: which datasets the UI offers and which one it defaults to.
"""

-- Strata catalog: an index over the artifact manifests (<root>/<dataset>/<stage>/<version>/manifest.json).
-- It is not the truth: Catalog.rebuild(root) re-creates artifacts, files and lineage from the manifests.
-- Metrics are recorded here; a rebuild restores the ones a manifest holds (stats, timings). Versions hash (stage, format_version, params, upstream) and not the
-- dataset, so every table carries (dataset, stage, version).

CREATE TABLE IF NOT EXISTS artifacts (
    dataset         VARCHAR NOT NULL,
    stage           VARCHAR NOT NULL,
    version         VARCHAR NOT NULL,
    path            VARCHAR NOT NULL,
    bytes           BIGINT NOT NULL,
    created_at      TIMESTAMP NOT NULL,   -- UTC
    format_version  BIGINT,
    library_version VARCHAR,
    params          JSON,
    stats           JSON,
    PRIMARY KEY (dataset, stage, version)
);

CREATE TABLE IF NOT EXISTS files (
    dataset     VARCHAR NOT NULL,
    stage       VARCHAR NOT NULL,
    version     VARCHAR NOT NULL,
    name        VARCHAR NOT NULL,
    dtype       VARCHAR,                  -- NULL for raw files
    shape       BIGINT[],                 -- NULL for raw files
    bytes       BIGINT NOT NULL,
    checksum    VARCHAR NOT NULL,
    data_offset BIGINT NOT NULL,
    PRIMARY KEY (dataset, stage, version, name)
);

CREATE TABLE IF NOT EXISTS lineage (
    dataset          VARCHAR NOT NULL,
    stage            VARCHAR NOT NULL,
    version          VARCHAR NOT NULL,
    upstream_stage   VARCHAR NOT NULL,
    upstream_version VARCHAR NOT NULL,
    PRIMARY KEY (dataset, stage, version, upstream_stage)
);

CREATE TABLE IF NOT EXISTS metrics (
    dataset     VARCHAR NOT NULL,
    stage       VARCHAR NOT NULL,
    version     VARCHAR NOT NULL,
    key         VARCHAR NOT NULL,
    value       DOUBLE,
    step        BIGINT,
    recorded_at TIMESTAMP NOT NULL        -- UTC
);

"""Graph sources for the ingest stage: synthetic, Planetoid, OGB raw directories and edge lists.

Every reader returns a :class:`GraphSource` (streaming edge and feature chunks, labels, splits); ingest calls
:func:`validate_source` on it and writes the ``graph`` artifact. :func:`parse_source_spec` turns a dataset
spec (``tiny``, ``demo``, ``synthetic:...``, ``planetoid:DIR/NAME``, ``ogb:DIR``, ``edgelist:FILE``) into one.
"""

from pipelines.sources.base import GraphSource, dedupe_csr_rows
from pipelines.sources.edgelist import edgelist_source
from pipelines.sources.ogb import ogb_source
from pipelines.sources.planetoid import RestrictedUnpickler, planetoid_source
from pipelines.sources.spec import BUILTIN_DATASETS, SOURCE_KINDS, BuiltinDataset, parse_source_spec
from pipelines.sources.synthetic import SyntheticGraph, SyntheticParams, synthetic_source
from pipelines.sources.validate import validate_source

__all__ = [
    "BUILTIN_DATASETS",
    "SOURCE_KINDS",
    "BuiltinDataset",
    "GraphSource",
    "RestrictedUnpickler",
    "SyntheticGraph",
    "SyntheticParams",
    "dedupe_csr_rows",
    "edgelist_source",
    "ogb_source",
    "parse_source_spec",
    "planetoid_source",
    "synthetic_source",
    "validate_source",
]

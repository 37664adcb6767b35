"""Graph sources for the ingest stage: synthetic, Planetoid, OGB raw directories and edge lists.

Every reader returns a :class:`GraphSource` (streaming edge and feature chunks, labels, splits); ingest calls
:func:`validate_source` on it and writes the graph. :func:`parse_source_spec` turns a dataset spec (``tiny``,
``demo``, or ``KIND:...`` for a kind registered in :data:`SOURCE_KINDS`) into one. Each reader module
registers its kind; the import below is the registration (a new kind is one module plus one name here).
"""

from pipelines.methods.sources import edgelist, ogb, planetoid, synthetic  # noqa: F401  (registration)
from pipelines.methods.sources.base import GraphSource, dedupe_csr_rows
from pipelines.methods.sources.edgelist import edgelist_source
from pipelines.methods.sources.kinds import SOURCE_KINDS, SourceKind
from pipelines.methods.sources.ogb import ogb_source
from pipelines.methods.sources.planetoid import RestrictedUnpickler, planetoid_source
from pipelines.methods.sources.spec import BUILTIN_DATASETS, BuiltinDataset, parse_source_spec
from pipelines.methods.sources.synthetic import SyntheticGraph, SyntheticParams, synthetic_source
from pipelines.methods.sources.validate import validate_source

__all__ = [
    "BUILTIN_DATASETS",
    "SOURCE_KINDS",
    "BuiltinDataset",
    "GraphSource",
    "RestrictedUnpickler",
    "SourceKind",
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

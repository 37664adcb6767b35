"""Source specs: built-ins, synthetic keys, kinds, options and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.methods.sources.spec import BUILTIN_DATASETS, SOURCE_KINDS, parse_source_spec
from pipelines.methods.sources.synthetic import SYNTHETIC_KEYS, synthetic_source
from tests.pipelines.source_fixtures import PLANETOID_DIR, collect_edges, hand_graph, write_ogb_dir


def test_builtin_table_lists_tiny_and_demo() -> None:
    assert set(BUILTIN_DATASETS) >= {"tiny", "demo"}
    tiny, demo = BUILTIN_DATASETS["tiny"], BUILTIN_DATASETS["demo"]
    assert 2_000 <= tiny.params["nodes"] <= 3_000 and tiny.params["dim"] == 32
    assert 4 <= tiny.params["classes"] <= 8
    assert demo.params["nodes"] == 200_000 and demo.params["dim"] == 128
    assert all(d.description for d in BUILTIN_DATASETS.values())
    assert tiny.spec.startswith("synthetic:nodes=")


def test_tiny_is_the_synthetic_spec_it_names() -> None:
    tiny = parse_source_spec("tiny")
    assert tiny.name == "tiny" and tiny.description["builtin"] == "tiny"
    same = parse_source_spec(BUILTIN_DATASETS["tiny"].spec)
    np.testing.assert_array_equal(collect_edges(tiny)[0], collect_edges(same)[0])
    np.testing.assert_array_equal(tiny.labels, same.labels)


def test_synthetic_spec_keys_and_options() -> None:
    source = parse_source_spec(
        " synthetic:nodes=3000, degree=6,dim=8,classes=3,seed=4 ", {"chunk_nodes": "4096"}
    )
    direct = synthetic_source(3000, 6, 8, 3, 4)
    assert (source.num_nodes, source.feature_dim, source.num_classes) == (3000, 8, 3)
    np.testing.assert_array_equal(source.train_idx, direct.train_idx)
    assert source.name == "synthetic_n3000_d6_f8_c3_s4_h0.8"


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("synthetic:nodes=100,colour=3", None, r"'synthetic.colour' expected one of \['nodes', 'degree'"),
        ("synthetic:nodes=100,dim", None, r"expected key=value items separated by commas \(got 'dim'\)"),
        ("synthetic:nodes=1e3", None, r"'synthetic.nodes' expected an integer \(got '1e3'\)"),
        ("synthetic:degree=3", None, r"'synthetic.nodes' expected in the spec"),
        ("synthetic:nodes=10,nodes=20", None, r"'synthetic.nodes' expected once"),
        ("tiny", {"nodes": "5"}, r"'option nodes' expected one of \['chunk_nodes'\] for synthetic sources"),
        ("cora", None, r"'dataset' expected a built-in name \['tiny', 'demo'\] or a spec"),
        ("parquet:x.pq", None, r"'dataset' expected a built-in name"),
        ("ogb:", None, r"'ogb:' expected a path"),
        ("planetoid:/", None, r"expected planetoid:DIR/NAME"),
        (
            "planetoid:x/cora",
            {"normalize_features": "maybe"},
            r"'option normalize_features' expected one of true/false",
        ),
        ("edgelist:e.csv", {"labels": "y.npy"},
         r"'option features' expected for edgelist sources, e.g. --set ingest.options.features=PATH.npy"),
        ("edgelist:e.csv", {"feature": "x.npy"}, r"'option feature' expected one of \['features', 'labels'"),
    ],
)
def test_spec_errors(spec: str, options: dict | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_source_spec(spec, options)


def test_every_kind_documents_its_options() -> None:
    assert set(SOURCE_KINDS) == {"synthetic", "planetoid", "ogb", "edgelist"}
    assert all(kind.syntax.startswith(f"{name}:") for name, kind in SOURCE_KINDS.items())
    assert set(SYNTHETIC_KEYS) >= {"nodes", "degree", "dim", "classes", "seed"}


def test_ogb_and_edgelist_specs(tmp_path: Path) -> None:
    root = write_ogb_dir(tmp_path / "ogbn_tiny")
    source = parse_source_spec(f"ogb:{root}", {"split": "random", "undirected": "false"})
    assert source.name == "ogbn_tiny" and not source.undirected
    g = hand_graph()
    (tmp_path / "e.csv").write_text("0,1\n1,2\n0,2\n3,4\n")
    np.save(tmp_path / "x.npy", g["features"])
    np.save(tmp_path / "y.npy", g["labels"])
    options = {
        "features": str(tmp_path / "x.npy"),
        "labels": str(tmp_path / "y.npy"),
        "num_nodes": "6",
        "seed": "1",
    }
    edges = parse_source_spec(f"edgelist:{tmp_path / 'e.csv'}", options)
    assert edges.num_nodes == 6 and edges.description["seed"] == 1
    for described in (source, edges, parse_source_spec("tiny")):
        json.dumps(described.description)  # ingest records it in the manifest
    with pytest.raises(FileNotFoundError, match="no such file"):
        parse_source_spec(f"edgelist:{tmp_path / 'missing.csv'}", options)


@pytest.mark.skipif(
    not (PLANETOID_DIR / "ind.cora.graph").exists(), reason=f"Planetoid files absent at {PLANETOID_DIR}"
)
def test_planetoid_spec() -> None:
    source = parse_source_spec(f"planetoid:{PLANETOID_DIR / 'cora'}", {"normalize_features": "false"})
    assert source.name == "cora" and source.description["normalize_features"] is False

"""Edge lists with named nodes (string ids): a node list numbers them, ingest keeps the names, and the names
follow each node through reorder to the web export and the batches; bad input gets one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.core.nodeids import NODE_IDS_FILE, original_ids
from pipelines.methods.sources.edgelist import edgelist_source
from pipelines.methods.sources.nodelist import NodeIndex, read_node_list
from pipelines.methods.sources.validate import validate_source
from tests.pipelines.source_fixtures import collect_edges, edge_set

CLASSES = 3


def _name(k: int) -> str:
    return f"https://example.org/user/{k},x"  # a comma: quoted in CSV edge files


def _feature(k: int) -> list[float]:
    return [float(k), float(k % CLASSES), 1.0]


def _write(tmp_path: Path, n: int = 12, seed: int = 0) -> dict[str, object]:
    """Nodes named by an integer k, listed in a shuffled order; label k % 3 and features of k, in list order."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)  # row i of the node list is node k = order[i]
    pairs = [(k, (k + 1) % n) for k in range(n)] + [(int(a), int(b)) for a, b in rng.integers(0, n, (2 * n, 2))]
    (tmp_path / "nodes.txt").write_text("".join(_name(k) + "\n" for k in order))
    (tmp_path / "edges.csv").write_text("source,target\n" + "".join(f'"{_name(a)}","{_name(b)}"\n' for a, b in pairs))
    np.save(tmp_path / "x.npy", np.array([_feature(k) for k in order], dtype=np.float32))
    np.save(tmp_path / "y.npy", order % CLASSES)
    row = {int(k): i for i, k in enumerate(order)}
    return {"order": order, "pairs": [(row[a], row[b]) for a, b in pairs if a != b]}


def _source(tmp_path: Path, edges: str = "edges.csv", nodes: str = "nodes.txt", **options: object):
    return validate_source(edgelist_source(tmp_path / edges, features=tmp_path / "x.npy", labels=tmp_path / "y.npy",
                                           nodes=tmp_path / nodes, **options))


def _undirected(pairs: list[tuple[int, int]]) -> set[tuple[int, int]]:
    return {(a, b) for a, b in pairs} | {(b, a) for a, b in pairs}


def test_string_ids_become_the_node_list_rows(tmp_path: Path) -> None:
    g = _write(tmp_path)
    source = _source(tmp_path)
    assert source.num_nodes == 12
    assert edge_set(*collect_edges(source)) == _undirected(g["pairs"])  # the header line is not an edge
    assert source.node_names.to_pylist() == [_name(k) for k in g["order"]]
    assert source.files["nodes"] == str(tmp_path / "nodes.txt")


@pytest.mark.parametrize("kind", ["parquet-strings", "parquet-ints", "npy-strings", "csv-list"])
def test_node_list_and_edge_formats(tmp_path: Path, kind: str) -> None:
    g = _write(tmp_path)
    order, pairs = g["order"], g["pairs"]
    if kind == "parquet-ints":  # sparse integer ids kept as given: 1000 + k
        ids = pa.array((1000 + order).astype(np.int64))
        pq.write_table(pa.table({"id": ids}), tmp_path / "nodes.parquet")
        src, dst = zip(*((1000 + order[a], 1000 + order[b]) for a, b in pairs), strict=True)
        pq.write_table(pa.table({"src": pa.array(src, pa.int64()), "dst": pa.array(dst, pa.int64())}),
                       tmp_path / "edges.parquet")
        source = _source(tmp_path, "edges.parquet", "nodes.parquet")
        assert source.node_names.to_pylist() == [str(1000 + k) for k in order]
    else:
        names = [_name(k) for k in order]
        if kind == "parquet-strings":
            pq.write_table(pa.table({"name": names}), tmp_path / "nodes.parquet")  # no 'id': the first column
            nodes = "nodes.parquet"
        elif kind == "npy-strings":
            np.save(tmp_path / "nodes.npy", np.array(names))
            nodes = "nodes.npy"
        else:
            (tmp_path / "nodes.csv").write_text("".join(f'"{n}",extra\n' for n in names))
            nodes = "nodes.csv"
        table = pa.table({"src": [names[a] for a, _ in pairs], "dst": pa.array([names[b] for _, b in pairs]
                                                                               ).dictionary_encode()})
        pq.write_table(table, tmp_path / "edges.parquet")
        source = _source(tmp_path, "edges.parquet", nodes)
        assert source.node_names.to_pylist() == names
    assert edge_set(*collect_edges(source)) == _undirected(pairs)


def test_split_files_hold_rows_or_names(tmp_path: Path) -> None:
    g = _write(tmp_path)
    names = [_name(k) for k in g["order"]]
    np.save(tmp_path / "train.npy", np.array([names[5], names[0], names[7]]))  # names, any order
    np.save(tmp_path / "val.npy", np.array([1, 2]))  # rows of the node list
    np.save(tmp_path / "test.npy", np.array([names[3]]))
    source = _source(tmp_path, train_idx=tmp_path / "train.npy", val_idx=tmp_path / "val.npy",
                     test_idx=tmp_path / "test.npy")
    assert source.train_idx.tolist() == [0, 5, 7] and source.val_idx.tolist() == [1, 2]
    assert source.test_idx.tolist() == [3]
    np.save(tmp_path / "test.npy", np.array(["nobody"]))
    with pytest.raises(ValueError, match=r"test.npy\[0\]' expected a node id listed in '.*nodes.txt' \(got an id "
                                         r"not in it\)"):
        _source(tmp_path, train_idx=tmp_path / "train.npy", val_idx=tmp_path / "val.npy",
                test_idx=tmp_path / "test.npy")


def test_errors_name_the_file_and_row(tmp_path: Path) -> None:
    _write(tmp_path)
    text = (tmp_path / "edges.csv").read_text().splitlines()
    (tmp_path / "bad.csv").write_text("\n".join([*text[:4], f'"{_name(1)}","nobody"', *text[4:]]) + "\n")
    source = _source(tmp_path, "bad.csv")
    with pytest.raises(ValueError, match=r"bad.csv: dst\[3\]' expected a node id listed in '.*nodes.txt' \(got an "
                                         r"id not in it\)") as info:
        collect_edges(source)
    assert "nobody" not in str(info.value)  # ids are the file's contents: never quoted

    (tmp_path / "dup.txt").write_text("a\nb\nc\nb\n")
    with pytest.raises(ValueError, match=r"dup.txt: row 3' expected a node id not listed before \(got the id of row "
                                         r"1 again\)"):
        NodeIndex(read_node_list(tmp_path / "dup.txt"), str(tmp_path / "dup.txt"))
    (tmp_path / "gap.txt").write_text("a\n\nb\n")
    with pytest.raises(ValueError, match=r"gap.txt: row 1' expected a node id \(got an empty line\)"):
        read_node_list(tmp_path / "gap.txt")
    with pytest.raises(ValueError, match=r"'num_nodes' expected the length of the node list '.*nodes.txt', 12, or no "
                                         r"value \(got 13\)"):
        _source(tmp_path, num_nodes=13)
    np.save(tmp_path / "x.npy", np.zeros((11, 3), np.float32))
    with pytest.raises(ValueError, match=r"x.npy' expected 12 feature rows \(one per line of the node list "
                                         r"'.*nodes.txt'\) \(got 11 rows\)"):
        _source(tmp_path)


def test_string_ids_without_a_node_list_say_how(tmp_path: Path) -> None:
    _write(tmp_path)
    hint = r"need a node list: edgelist:FILE with --set ingest.options.nodes=NODES.txt"
    with pytest.raises(ValueError, match=rf"edges.csv' expected two integer columns \(.*\); ids .*{hint}"):
        edgelist_source(tmp_path / "edges.csv", features=tmp_path / "x.npy", labels=tmp_path / "y.npy")
    # integers first, a name later: a mixed column
    (tmp_path / "mixed.csv").write_text("0,1\n1,2\n2,alice\n")
    with pytest.raises(ValueError, match=rf"mixed.csv' expected two integer columns .*{hint}"):
        edgelist_source(tmp_path / "mixed.csv", features=tmp_path / "x.npy", labels=tmp_path / "y.npy")
    pq.write_table(pa.table({"src": [0, 1], "dst": ["a", "b"]}), tmp_path / "mixed.parquet")
    with pytest.raises(ValueError, match=rf"mixed.parquet: dst' expected an integer column \(got string\); .*{hint}"):
        edgelist_source(tmp_path / "mixed.parquet", features=tmp_path / "x.npy", labels=tmp_path / "y.npy")


def test_names_follow_the_nodes_through_reorder_to_the_export_and_batches(tmp_path: Path) -> None:
    from pipelines.batches import open_training_data
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths
    from pipelines.runner import StageRunner

    data = tmp_path / "data"
    data.mkdir()
    _write(data, n=60, seed=1)
    dataset = f"edgelist:{data / 'edges.csv'}"
    overrides = [f"ingest.options.nodes={data / 'nodes.txt'}", f"ingest.options.features={data / 'x.npy'}",
                 f"ingest.options.labels={data / 'y.npy'}", "reorder.strategy=degree", "sample.epochs=1",
                 "train.epochs=1", "train.device=cpu", "train.hidden_dim=8", "sample.batch_size=16"]
    cfg = PipelineConfig.load(dataset=dataset, overrides=overrides)
    root = tmp_path / "root"
    results = {r.artifact.stage: r.artifact for r in StageRunner(cfg, StrataPaths.at(root).store()).run_until("export")}
    ingest, reorder = results["ingest"], results["reorder"]
    assert ingest.stats["node_ids"] == "named" and NODE_IDS_FILE in reorder.files
    table = ingest.parquet(NODE_IDS_FILE)
    assert table.column("id").to_pylist() == list(range(60))
    assert table.column("original_id").to_pylist() == (data / "nodes.txt").read_text().splitlines()

    perm = np.asarray(reorder.array("perm.npy"))
    assert not np.array_equal(perm, np.arange(60))  # the degree order moved nodes
    names = original_ids(reorder, perm)
    k = np.array([int(name.split("/")[-1].split(",")[0]) for name in names])
    np.testing.assert_array_equal(np.asarray(reorder.array("labels.npy")), k % CLASSES)
    np.testing.assert_array_equal(np.asarray(reorder.array("features.npy"))[:, 0], k)

    header = json.loads((results["export"].path / "subgraph.json").read_text())
    seeds = header["node_names"][: header["num_seeds"]]
    assert len(header["node_names"]) == header["num_nodes"]
    from trainer.subgraph_file import read_subgraph

    sub = read_subgraph(results["export"].path / "subgraph.json")
    assert [int(s.split("/")[-1].split(",")[0]) % CLASSES for s in seeds] == sub.arrays["labels"].tolist()

    with open_training_data(dataset, root=root, overrides=overrides, device="cpu") as opened:
        batch = next(opened.batches("train"))
        got = opened.original_ids(batch.n_id)[: batch.batch_size]
        assert [int(s.split("/")[-1].split(",")[0]) % CLASSES for s in got] == batch.y.tolist()


def test_a_link_split_directory_takes_a_node_list_too(tmp_path: Path) -> None:
    from pipelines.methods.sources.edgedir import edgelist_dir_source

    g = _write(tmp_path)
    order, pairs = g["order"], g["pairs"]
    named = [f'"{_name(int(order[a]))}","{_name(int(order[b]))}"\n' for a, b in pairs]  # rows -> names
    split = tmp_path / "split"
    split.mkdir()
    for name, part in (("train", named[:-4]), ("valid", named[-4:-2]), ("test", named[-2:])):
        (split / f"{name}.csv").write_text("src,dst\n" + "".join(part))
    source = validate_source(edgelist_dir_source(split, nodes=tmp_path / "nodes.txt"))
    assert source.num_nodes == 12 and source.node_names.to_pylist() == [_name(int(k)) for k in order]
    assert source.link_split.edges["valid"].tolist() == [list(p) for p in pairs[-4:-2]]  # the list's rows
    (split / "test.csv").write_text("src,dst\n" + named[0] + '"nobody","' + _name(0) + '"\n')
    with pytest.raises(ValueError, match=r"test.csv: src\[1\]' expected a node id listed in"):
        edgelist_dir_source(split, nodes=tmp_path / "nodes.txt")

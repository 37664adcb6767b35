"""Sources that carry their own link-prediction split: ``edgelist:DIR`` (train/valid/test edge files) and OGB
link datasets (``ogb:DIR`` with ``split/<name>/*.pt`` or ``.npz``). The split is read exactly; bad input
(missing file, id out of range, unsafe pickle, overlap under ``overlap=reject``) is refused with a message that
names the file and the line or key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines.methods.sources import parse_source_spec, validate_source
from pipelines.methods.sources.ogbl import load_split_file
from tests.pipelines.link_fixtures import lattice_split, write_edge_dir, write_ogbl_dir

N = 240


def _open(spec: str, **options: object):  # noqa: ANN202 - a GraphSource
    return validate_source(parse_source_spec(spec, options))


@pytest.mark.parametrize(("suffix", "sep"), [(".txt", " "), (".tsv", "\t"), (".csv", ",")])
def test_edge_dir_split_is_read_exactly(tmp_path: Path, suffix: str, sep: str) -> None:
    split = lattice_split(N)
    source = _open(f"edgelist:{write_edge_dir(tmp_path / 'lat', split, suffix, sep)}")
    assert source.num_nodes == N and source.feature_dim == 1 and source.num_classes == 1
    for name, edges in split.items():  # file order and direction, as listed
        np.testing.assert_array_equal(source.link_split.edges[name], edges)
    assert source.link_split.negatives == {} and source.description["link_split"]["negatives"] is None
    # the graph is the union of the three splits, both directions
    chunks = list(source.edge_chunks())
    src = np.concatenate([c[0] for c in chunks])
    assert len(src) == 2 * sum(len(e) for e in split.values())
    assert len(next(iter(source.feature_chunks()))) == N and len(source.train_idx) > 0


def test_edge_dir_drops_self_loops_and_reads_shared_negatives(tmp_path: Path) -> None:
    split = lattice_split(N)
    split["train"] = np.concatenate([split["train"], [[7, 7]]])
    d = write_edge_dir(tmp_path / "lat", split)
    (d / "test_neg.txt").write_text("1 100\n2 200\n")
    source = _open(f"edgelist:{d}")
    ls = source.link_split
    assert len(ls.edges["train"]) == len(split["train"]) - 1 and ls.self_loops["train"] == 1
    assert ls.negative_kind == "edges"
    np.testing.assert_array_equal(ls.negatives["test"], [[1, 100], [2, 200]])


@pytest.mark.parametrize("fmt", ["pt", "npz"])
@pytest.mark.parametrize("negatives", [None, "edges", "targets"])
def test_ogbl_split_is_read_exactly(tmp_path: Path, fmt: str, negatives: str | None) -> None:
    split = lattice_split(N)
    d = write_ogbl_dir(tmp_path / "ogbl-lat", split, N, fmt=fmt, negatives=negatives, features=3)
    source = _open(f"ogb:{d}")
    ls = source.link_split
    assert source.num_nodes == N and source.feature_dim == 3 and ls.negative_kind == negatives
    for name, edges in split.items():
        np.testing.assert_array_equal(ls.edges[name], edges)
    stored = load_split_file(d / "split" / "time" / f"test.{fmt}")
    if negatives == "edges":
        np.testing.assert_array_equal(ls.negatives["test"], stored["edge_neg"])
    elif negatives == "targets":
        np.testing.assert_array_equal(ls.negatives["valid"].shape, (len(split["valid"]), 20))
        np.testing.assert_array_equal(ls.negatives["test"], stored["target_node_neg"])
    else:
        assert ls.negatives == {}
    assert source.description["task"] == "link" and source.description["split"] == "time"


def test_pt_of_tensors_and_old_numpy_names_load(tmp_path: Path) -> None:
    import io

    import torch

    torch.save({"edge": torch.tensor([[0, 1], [1, 2]])}, tmp_path / "t.pt")
    np.testing.assert_array_equal(load_split_file(tmp_path / "t.pt")["edge"], [[0, 1], [1, 2]])
    # a file written under NumPy 1 names numpy.core.multiarray._reconstruct (OGB's files do)
    buf = io.BytesIO()
    torch.save({"edge": np.array([[3, 4]])}, buf, _use_new_zipfile_serialization=False)
    old = buf.getvalue().replace(b"numpy._core.multiarray\n_reconstruct", b"numpy.core.multiarray\n_reconstruct")
    assert old != buf.getvalue()
    (tmp_path / "old.pt").write_bytes(old)
    np.testing.assert_array_equal(load_split_file(tmp_path / "old.pt")["edge"], [[3, 4]])


RAN: list[str] = []


def _side_effect(text: str) -> str:
    RAN.append(text)
    return text


class _Payload:
    def __reduce__(self) -> tuple:
        return _side_effect, ("unpickled",)


def test_pt_with_other_globals_is_refused_without_running_them(tmp_path: Path) -> None:
    import torch

    torch.save({"edge": np.array([[0, 1]]), "extra": _Payload()}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"bad\.pt' expected a torch\.save of a dict .* weights_only=True"):
        load_split_file(tmp_path / "bad.pt")
    assert RAN == []
    torch.save({"edge": np.array(["a", "b"], dtype=object)}, tmp_path / "obj.pt")
    with pytest.raises(ValueError, match="obj.pt"):
        load_split_file(tmp_path / "obj.pt")
    np.savez(tmp_path / "obj.npz", edge=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="without|Python objects"):
        load_split_file(tmp_path / "obj.npz")


def test_node_id_out_of_range_names_file_and_line(tmp_path: Path) -> None:
    split = lattice_split(N)
    split["valid"][3] = [5, 999]
    d = write_edge_dir(tmp_path / "lat", split)
    # line 1 is the comment: edge 3 of the file is on line 5
    with pytest.raises(ValueError, match=r"valid\.txt: line 5' expected a node id in \[0, 240\) \(got 999\)"):
        _open(f"edgelist:{d}", num_nodes=N)
    bad = write_ogbl_dir(tmp_path / "ogbl", lattice_split(N), N, negatives="edges")
    split = lattice_split(N)
    split["test"][2] = [-1, 4]
    write_ogbl_dir(bad, split, N, negatives="edges")
    with pytest.raises(ValueError, match=r"test\.pt: edge\[2\]' expected a node id in \[0, 240\) \(got -1\)"):
        _open(f"ogb:{bad}")


def test_missing_split_file_is_named(tmp_path: Path) -> None:
    d = write_edge_dir(tmp_path / "lat", lattice_split(N))
    (d / "test.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"lat/test\.txt' expected an edge file of the split"):
        _open(f"edgelist:{d}")
    o = write_ogbl_dir(tmp_path / "ogbl", lattice_split(N), N)
    (o / "split" / "time" / "valid.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"time/valid\.pt' expected the valid split"):
        _open(f"ogb:{o}")
    (o / "split" / "time" / "valid.npz").write_bytes(b"")
    (o / "split" / "time" / "valid.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="expected one split file"):
        _open(f"ogb:{o}")


def test_overlap_is_allowed_and_counted_or_rejected(tmp_path: Path) -> None:
    from pipelines.methods.sources.linksplit import write_link_split

    split = lattice_split(N)
    split["test"] = np.concatenate([split["test"], split["train"][:2, ::-1]])  # two train edges, reversed
    d = write_edge_dir(tmp_path / "lat", split)
    source = _open(f"edgelist:{d}")
    counts = source.link_split.overlaps(N)
    assert counts == {("train", "valid"): 0, ("train", "test"): 2, ("valid", "test"): 0}

    class _Builder:  # write_link_split's stats, without an artifact store
        def save_array(self, name: str, arr: np.ndarray) -> None:
            pass

    assert write_link_split(_Builder(), source.link_split, N)["link_overlap_train_test"] == 2
    with pytest.raises(ValueError, match=r"test\.txt' expected no edge also in the train split under "
                                         r"overlap=reject \(got 2\)"):
        _open(f"edgelist:{d}", overlap="reject")
    with pytest.raises(ValueError, match="'option overlap' expected one of"):
        _open(f"edgelist:{d}", overlap="maybe")
    with pytest.raises(ValueError, match="'option overlap' expected only with edgelist:DIR"):
        _open(f"edgelist:{d}/train.txt", overlap="allow", features="x.npy", labels="y.npy")


def test_features_and_labels_of_an_edge_dir(tmp_path: Path) -> None:
    d = write_edge_dir(tmp_path / "lat", lattice_split(N))
    x = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
    np.save(tmp_path / "x.npy", x)
    source = _open(f"edgelist:{d}", features=str(tmp_path / "x.npy"))
    np.testing.assert_array_equal(np.concatenate(list(source.feature_chunks())), x)
    np.save(tmp_path / "short.npy", x[:10])
    with pytest.raises(ValueError, match=r"short\.npy' expected features of shape \(240, F\)"):
        _open(f"edgelist:{d}", features=str(tmp_path / "short.npy"), num_nodes=N)


def test_ogb_tells_node_and_link_directories_apart(tmp_path: Path) -> None:
    from tests.pipelines.source_fixtures import write_ogb_dir

    node = write_ogb_dir(tmp_path / "ogbn")
    assert _open(f"ogb:{node}").link_split is None  # node-property: labels and CSV splits, as before
    with pytest.raises(ValueError, match="'option overlap' expected only for OGB link datasets"):
        _open(f"ogb:{node}", overlap="reject")
    link = write_ogbl_dir(tmp_path / "ogbl", lattice_split(N), N)
    with pytest.raises(ValueError, match="'option num_classes' expected only for node-property"):
        _open(f"ogb:{link}", num_classes=3)
    (link / "split" / "other").mkdir()
    (link / "split" / "other" / "train.npz").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="exactly one, or the option split=NAME"):
        _open(f"ogb:{link}")
    assert _open(f"ogb:{link}", split="time").link_split is not None

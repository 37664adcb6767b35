"""Staged sources (trainer/layerwise_staging.py): with many intervals a layer stages each group's rows in one
pass over its input, and the answer is the single-interval one (1e-5) for every model, float16 and float32
files, two and three layers; a layer whose messages are narrower than its input rows stages messages and own
terms instead, and then reads no input row after its staging pass; the input is read once per group, not once
per interval; each interval's scratch files go as soon as it is done, and every file after an error mid-layer."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import torch

import trainer.layerwise as layerwise
import trainer.layerwise_staging as staging
from storage_kernels.arrays import DATA_ALIGN, align_up, save_array
from storage_kernels.halfwords import encode_rows
from tests.trainer.synth import make_graph
from trainer.layerwise import LayerwiseGraph, layerwise_logits, layerwise_stream
from trainer.models import build_model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("staging")
    indptr, indices, features, labels = make_graph(300, 11, 4, seed=5)  # a quarter of the edges random
    paths = {"float32": root / "f32.npy", "float16": root / "f16.npy"}
    save_array(paths["float32"], features.astype(np.float32))
    save_array(paths["float16"], encode_rows(features.astype(np.float32), "float16"))
    return indptr, indices, labels, paths


def _files_under(path):
    return sorted(p.relative_to(path) for p in path.rglob("*"))


def _force_staging(monkeypatch, group: int) -> None:
    """Stage in groups of ``group`` intervals whether it pays or not."""
    monkeypatch.setattr(staging, "STAGE_GROUP", group)
    monkeypatch.setattr(staging, "STAGE_COST_FACTOR", 0)


def _tight(files, tmp_path, dtype: str = "float16") -> LayerwiseGraph:
    """The test graph at memory 0: intervals of 37 nodes, the hidden tables on disk."""
    indptr, indices, labels, paths = files
    return LayerwiseGraph(indptr, indices, paths[dtype], 11, labels, scratch_dir=tmp_path, chunk_nodes=37,
                          memory_bytes=0)


@pytest.mark.parametrize("model_name", ["graphsage", "gcn", "gat"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layers", [2, 3])
def test_staged_layers_equal_one_interval(files, tmp_path, monkeypatch, model_name, dtype, layers):
    indptr, indices, labels, paths = files
    torch.manual_seed(3)
    model = build_model(model_name, in_dim=11, hidden_dim=8, out_dim=4, num_layers=layers, dropout=0.5)
    whole = LayerwiseGraph(indptr, indices, paths[dtype], 11, labels, scratch_dir=tmp_path, memory_bytes=1 << 30)
    one: list[dict[str, int]] = []
    want = layerwise_logits(model, whole, np.arange(300), report=one)
    assert all(r["intervals"] == 1 and r["groups"] == 0 and r["bytes_staged"] == 0 for r in one)

    _force_staging(monkeypatch, 3)  # intervals of 37 nodes, groups of 3: several groups a layer
    tight = _tight(files, tmp_path, dtype)
    report: list[dict[str, int]] = []
    np.testing.assert_allclose(layerwise_logits(model, tight, np.arange(300), report=report), want, rtol=0,
                               atol=1e-5)
    for r in report:  # every layer staged (the hidden tables are on disk at memory 0), in groups of 3
        assert r["intervals"] >= 8 and r["groups"] == -(-r["intervals"] // 3) and r["bytes_staged"] > 0
    some = np.array([299, 3, 150, 7])  # a frontier: sources are not every node
    np.testing.assert_allclose(layerwise_logits(model, tight, some), want[some], rtol=0, atol=1e-5)
    monkeypatch.setattr(staging, "STAGE_GROUP", 0)  # the intervals read the input themselves: same answer
    np.testing.assert_allclose(layerwise_logits(model, tight, np.arange(300)), want, rtol=0, atol=1e-5)
    assert not _files_under(tmp_path)


@pytest.mark.parametrize("model_name", ["graphsage", "gcn", "gat"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_narrow_messages_are_staged_instead_of_rows(files, tmp_path, monkeypatch, model_name, dtype):
    # hidden 32 (128-byte float32 rows) -> 4 classes (GAT: 2 heads of 4): the last layer's messages are 16 or 32
    # bytes a source, so they are staged, not its input rows; layer 0's messages are not narrower than a
    # feature row (11 values) and it stages rows
    indptr, indices, labels, paths = files
    torch.manual_seed(4)
    extra = {"heads": 2} if model_name == "gat" else {}
    model = build_model(model_name, in_dim=11, hidden_dim=32, out_dim=4, num_layers=2, dropout=0.5, **extra)
    whole = LayerwiseGraph(indptr, indices, paths[dtype], 11, labels, scratch_dir=tmp_path, memory_bytes=1 << 30)
    want = layerwise_logits(model, whole, np.arange(300))
    _force_staging(monkeypatch, 3)
    tight = _tight(files, tmp_path, dtype)
    report: list[dict] = []
    got = layerwise_logits(model, tight, np.arange(300), report=report)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # GCN's last layer reads its table folded: lin(h), 4 values a node, its messages already: rows are staged
    assert [r["staged"] for r in report] == ["rows", "rows" if model_name == "gcn" else "messages"]
    assert all(r["groups"] == -(-r["intervals"] // 3) for r in report)
    some = np.array([299, 3, 150, 7, 8])  # a frontier: sources are not every node, targets few
    np.testing.assert_allclose(layerwise_logits(model, tight, some), want[some], rtol=0, atol=1e-5)
    monkeypatch.setattr(staging, "STAGE_GROUP", 0)  # the intervals read the input themselves: same answer
    np.testing.assert_allclose(layerwise_logits(model, tight, np.arange(300)), got, rtol=0, atol=1e-5)
    assert not _files_under(tmp_path)


def _random_graph(path, n=4000, degree=8, dim=16):
    rng = np.random.default_rng(0)
    indices = rng.integers(0, n, n * degree)  # random edges: every interval needs rows from all over the file
    indptr = np.arange(0, n * degree + 1, degree, dtype=np.int64)
    save_array(path, rng.normal(size=(n, dim)).astype(np.float32))
    return indptr, indices, align_up(DATA_ALIGN + n * dim * 4) - DATA_ALIGN  # one pass over the file's data


def test_a_layer_reads_its_input_once_per_group_not_once_per_interval(tmp_path, monkeypatch):
    n, dim, path = 4000, 16, tmp_path / "x.npy"
    indptr, indices, data = _random_graph(path)
    model = build_model("graphsage", in_dim=dim, hidden_dim=dim, out_dim=3, num_layers=2, dropout=0.0)  # rows staged
    graph = LayerwiseGraph(indptr, indices, path, dim, np.zeros(n, np.int64), scratch_dir=tmp_path,
                           chunk_nodes=100, memory_bytes=0)
    staged: list[dict[str, int]] = []
    want = layerwise_logits(model, graph, np.arange(n), report=staged)
    monkeypatch.setattr(staging, "STAGE_GROUP", 0)
    unstaged: list[dict[str, int]] = []
    np.testing.assert_allclose(layerwise_logits(model, graph, np.arange(n), report=unstaged), want, rtol=0,
                               atol=1e-5)
    first, before = staged[0], unstaged[0]
    assert first["intervals"] == before["intervals"] == 40 and first["groups"] == 1
    windows = -(-n // 100)  # the pass's windows of chunk_nodes rows: a block across two is read by both
    assert data <= first["bytes_read"] - first["bytes_read_staged"] <= data + windows * DATA_ALIGN  # one pass
    # each staged byte read back once (the ids twice: the pass reads them too), each file to its last block
    assert first["bytes_staged"] <= first["bytes_read_staged"] <= 2 * first["bytes_staged"] + 40 * DATA_ALIGN
    assert before["bytes_staged"] == 0 and before["bytes_read"] > 30 * data  # ~ an input pass per interval
    assert first["bytes_read"] < before["bytes_read"] / 2  # every edge random here: a staged row per edge


def test_staged_messages_read_no_input_row_after_the_pass(tmp_path, monkeypatch):
    # 64 float32 features (256-byte rows) -> 8 outputs: the layer stages 32-byte messages and 32-byte own terms
    n, dim, path = 4000, 64, tmp_path / "x.npy"
    indptr, indices, data = _random_graph(path, dim=dim)
    model = build_model("graphsage", in_dim=dim, hidden_dim=8, out_dim=8, num_layers=1, dropout=0.0)
    graph = LayerwiseGraph(indptr, indices, path, dim, np.zeros(n, np.int64), scratch_dir=tmp_path,
                           chunk_nodes=400, memory_bytes=0)
    report: list[dict] = []
    want = layerwise_logits(model, graph, np.arange(n), report=report)
    first = report[0]
    assert first["staged"] == "messages" and first["intervals"] == 10 and first["groups"] == 1
    windows = -(-n // 400)
    # the input is read by the staging pass alone: no interval reads an input row
    assert data <= first["bytes_read"] - first["bytes_read_staged"] <= data + windows * DATA_ALIGN
    sources = sum(len(np.unique(indices[indptr[a] : indptr[a + 400]])) for a in range(0, n, 400))
    assert first["bytes_staged"] == sources * (4 + 8 * 4) + n * 8 * 4  # ids, messages; own terms: 8 float32 each
    values = first["bytes_staged"] - 4 * sources
    assert first["bytes_read_staged"] <= 8 * sources + 2 * values  # the ids twice; values to their blocks' ends
    monkeypatch.setattr(staging, "STAGE_GROUP", 0)
    unstaged: list[dict] = []
    np.testing.assert_allclose(layerwise_logits(model, graph, np.arange(n), report=unstaged), want, rtol=0,
                               atol=1e-5)
    assert unstaged[0]["bytes_read"] > 4 * first["bytes_read"]  # 10 passes over the input, against one
    assert first["bytes_staged"] < sources * dim * 4 / 4  # staging the rows would write 4x more


def test_a_group_is_staged_only_when_that_moves_fewer_bytes(tmp_path, monkeypatch):
    # 4 intervals of 1000 nodes, 8 random in-edges each: each interval needs ~88% of the file's blocks, and its
    # ~7000 distinct sources would be staged and read back: more bytes than reading the file 4 times
    n, dim, path = 4000, 16, tmp_path / "x.npy"
    indptr, indices, data = _random_graph(path)
    model = build_model("gcn", in_dim=dim, hidden_dim=8, out_dim=dim, num_layers=1, dropout=0.0)  # rows staged
    graph = LayerwiseGraph(indptr, indices, path, dim, np.zeros(n, np.int64), scratch_dir=tmp_path,
                           chunk_nodes=1000, memory_bytes=0)
    kept: list[dict[str, int]] = []
    want = layerwise_logits(model, graph, np.arange(n), report=kept)
    monkeypatch.setattr(staging, "STAGE_GROUP", 0)
    unstaged: list[dict[str, int]] = []
    np.testing.assert_array_equal(layerwise_logits(model, graph, np.arange(n), report=unstaged), want)  # same path
    assert kept[0]["intervals"] == 4 and kept[0]["groups"] == 0 and kept[0]["bytes_read"] == unstaged[0]["bytes_read"]
    assert 0 < kept[0]["bytes_staged"] < n * 4 * 4  # only the listed ids were written
    _force_staging(monkeypatch, 128)  # forced: more bytes
    forced: list[dict[str, int]] = []
    np.testing.assert_allclose(layerwise_logits(model, graph, np.arange(n), report=forced), want, rtol=0, atol=1e-5)
    assert forced[0]["groups"] == 1 and forced[0]["bytes_read"] > kept[0]["bytes_read"]
    assert [p.name for p in tmp_path.rglob("*")] == ["x.npy"]  # the listed ids removed too


def test_an_interval_s_files_go_when_it_is_done(files, tmp_path, monkeypatch):
    _force_staging(monkeypatch, 4)
    model = build_model("gcn", in_dim=11, hidden_dim=8, out_dim=4, num_layers=1, dropout=0.0)
    graph = _tight(files, tmp_path)
    left = []
    for part in layerwise_stream(model, graph):  # one layer: its intervals come out as they are done
        rows = [p for p in tmp_path.rglob("*.rows.npy")]
        assert len(rows) == len(list(tmp_path.rglob("*.ids.npy")))  # an interval's ids and rows go together
        left.append(len(rows))
        assert len(part.nodes)
    assert left[:4] == [3, 2, 1, 0] and max(left) == 3  # the group's others, never more
    assert not _files_under(tmp_path)


@pytest.mark.parametrize("where", ["pass", "interval"])
def test_an_error_mid_layer_leaves_no_file_and_no_descriptor(files, tmp_path, monkeypatch, where):
    _force_staging(monkeypatch, 3)
    model = build_model("graphsage", in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.0)
    graph = _tight(files, tmp_path)
    calls = []
    if where == "pass":  # the second window of the first group's pass, its rows files half written
        real_words = layerwise._Rows.words

        def failing_words(self, positions):
            calls.append(len(positions))
            if len(calls) == 2:
                raise OSError("the disk went away")
            return real_words(self, positions)

        monkeypatch.setattr(layerwise._Rows, "words", failing_words)
    else:  # the second group's first interval, reading its staged rows
        real_staged = layerwise._Rows.staged

        def failing_staged(self, path, rows=True):
            calls.append(path)
            if len(calls) == 4:
                raise OSError("the disk went away")
            return real_staged(self, path, rows)

        monkeypatch.setattr(layerwise._Rows, "staged", failing_staged)
    gc.collect()
    fds = len(os.listdir("/proc/self/fd"))
    model.train()
    with pytest.raises(OSError, match="the disk went away"):
        layerwise_logits(model, graph, np.arange(300))
    gc.collect()
    assert calls and model.training
    assert not _files_under(tmp_path)
    assert len(os.listdir("/proc/self/fd")) == fds  # the ids mappings and the rows writers closed


def test_staged_rows_are_the_input_s_bits_in_its_storage_dtype(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(4)
    halves = rng.normal(size=(50, 6)).astype(np.float16)  # 3 float32 words a row, as a float16 file stores them
    words = halves.view(np.float32)
    stage = staging.StagedSources(tmp_path, 50, np.float16, 6)
    wanted = [np.array([0, 7, 8, 31, 49]), np.empty(0, np.int64), np.arange(3, 50, 4)]  # one interval needs none
    for ids in wanted:
        stage.add([(ids[ids < 20], ids[:0]), (ids[ids >= 20], ids[:0])], lambda p: DATA_ALIGN * len(p))
    reads = []
    with ThreadPoolExecutor(1) as reader:
        stage.fill(lambda p: reads.append(p) or words[p], 8, reader)
    assert np.array_equal(np.concatenate(reads), np.union1d(wanted[0], wanted[2]))  # one pass, each row once
    for k, ids in enumerate(wanted):
        assert np.array_equal(stage.ids(k), ids)
        got = np.load(stage.rows_path(k))
        assert got.dtype == np.float16 and np.array_equal(got.view(np.uint16), halves[ids].view(np.uint16))
        stage.remove(k)
        assert not stage.rows_path(k).exists()
    assert stage.bytes_written == 4 * 17 + 2 * 6 * 17  # 17 ids (int32) and their rows
    stage.close()
    assert not list(tmp_path.iterdir())


def test_a_group_closes_at_the_disk_cap(files, tmp_path, monkeypatch):
    # a cap of one byte: every group holds one interval (the first always joins), so the staged files on disk
    # are one interval's at most; the answer is unchanged
    torch.manual_seed(5)
    model = build_model("graphsage", in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.5)
    monkeypatch.setattr(staging, "STAGE_COST_FACTOR", 0)
    tight = _tight(files, tmp_path)
    free: list[dict[str, int]] = []
    want = layerwise_logits(model, tight, np.arange(300), report=free)
    assert all(r["groups"] == 1 for r in free)  # the default cap: half the free space holds every interval
    monkeypatch.setattr(staging, "STAGE_DISK_BYTES", 1)
    capped: list[dict[str, int]] = []
    np.testing.assert_allclose(layerwise_logits(model, tight, np.arange(300), report=capped), want, rtol=0,
                               atol=1e-6)
    assert all(r["groups"] == r["intervals"] > 1 for r in capped)
    assert not _files_under(tmp_path)

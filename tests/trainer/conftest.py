"""Shared fixtures: one small synthetic dataset, its sample set and a packed store with all three tiers."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.synth import Dataset, hot_nodes, make_dataset, write_packed

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none visible)")


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return make_dataset(tmp_path_factory.mktemp("trainer-data"))


@pytest.fixture(scope="session")
def packed_dir(dataset: Dataset, tmp_path_factory: pytest.TempPathFactory):
    gpu, cpu = hot_nodes(dataset.samples, num_gpu=20, num_cpu=40)
    return write_packed(tmp_path_factory.mktemp("trainer-packed"), dataset.samples, dataset.features, gpu, cpu)


@pytest.fixture
def packed_source(dataset: Dataset, packed_dir):
    """PackedFeatures over the shared packed store, with the feature file for evaluation batches."""
    from trainer.features import PackedFeatures

    with PackedFeatures(packed_dir, dataset.samples, features_path=dataset.features_path) as source:
        yield source


@pytest.fixture(scope="package", autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core runner: intra-op threading only adds synchronisation (small ops get many
    times slower under load), so these tests run torch single-threaded and restore the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

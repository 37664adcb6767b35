"""trainer.native_ops: the C aggregation trains exactly what the scatter form trains, the C dropout behaves as
dropout (masks from torch's generator, the right gradient, float32 masks for bf16 too), and both step aside
where they do not apply (ONNX export, other dtypes)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from trainer import native_ops
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.models import GraphSAGE, TensorBlock, build_model, to_tensor_blocks
from trainer.native_ops import csr_mean, dropout, native_applies
from trainer.train import train


def without_csr(blocks: list[TensorBlock]) -> list[TensorBlock]:
    """The same blocks as bare edge lists: the model then aggregates with index_select + scatter_reduce."""
    return [TensorBlock(b.edge_src, b.edge_dst, b.num_dst) for b in blocks]


def spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count the calls of ``kernels.<name>`` made through trainer.native_ops."""
    calls: list[int] = []
    real = getattr(native_ops.kernels, name)
    monkeypatch.setattr(native_ops.kernels, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def train_both_forms(dataset, model_name: str, epochs: int, **model_args) -> tuple[list, list]:
    """Train ``model_name`` from the same seed on epoch 0's batches twice, with the blocks' CSR (the C
    operations) and without (the torch forms): ``(state_dicts, per-step losses)``, C form first."""
    batches = [dataset.samples.batch(i) for i in dataset.samples.batch_ids("train", 0)]
    data = [(torch.from_numpy(dataset.features[b.nodes]), to_tensor_blocks(b.blocks()),
             torch.from_numpy(dataset.labels[b.seeds])) for b in batches]
    assert all(blk.indptr is not None for _, blocks, _ in data for blk in blocks)
    states, losses = [], []
    for strip in (False, True):
        torch.manual_seed(0)
        model = build_model(model_name, in_dim=dataset.features.shape[1], hidden_dim=16,
                            out_dim=int(dataset.labels.max()) + 1, num_layers=2, **model_args)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        run = []
        for x, blocks, y in data * epochs:
            loss = torch.nn.functional.cross_entropy(model(x, without_csr(blocks) if strip else blocks), y,
                                                     ignore_index=-1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(loss.item())
        states.append(model.state_dict())
        losses.append(run)
    return states, losses


@pytest.mark.parametrize("model_name", ["graphsage", "gcn"])
def test_the_csr_aggregation_trains_the_scatter_forms_weights_bit_for_bit(dataset, model_name: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # no dropout, so both runs draw nothing: every difference would come from the aggregation
    calls = spy(monkeypatch, "csr_sum")
    states, _ = train_both_forms(dataset, model_name, epochs=2, dropout=0.0)
    assert len(calls) == 2 * 2 * len(dataset.samples.batch_ids("train", 0))  # the C path ran: 2 layers a step
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_csr_mean_gradient_needs_only_what_is_asked() -> None:
    indptr, cols = torch.tensor([0, 2, 2, 3]), torch.tensor([0, 1, 1])
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    out = csr_mean(h, indptr, cols)
    assert out.tolist() == [[2.0, 3.0], [0.0, 0.0], [3.0, 4.0]]  # an empty row is 0
    out.sum().backward()
    assert h.grad.tolist() == [[0.5, 0.5], [1.5, 1.5]]
    assert csr_mean(h.detach(), indptr, cols).grad_fn is None


def test_dropout_draws_from_torchs_generator_and_has_dropouts_gradient() -> None:
    h = torch.randn(300, 40, requires_grad=True)
    torch.manual_seed(5)
    a = dropout(h, 0.4, training=True)
    torch.manual_seed(5)
    b = dropout(h, 0.4, training=True)
    c = dropout(h, 0.4, training=True)
    assert torch.equal(a, b) and not torch.equal(b, c)
    kept = a != 0
    assert abs(kept.float().mean().item() - 0.6) < 0.02
    assert torch.allclose(a[kept], h[kept] / 0.6)
    a.backward(torch.ones_like(a))
    assert torch.equal(h.grad, kept.float() * torch.tensor(1 / 0.6, dtype=torch.float32))
    assert dropout(h, 0.4, training=False) is h and dropout(h, 0.0, training=True) is h
    assert torch.equal(dropout(h, 1.0, training=True), torch.zeros_like(h))  # F.dropout's p = 1


def test_bf16_draws_the_float32_mask() -> None:
    h = torch.randn(64, 32)
    torch.manual_seed(1)
    full = dropout(h, 0.5, training=True)
    torch.manual_seed(1)
    half = dropout(h.to(torch.bfloat16), 0.5, training=True)
    assert half.dtype == torch.bfloat16 and torch.equal(half != 0, full != 0)


def test_native_ops_step_aside_while_exporting_and_for_other_dtypes() -> None:
    x = torch.randn(4, 3)
    assert native_applies(x) and not native_applies(x.double()) and not native_applies(x, x.to(torch.bfloat16))

    seen = []

    class Probe(torch.nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            seen.append(native_applies(h))
            return h + 1

    torch.jit.trace(Probe(), (x,), check_trace=False)
    assert seen == [False]  # inside the trace (an ONNX export traces too)
    torch.manual_seed(2)
    d = dropout(x.double(), 0.5, training=True)  # F.dropout's own draw
    torch.manual_seed(2)
    assert torch.equal(d, torch.nn.functional.dropout(x.double(), 0.5, training=True))


def test_a_seeded_training_run_repeats_exactly(dataset) -> None:
    cfg = TrainConfig(hidden_dim=16, dropout=0.5, epochs=2, seed=3, device="cpu")
    runs = [train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels) for _ in range(2)]
    assert runs[0].losses == runs[1].losses
    assert all(torch.equal(v, runs[1].best_state_dict[k]) for k, v in runs[0].best_state_dict.items())
    other = train(dataclasses.replace(cfg, seed=4), dataset.samples, InMemoryFeatures(dataset.features),
                  dataset.labels)
    assert other.losses != runs[0].losses


@pytest.mark.parametrize("threads", [1, 2])
def test_results_do_not_depend_on_torchs_thread_count(dataset, threads: int) -> None:
    batch = dataset.samples.batch(dataset.samples.batch_ids("train", 0)[0])
    x, blocks = torch.from_numpy(dataset.features[batch.nodes]), to_tensor_blocks(batch.blocks())
    before = torch.get_num_threads()
    outs = []
    try:
        for n in (1, threads):
            torch.set_num_threads(n)
            torch.manual_seed(0)
            model = GraphSAGE(x.shape[1], 16, 4, 2, dropout=0.5)
            outs.append(model(x, blocks).detach().numpy())
    finally:
        torch.set_num_threads(before)
    assert np.array_equal(outs[0], outs[1])


def test_gat_attends_in_c_with_the_torch_forms_masks_and_numbers(dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    # attention dropout on: both forms draw one seed per layer from torch's generator and use dropout()'s mask,
    # so they train the same model; exp may differ in the last bit between libm and torch, hence a tolerance
    calls = spy(monkeypatch, "gat_attend")
    states, losses = train_both_forms(dataset, "gat", epochs=1, dropout=0.5, heads=4)
    assert len(calls) == 2 * len(dataset.samples.batch_ids("train", 0))
    assert np.allclose(losses[0], losses[1], rtol=1e-5)
    assert all(torch.allclose(states[0][k], states[1][k], rtol=1e-4, atol=1e-6) for k in states[0])

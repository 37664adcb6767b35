"""PyG's GraphSAGE trained on Strata's out-of-core batches (``pipelines.batches``).

    python examples/pyg_graphsage.py --dataset planetoid:../shared/datasets/planetoid/cora \
        --set plan.cpu_cache_fraction=0.1 --epochs 40

Strata builds (or reuses) the artifacts up to ``pack`` and serves each batch through the policy's caches and
packed chunks; the model, the loss and the loop are PyG's and yours. Needs ``torch_geometric``
(``pip install .[pyg]``).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from pipelines.batches import TrainingData, open_training_data


def accuracy(model: torch.nn.Module, data: TrainingData, split: str) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in data.batches(split):
            pred = model(batch.x, batch.edge_index)[: batch.batch_size].argmax(1)
            labelled = batch.y >= 0
            correct += int((pred[labelled] == batch.y[labelled]).sum())
            total += int(labelled.sum())
    return correct / max(total, 1)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="tiny")
    parser.add_argument("--root", default=None, help="Strata's data root (default STRATA_HOME or ./strata_data)")
    parser.add_argument("--policy", default=None, help="default: the config's (auto: chosen per run)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override KEY=VALUE")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(args.seed)
    with open_training_data(args.dataset, root=args.root, overrides=args.overrides, policy=args.policy) as data:
        torch.set_num_threads(data.compute_threads)  # on the CPU, a core for the loader when it reads the disk
        model = GraphSAGE(data.num_features, args.hidden, num_layers=len(data.cfg.sample.fanouts),
                          out_channels=data.num_classes, dropout=0.5).to(data.device)
        optimiser = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        start = time.perf_counter()
        for epoch in range(args.epochs):
            model.train()
            for batch in data.batches("train", epoch):
                out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                            num_sampled_edges_per_hop=batch.num_sampled_edges)[: batch.batch_size]
                loss = F.cross_entropy(out, batch.y, ignore_index=-1)  # -1: unlabelled
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        train_s = time.perf_counter() - start
        report = {"policy": data.cfg.policy, "epochs": args.epochs, "train_s": round(train_s, 3),
                  "val_acc": accuracy(model, data, "val"), "test_acc": accuracy(model, data, "test"),
                  "bytes_read": data.bytes_read, "read_requests": data.read_requests}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()

"""Link prediction (``train.task=link``): edge split, encoders, decoders, negatives, metrics, training loop.

Modules: :mod:`~trainer.link.split` (deterministic train/valid/test edge split), :mod:`~trainer.link.negatives`
(uniform and degree negatives shared per chunk), :mod:`~trainer.link.decoders` (dot, DistMult),
:mod:`~trainer.link.encoders` (GNN over sampled neighbourhoods, learned embeddings),
:mod:`~trainer.link.embeddings` (Adagrad embedding table), :mod:`~trainer.link.metrics` (MRR, Hits@k,
filtered ranking), :mod:`~trainer.link.train` (the loop) and :mod:`~trainer.link.run` (building a run).
"""

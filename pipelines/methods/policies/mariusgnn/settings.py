"""``mariusgnn``'s own settings (plan section): the partitions, the buffer and the order of partition sets.
:mod:`pipelines.config` puts them in the ``plan`` section (``--set plan.buffer_partitions=8``); the
``artifact="selected"`` ones change only ``mariusgnn``'s artifacts."""

from __future__ import annotations

from typing import Literal

from pipelines.core.sections import Section
from trainer.config import setting

__all__ = ["MariusGNNPlanSettings"]


class MariusGNNPlanSettings(Section):
    """``mariusgnn``'s part of the ``plan`` section."""

    num_partitions: int = setting(
        0, "mariusgnn: physical partitions p of the feature file (0 = MariusGNN's rule p = min(NO/D, sqrt(EO/D)), "
        "raised until two fit the CPU budget).", artifact="selected", ge=0)
    buffer_partitions: int = setting(
        0, "mariusgnn: partitions c the CPU buffer holds (0 = the largest c with c*PO + 2c^2*EBO under the CPU "
        "budget plan.cpu_cache_bytes / cpu_cache_fraction).", artifact="selected", ge=0)
    partition_order: Literal["beta", "comet", "random", "alg7"] = setting(
        "alg7", "mariusgnn: order of partition sets when the training partitions do not fit the buffer: BETA "
        "(greedy, fewest swaps), COMET (random logical partitions, deferred assignment), random swaps (every pair "
        "co-resident), or alg7 (every partition read once: node classification's Alg. 7; under "
        "train.task=link, which must pair every two partitions, alg7 means beta).", artifact="selected")
    prefetch_partitions: int = setting(
        1, "mariusgnn, train.task=link: spare buffer slots the prefetch thread reads the next set's incoming "
        "partitions into while the current set trains (0 = every load synchronous); the buffer holds c + this "
        "many partitions, and the rows trained do not depend on it.", artifact=False, ge=0)
    static_fill: Literal["random", "connected"] = setting(
        "random", "mariusgnn: the static set's c - k other partitions, re-drawn every epoch: uniformly (the thesis) "
        "or in proportion to their edges to the training partitions.", artifact="selected")
    train_first: bool = setting(
        True, "mariusgnn: lay the training nodes out in the first k partitions (one static set per epoch, zero "
        "swaps, when k < c); false: partitions by locality only, always an order.", artifact="selected")

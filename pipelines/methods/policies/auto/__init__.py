"""``policy=auto``: the policy (and its main knobs, and the compute threads) chosen per run by a cost model of
the epoch; :mod:`.policy` has the story, :mod:`.cost` the model, :mod:`.probe` the compute probe."""

from pipelines.methods.policies.auto.policy import (
    Auto,
    candidate_names,
    choice_stats,
    choice_version,
    resolved,
    usable_memory,
    with_settings,
)

__all__ = ["Auto", "candidate_names", "choice_stats", "choice_version", "resolved", "usable_memory", "with_settings"]

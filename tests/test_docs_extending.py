"""docs/EXTENDING.md's worked examples run as written (every ```python block, in order, in one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.methods.orders import REORDER_STRATEGIES
from pipelines.methods.partitioners import PARTITIONERS
from pipelines.methods.policies import POLICIES
from pipelines.methods.samplers import SAMPLERS
from pipelines.methods.sources import SOURCE_KINDS
from trainer.models import MODELS

DOC = Path(__file__).resolve().parent.parent / "docs" / "EXTENDING.md"
REGISTRIES = (PARTITIONERS, REORDER_STRATEGIES, POLICIES, SAMPLERS, SOURCE_KINDS, MODELS)


def test_extending_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    before = {id(r): set(r.names()) for r in REGISTRIES}
    namespace: dict = {"__name__": "docs_extending"}
    try:
        for i, code in enumerate(blocks):
            exec(compile(code, f"{DOC.name}[block {i}]", "exec"), namespace)
        added = {r.kind: set(r.names()) - before[id(r)] for r in REGISTRIES}
        assert added == {"partition.method": {"degree-stripes"}, "reorder.strategy": {"reverse-degree"},
                         "policy": {"degree-cache"}, "sample.sampler": {"first-hop-full"},
                         "dataset kind": {"ring"}, "train.model": {"sage-max-norm"}}
    finally:
        for r in REGISTRIES:
            for name in set(r.names()) - before[id(r)]:
                r.unregister(name)

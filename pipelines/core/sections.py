"""What a configuration section is made of: the frozen base, the shared field types, and the run's shape.

A section is a frozen pydantic model of :func:`trainer.config.setting` fields. The sections live beside what
they configure -- the reorder strategies' :class:`~pipelines.methods.orders.settings.ReorderConfig`, the
partitioners' :class:`~pipelines.methods.partitioners.settings.PartitionConfig`, each policy's own plan and pack
settings in its module -- and :mod:`pipelines.config` assembles them into the run's ``PipelineConfig``, where
the names they give are checked against the registries and the artifact parameters are derived. Nothing here
knows a method or a registry.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic.fields import FieldInfo

from pipelines.core.confine import parse_bytes

__all__ = ["SEED_BOUNDS", "Bytes", "RunConfig", "Section", "is_section", "section_fields"]

#: Bounds of every seed: numpy's generators and the C kernels take a non-negative int64.
SEED_BOUNDS = {"ge": 0, "lt": 1 << 63}


def _size(value: Any) -> Any:
    """A byte count given as a size string (``"2G"``) -> int; anything else for the field's own checks."""
    if isinstance(value, str) and re.search(r"[A-Za-z]", value):
        try:
            return parse_bytes(value)
        except ValueError:  # pydantic names the field: "'plan.cpu_cache_bytes' expected a size ..."
            raise ValueError(f"a size such as 512M, 2G or 1.5GiB, or a number of bytes (got {value!r})") from None
    return value


#: A byte-count setting: an int, or a size such as ``512M`` or ``2G``.
Bytes = Annotated[int, BeforeValidator(_size)]


class Section(BaseModel):
    """A frozen config section: unknown keys and non-finite numbers (inf, NaN) are refused, values never change
    after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def is_section(value: Any) -> bool:
    """Whether ``value`` is a config section (a pydantic model or pydantic dataclass), not a setting's value."""
    return hasattr(value, "__pydantic_fields__")


def section_fields(section: Any) -> dict[str, FieldInfo]:
    """The declared fields of a config section (a pydantic model or a pydantic dataclass)."""
    fields = getattr(type(section), "model_fields", None)
    return dict(fields if fields is not None else type(section).__pydantic_fields__)


class RunConfig(Protocol):
    """A run's configuration as the methods read it: the dataset, the policy and one section per stage.

    :class:`pipelines.config.PipelineConfig` is the implementation; the methods sit below it and never import
    it (the config is assembled from their settings), so they name this shape instead. Each policy reads the
    ``plan`` and ``pack`` settings it declares (``Policy.settings``) and the shared cache budgets
    (``plan.budgets()``).
    """

    dataset: str
    policy: str
    memory_budget: int | None

    @property
    def dataset_name(self) -> str: ...

    @property
    def reorder(self) -> Any: ...

    @property
    def partition(self) -> Any: ...

    @property
    def sample(self) -> Any: ...

    @property
    def plan(self) -> Any: ...

    @property
    def pack(self) -> Any: ...

    @property
    def train(self) -> Any: ...

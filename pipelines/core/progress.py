"""The progress callback every long step takes: ``progress(description, completed, total)``.

The CLI renders it as a live bar (rich), Dagster as log lines; tests and library callers pass None.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress"]

#: A progress callback: (description, completed, total).
Progress = Callable[[str, int, int], None]

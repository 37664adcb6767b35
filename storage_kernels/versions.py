"""Names and versions of artifacts: the rule for a safe path component, the canonical JSON of parameters and
the version computed from it (the first 12 hex characters of a sha256), so the same inputs always give the same
version.
"""

from __future__ import annotations

import hashlib
import json as _json
import re
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["VERSION_CHARS", "compute_version"]

VERSION_CHARS = 12

_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def _check_name(value: Any, what: str) -> str:
    """A safe path component: letters, digits, ``_-.``, not starting with ``.`` or ``-``, <= 128 chars."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ValueError(
            f"'{what}' expected letters, digits and '_-.' (not starting with '.' or '-', at most 128) (got {value!r})"
        )
    return value


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _canonical_json(obj: Any, what: str) -> str:
    """Sorted keys, no whitespace, no NaN/inf: the same value always gives the same text."""
    try:
        return _json.dumps(
            obj,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=_json_default,
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"'{what}' expected JSON-serialisable values without NaN/inf (got {e})") from e


def _check_upstream(upstream: Any) -> dict[str, str]:
    if not isinstance(upstream, dict):
        raise ValueError(f"'upstream' expected a dict stage -> version (got {type(upstream).__name__})")
    return {_check_name(s, "upstream stage"): _check_name(v, f"upstream[{s!r}]") for s, v in upstream.items()}


def compute_version(stage: str, format_version: int, params: dict[str, Any], upstream: dict[str, str]) -> str:
    """First 12 hex chars of sha256 over canonical JSON of (stage, format_version, params, upstream)."""
    _check_name(stage, "stage")
    if isinstance(format_version, bool) or not isinstance(format_version, (int, np.integer)):
        raise ValueError(f"'format_version' expected an int (got {format_version!r})")
    format_version = int(format_version)
    if not isinstance(params, dict):
        raise ValueError(f"'params' expected a dict (got {type(params).__name__})")
    payload = {
        "stage": stage,
        "format_version": format_version,
        "params": params,
        "upstream": _check_upstream(upstream),
    }
    text = _canonical_json(payload, "params")
    return hashlib.sha256(text.encode("utf8")).hexdigest()[:VERSION_CHARS]

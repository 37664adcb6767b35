"""storage_kernels/_native.pyi against the built module.

The stub and the C functions must agree: the same public functions and constants, and for every function the
same parameter names, order, kinds and defaults. The C side is read from each function's __text_signature__
(its docstring in CPython's signature convention, see module.c) and, for the names, from its kwlist (every
parameter passed by keyword must parse); the stub side is parsed with ``ast``. ``stub_mismatches`` reports
every difference, and a test feeds it edited stubs to show that a drift is caught.
"""

from __future__ import annotations

import ast
import inspect
import re
import types
from pathlib import Path

import pytest

import storage_kernels
from storage_kernels import _native

STUB_PATH = Path(storage_kernels.__file__).parent / "_native.pyi"

# (name, kind, repr(default) or None when required): repr, so that False and 0 differ
Param = tuple[str, inspect._ParameterKind, "str | None"]


def stub_api(source: str) -> tuple[dict[str, list[Param]], set[str]]:
    """Functions (name -> parameters) and public constants declared by a stub."""
    functions: dict[str, list[Param]] = {}
    constants: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = stub_params(node.args)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if not node.target.id.startswith("_"):
                constants.add(node.target.id)
    return functions, constants


def stub_params(args: ast.arguments) -> list[Param]:
    positional = [(a, inspect.Parameter.POSITIONAL_ONLY) for a in args.posonlyargs]
    positional += [(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [(a.arg, kind, None if d is None else repr(ast.literal_eval(d))) for (a, kind), d in
              zip(positional, defaults, strict=True)]
    if args.vararg is not None:
        params.append((args.vararg.arg, inspect.Parameter.VAR_POSITIONAL, None))
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append((a.arg, inspect.Parameter.KEYWORD_ONLY, None if d is None else repr(ast.literal_eval(d))))
    if args.kwarg is not None:
        params.append((args.kwarg.arg, inspect.Parameter.VAR_KEYWORD, None))
    return params


def runtime_api() -> tuple[dict[str, list[Param]], set[str]]:
    """Functions (name -> parameters, from __text_signature__) and public constants of the built module."""
    functions: dict[str, list[Param]] = {}
    constants: set[str] = set()
    for name in dir(_native):
        value = getattr(_native, name)
        if isinstance(value, types.BuiltinFunctionType):
            functions[name] = runtime_params(value)
        elif not name.startswith("_") and not isinstance(value, types.ModuleType):
            constants.add(name)
    return functions, constants


def runtime_params(func) -> list[Param]:
    try:
        signature = inspect.signature(func)
    except ValueError as e:  # no __text_signature__: the docstring does not follow the convention
        raise AssertionError(f"'{func.__name__}' expected a __text_signature__ (got docstring {func.__doc__!r})") from e
    return [(p.name, p.kind, None if p.default is p.empty else repr(p.default)) for p in signature.parameters.values()]


def describe(params: list[Param]) -> str:
    return ", ".join(f"{name} [{kind.description}]" + ("" if d is None else f"={d}") for name, kind, d in params)


def stub_mismatches(source: str) -> list[str]:
    """Every difference between a stub's declarations and the built module, one line each."""
    stub_functions, stub_constants = stub_api(source)
    functions, constants = runtime_api()
    problems = []
    for kind, here, declared in (("function", functions.keys(), stub_functions.keys()),
                                 ("constant", constants, stub_constants)):
        problems += [f"{kind} '{n}' is in the module but not in the stub" for n in sorted(here - declared)]
        problems += [f"{kind} '{n}' is in the stub but not in the module" for n in sorted(declared - here)]
    for name in sorted(functions.keys() & stub_functions.keys()):
        if functions[name] != stub_functions[name]:
            problems.append(f"'{name}' expected the module's parameters ({describe(functions[name])}) "
                            f"(got ({describe(stub_functions[name])}) in the stub)")
    return problems


def test_stub_matches_module():
    assert stub_mismatches(STUB_PATH.read_text()) == []


def test_stub_covers_every_kernel_wrapper():
    """Every storage_kernels.kernels wrapper named after a native function has its stub (the boundary is complete)."""
    from storage_kernels import kernels

    stub_functions, _ = stub_api(STUB_PATH.read_text())
    wrapped = {name for name in kernels.__all__ if callable(getattr(_native, name, None))}
    assert wrapped <= stub_functions.keys()
    assert {"cluster_pass", "refine_pass", "csr_aggregate", "rabbit_order"} <= stub_functions.keys()


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("def csr_count(src: _Int64, counts: _Int64)", "def csr_count(src: _Int64, count: _Int64)", "'csr_count'"),
        ("def csr_place(src: _Int64, dst: _Int64,", "def csr_place(dst: _Int64, src: _Int64,", "'csr_place'"),
        ("block_nodes: int = 4096", "block_nodes: int = 1024", "'fennel_pass'"),
        ("restream: bool = False", "restream: bool = 0", "'fennel_pass'"),
        ("train_norm: float,", "train_norm: float = 1.0,", "'fennel_pass'"),
        ("train_weight: _Int64 | None = None,\n) -> None", ") -> None", "'fennel_pass'"),
        ("edge_weight: _Int64 | None = None,\n) -> int: ...\ndef cluster_pass", ") -> int: ...\ndef cluster_pass",
         "'grem_pass'"),
        ("def _set_dense_map_limit(num_nodes: int, /)", "def _set_dense_map_limit(num_nodes: int)",
         "'_set_dense_map_limit'"),
        ("def gather_rows(src: np.ndarray, idx: _Int64, out: np.ndarray, num_threads: int = 0)",
         "def gather_rows(src: np.ndarray, idx: _Int64, out: np.ndarray, *, num_threads: int = 0)", "'gather_rows'"),
        ("def csr_aggregate(", "def _csr_aggregate(", "function 'csr_aggregate' is in the module but not"),
        ("def close_fd(fd: int) -> None: ...\n",
         "def close_fd(fd: int) -> None: ...\ndef open_fd(fd: int) -> int: ...\n",
         "function 'open_fd' is in the stub but not"),
        ("DIRECT_ALIGN: int", "DIRECT_ALIGNMENT: int", "constant 'DIRECT_ALIGN' is in the module but not"),
    ],
)
def test_a_drifted_stub_is_caught(old, new, problem):
    source = STUB_PATH.read_text()
    assert source.count(old) == 1, f"the drift example {old!r} no longer matches the stub: update the test"
    problems = stub_mismatches(source.replace(old, new))
    assert any(problem in p for p in problems), problems


# argument-parsing failures of PyArg_ParseTupleAndKeywords (a kwlist name that differs from the stub's)
_PARSE_ERROR = re.compile(r"invalid keyword argument|missing required argument|positional argument|takes at most")


class _Arg(int):
    """Converts under every format the kernels parse ('O', 'n', 'i', 'L', 'K', 'd', 'p'), and -1 fails every
    kernel's validation (a negative thread count, descriptor, size or a non-buffer) before any work."""


@pytest.mark.parametrize("name", sorted(n for n, p in runtime_api()[0].items()
                                        if p and p[0][1] is inspect.Parameter.POSITIONAL_OR_KEYWORD))
def test_every_parameter_by_keyword(name):
    """The C kwlist has the stub's names: passing every stub parameter by keyword gets past argument parsing."""
    stub_functions, _ = stub_api(STUB_PATH.read_text())
    kwargs = {param: _Arg(-1) for param, _, _ in stub_functions[name]}
    with pytest.raises((ValueError, TypeError)) as info:
        getattr(_native, name)(**kwargs)
    assert not _PARSE_ERROR.search(str(info.value)), str(info.value)

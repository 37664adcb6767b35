"""Build the C extension ``storage_kernels._native`` (everything else lives in pyproject.toml).

The C sources sit in one folder per kernel family under ``storage_kernels/_native/`` (``io/``, ``graph/``,
``reorder/``, ``partition/``, ``cache/``, ``nn/``) with ``module.c``, ``common.c`` and the headers at the top;
every ``.c`` below it is compiled, and the top folder is the include path (``#include "common.h"`` from any
family folder).
"""

from pathlib import Path

import numpy as np
from setuptools import Extension, setup

native_dir = Path("storage_kernels/_native")
sources = sorted(p.as_posix() for p in native_dir.rglob("*.c"))

setup(
    ext_modules=[
        Extension(
            "storage_kernels._native",
            sources=sources,
            depends=sorted(p.as_posix() for p in native_dir.rglob("*.h")),
            include_dirs=[native_dir.as_posix(), np.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("_GNU_SOURCE", "1")],
            extra_compile_args=["-O3", "-std=c11", "-pthread", "-Wall", "-Wno-unused-function"],
            extra_link_args=["-pthread"],
        )
    ]
)

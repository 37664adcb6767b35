"""Build the C extension ``storage_kernels._native`` (everything else lives in pyproject.toml)."""

from pathlib import Path

import numpy as np
from setuptools import Extension, setup

native_dir = Path("storage_kernels/_native")
sources = sorted(str(p) for p in native_dir.glob("*.c"))

setup(
    ext_modules=[
        Extension(
            "storage_kernels._native",
            sources=sources,
            include_dirs=[str(native_dir), np.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("_GNU_SOURCE", "1")],
            extra_compile_args=["-O3", "-std=c11", "-pthread", "-Wall", "-Wno-unused-function"],
            extra_link_args=["-pthread"],
        )
    ]
)

"""Build glue for the optional C accelerators ``records._speedups``, ``records._lz4``,
``storage._cleaner_speedups`` and (Linux only) ``storage._fsync_worker`` (everything else is
in pyproject.toml).

The extensions are optional: if one cannot be compiled, the install still succeeds and
records/walks.py and storage/offset_map.py use their pure-Python reference code,
records/codecs.py cramjam's lz4 decoder, and broker/flusher.py its Python fsync threads.
``SUNDIAL_NO_EXTENSIONS=1`` skips the build (and, at run time, the import: the same rule
in records/extensions.py, which this file cannot import before the build).
"""

import os
import sys

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("SUNDIAL_NO_EXTENSIONS", "") not in ("1", "true", "yes"):
    # records/_varint.h (the varint reader and writer) is shared by both.
    shared = {"include_dirs": ["records"], "depends": ["records/_varint.h"], "optional": True,
              "extra_compile_args": ["-O2"]}
    ext_modules.append(Extension("records._speedups", ["records/_speedups.c"], **shared))
    ext_modules.append(Extension("records._lz4", ["records/_lz4.c"], optional=True, extra_compile_args=["-O2"]))
    ext_modules.append(Extension("storage._cleaner_speedups", ["storage/_cleaner_speedups.c"], **shared))
    if sys.platform.startswith("linux"):   # eventfd
        ext_modules.append(Extension("storage._fsync_worker", ["storage/_fsync_worker.c"], optional=True,
                                     extra_compile_args=["-O2"], libraries=["pthread"]))

setup(ext_modules=ext_modules)

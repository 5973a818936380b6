"""Build glue: the ``sundial`` package table and the optional C accelerators (everything else is
in pyproject.toml).

Packages: the repository keeps one folder per layer (``broker/``, ``protocol/``,
``storage/``, ``config/``, ``records/``, ``tools/``, ``pipeline/``); what pip installs goes
under one top-level name, ``sundial`` (``sundial.broker``, ``sundial.storage``, ...), through
the package-dir table below, so that Sundial adds no ``config``, ``records`` or ``tools`` of
its own to site-packages to clash with PyPI's packages of those names.

C accelerators: ``sundial.records._speedups``, ``sundial.storage._cleaner_speedups`` and
(Linux only) ``sundial.storage._fsync_worker``. (lz4 is decoded by cramjam: records/codecs.py.)

The extensions are optional: if one cannot be compiled, the install still succeeds and
records/walks.py and storage/offset_map.py use their pure-Python reference code and
broker/flusher.py its Python fsync threads.
``SUNDIAL_NO_EXTENSIONS=1`` skips the build (and, at run time, the import: the same rule
in records/extensions.py, which this file cannot import before the build).

``SUNDIAL_STRICT_C=1`` (set by scripts/test) builds them with ``-Wall -Wextra -Werror`` and
makes them required: a warning, or a compiler that cannot build them, fails the install.
A normal install leaves both off, so any compiler (or none) still installs Sundial.
"""

import os
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

#: Repository folder → installed package under ``sundial``.
LAYERS = ("records", "protocol", "storage", "config", "broker", "tools", "pipeline")
package_dir = {"sundial": "sundial"}
packages = ["sundial"]
for layer in LAYERS:
    package_dir[f"sundial.{layer}"] = layer
    packages += [f"sundial.{layer}"] + [f"sundial.{layer}.{sub}" for sub in find_packages(layer)]

ext_modules = []
strict = os.environ.get("SUNDIAL_STRICT_C", "") in ("1", "true", "yes")
if os.environ.get("SUNDIAL_NO_EXTENSIONS", "") not in ("1", "true", "yes"):
    common = {"optional": not strict, "extra_compile_args": ["-O2"] + (["-Wall", "-Wextra", "-Werror"] if strict else [])}
    # records/_varint.h (the varint reader and writer) and records/_record.h (parse_record, the
    # one record tokenizer) are shared by both.
    shared = {"include_dirs": ["records"], "depends": ["records/_varint.h", "records/_record.h"], **common}
    ext_modules.append(Extension("sundial.records._speedups", ["records/_speedups.c"], **shared))
    ext_modules.append(Extension("sundial.storage._cleaner_speedups", ["storage/_cleaner_speedups.c"], **shared))
    if sys.platform.startswith("linux"):   # eventfd
        ext_modules.append(Extension("sundial.storage._fsync_worker", ["storage/_fsync_worker.c"],
                                     libraries=["pthread"], **common))



class StrictBuildExt(build_ext):
    """With ``SUNDIAL_STRICT_C``: compile every time (objects left by an earlier build would
    skip the warnings check)."""

    def finalize_options(self):
        super().finalize_options()
        self.force = True


cmdclass = {"build_ext": StrictBuildExt} if ext_modules and strict else {}
setup(packages=packages, package_dir=package_dir, ext_modules=ext_modules, cmdclass=cmdclass)

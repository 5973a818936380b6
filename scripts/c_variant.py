#!/usr/bin/env python3
"""Builds a separate, instrumented copy of the ``sundial`` package for scripts/sanitize and scripts/fuzz.

    python scripts/c_variant.py OUT_DIR --cc CC --cflags "FLAGS" [--ldflags "FLAGS"]

Copies the Python sources to OUT_DIR/sundial/... as setup.py's package table installs
them (``sundial`` from sundial/, ``sundial.<layer>`` from <layer>/), then compiles every C
accelerator (records/_*.c, storage/_*.c) with CC and FLAGS into that copy, so that
``PYTHONPATH=OUT_DIR`` imports the instrumented build ahead of the installed one. The
repository's own extension modules are left alone (other processes may be using them).
Prints OUT_DIR.
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ("records", "protocol", "storage", "config", "broker", "tools", "pipeline")


def copy_sources(out: str) -> None:
    ignore = shutil.ignore_patterns("*.so", "__pycache__", "*.pyc", "*.o")
    target = os.path.join(out, "sundial")
    if os.path.isdir(target):
        shutil.rmtree(target)
    shutil.copytree(os.path.join(ROOT, "sundial"), target, ignore=ignore)
    for layer in LAYERS:
        shutil.copytree(os.path.join(ROOT, layer), os.path.join(target, layer), ignore=ignore)


def build(out: str, cc: str, cflags: list[str], ldflags: list[str]) -> None:
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    sources = sorted(glob.glob(os.path.join(ROOT, "records", "_*.c")) + glob.glob(os.path.join(ROOT, "storage", "_*.c")))
    for source in sources:
        layer = os.path.basename(os.path.dirname(source))
        module = os.path.splitext(os.path.basename(source))[0]
        target = os.path.join(out, "sundial", layer, module + suffix)
        cmd = [cc, "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", *cflags, f"-I{include}",
               f"-I{os.path.join(ROOT, 'records')}", source, "-o", target, "-lpthread", *ldflags]
        print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--cc", default=os.environ.get("CC", "cc"))
    parser.add_argument("--cflags", default="")
    parser.add_argument("--ldflags", default="")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    copy_sources(out)
    build(out, args.cc, shlex.split(args.cflags), shlex.split(args.ldflags))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

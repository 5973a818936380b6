"""Coverage-guided differential fuzzing of one C entry point with atheris (libFuzzer).

    python tests/fuzz/fuzz.py TARGET [libFuzzer flags] CORPUS_DIR...

Run it through ``scripts/fuzz TARGET SECONDS``, which builds the C accelerators with
libFuzzer's coverage instrumentation and the address and undefined-behaviour sanitizers
and imports that build. TARGET is a key of ``differential.TARGETS``; an input on which C
and Python disagree, or that crashes either, is a finding (libFuzzer writes it out).
Coverage comes from the C code; ``SUNDIAL_FUZZ_PY_COVERAGE=1`` instruments the Python
references too, so that their branches guide the search as well (about 7 times fewer
executions per second).
"""

import os
import sys

import atheris

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

if os.environ.get("SUNDIAL_FUZZ_PY_COVERAGE", "") in ("1", "true", "yes"):
    with atheris.instrument_imports(include=["sundial.records", "sundial.storage", "differential"]):
        import differential
else:
    import differential


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in differential.TARGETS:
        sys.exit(f"usage: fuzz.py TARGET [libFuzzer flags] [CORPUS_DIR...]; targets: {', '.join(differential.TARGETS)}")
    check = differential.TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0]] + sys.argv[2:], check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

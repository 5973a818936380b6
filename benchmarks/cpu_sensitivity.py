"""Does a scenario measure the broker? Sundial against itself with a CPU handicap.

``broker_bench.py`` compares two brokers by what a client achieves against each. That
comparison says something about the brokers only if the client's rate depends on the
broker's cost. This script tests that assumption directly: it starts two Sundial daemons
of the same code, one of them ("handicapped", shown in the peer's column) spending
``--burn-us`` microseconds of busy CPU on the event loop in every Produce request before
the request is appended, and runs the chosen ``broker_bench.py`` groups against both,
interleaved.

If a scenario's client rate stays the same while the handicapped broker's CPU per
message doubles, the scenario is bound by the client (and the host), and its
sundial/peer ratio in ``broker_bench.py`` measures noise, not the broker. The handicap
lives only in the process this script starts (it wraps the Produce handler before the
daemon's dispatch table is built); the daemon's code is unchanged.

    python benchmarks/cpu_sensitivity.py                       # ck100, 1,000 us, 3 repetitions
    python benchmarks/cpu_sensitivity.py --only ck100 --burn-us 2000 --repeat 5

Prints ``broker_bench.py``'s table: "sundial" is the plain daemon, "peer" the handicapped
one; read the msgs/s ratio together with the broker CPU per message.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from bench_daemon import start_sundial, stop

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: Run by ``python -c`` in the handicapped daemon: wraps ``begin_produce`` before
#: ``broker.dispatch`` (which keeps a reference to it) is imported, then runs the CLI.
_WRAPPER = """
import sys, time
import sundial.broker.handlers.produce as produce
if "sundial.broker.dispatch" in sys.modules:  # its table already holds the unwrapped handler
    sys.exit("sundial: error: cpu_sensitivity: broker.dispatch was imported before the handler could be wrapped")
_burn_s = float(sys.argv[1]) / 1e6
_begin = produce.begin_produce
def begin_produce(*args, **kwargs):
    end = time.perf_counter() + _burn_s
    while time.perf_counter() < end:
        pass
    return _begin(*args, **kwargs)
produce.begin_produce = begin_produce
from sundial.cli import main
sys.exit(main(sys.argv[2:]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burn-us", type=int, default=1000,
                        help="busy CPU per Produce request in the handicapped daemon (default 1000)")
    parser.add_argument("--only", default="ck100", help="broker_bench.py groups (default ck100)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions (default 3)")
    args = parser.parse_args()
    if args.burn_us <= 0:
        parser.error("--burn-us must be positive")
    print(f"command: python benchmarks/cpu_sensitivity.py --burn-us {args.burn_us} --only {args.only} "
          f"--repeat {args.repeat}", flush=True)
    print(f"sundial = plain daemon; peer = the same code spending {args.burn_us} us of CPU per Produce request",
          flush=True)
    dirs = [tempfile.mkdtemp(prefix="sundial-sens-", dir=os.getcwd()) for _ in range(2)]
    procs = []
    try:
        plain, plain_bootstrap = start_sundial(dirs[0], cwd=ROOT)
        procs.append(plain)
        slow, slow_bootstrap = start_sundial(dirs[1], cwd=ROOT,
                                             launcher=[sys.executable, "-c", _WRAPPER, str(args.burn_us)])
        procs.append(slow)
        code = subprocess.call([sys.executable, os.path.join(HERE, "broker_bench.py"), "--only", args.only,
                                "--repeat", str(args.repeat),
                                "--bootstrap", plain_bootstrap, "--broker-pid", str(plain.pid),
                                "--peer-bootstrap", slow_bootstrap, "--peer-pid", str(slow.pid)])
    finally:
        for proc in procs:
            stop(proc)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()

"""`dse` with Yosys replaced by a deterministic stand-in, for tests that run whole `dse sweep`
processes to test the driver (sharing, killing, resuming), not synthesis:

    python tests/fake_synth_dse.py sweep SPEC ...      # as `dse sweep SPEC ...`

Area comes from the design (kernels, read ports), as test_sweep's `fake_area` does. Every call
appends a line to $TINYHW_FAKE_SYNTH_LOG when it is set, so a test counts real evaluations
(a point served from the evaluation cache is not synthesised)."""
from __future__ import annotations

import faulthandler
import os
import signal
import sys

import compiler.synth.area
from compiler.synth.area import AreaReport


def synthesize(design, target="ecp5", workdir=None, timeout=600, **options):
    comb = design.config.mem_read == "comb"
    log = os.environ.get("TINYHW_FAKE_SYNTH_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {design.config.mem_read} {design.config.lanes}\n")
    lanes = design.config.lanes
    return AreaReport(target=target, luts=100 * len(design.kernels) + 20 * lanes + (40 if comb else 0),
                      ffs=50 - (20 if comb else 0), bram=0 if comb else 1, lutram=0, dsp=lanes,
                      yosys_version="fake yosys", script="fake", seconds=0.0)


compiler.synth.area.synthesize = synthesize
faulthandler.register(signal.SIGUSR1)       # a test that sees a hang dumps every thread's stack

if __name__ == "__main__":
    from dse.cli import main
    sys.exit(main())

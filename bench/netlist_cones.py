"""Where a corpus design's control LUTs go, from its flat netlist (docs/estimator.md, "The LUTs'
control terms"):

    python bench/netlist_cones.py matmul8-comb-l2 cnn-int8 ...     # names of bench/calibrate_estimator.py's corpus

Each design is synthesised flat with the mapped netlist written (compiler.synth.area.synthesize,
netlist=True; cached). Every LUT4 (one LUT) and CCU2C (two, as the area report counts them) is
attributed to what its output reaches through other logic cells: flip-flops (by the name of the
net they drive) and the pins of memory primitives. Printed per design: the LUTs reaching a loop
counter or the step / copy registers, those reaching a memory's address or write-enable pins,
either, and what the shipped table prices as control (`advance_bits`, `steps`, `read_ports`).
A LUT reaching several sinks counts for each, so the columns overlap.
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from compiler.pnr.dsp_registers import Netlist  # noqa: E402

LOGIC = {"LUT4", "CCU2C", "PFUMX", "L6MUX21"}      # cells a cone passes through
LUTS = {"LUT4": 1, "CCU2C": 2}                      # as compiler.synth.area counts them
MEMORIES = {"DP16KD", "TRELLIS_DPR16X4"}
ADDRESS_PINS = {"ADA", "ADB", "WEA", "WEB", "CEA", "CEB", "RAD", "WAD", "WRE"}
CONTROL_REGISTER = re.compile(r"(i\d+|step|cctr|phase)(\$\d+)?")   # hw/kernel.py's counters, hw/top.py's copy counter


def cones(netlist: dict) -> tuple[dict[str, set], dict[str, dict], dict[int, str]]:
    """(LUT cell -> the (kind, name or pin) of every non-logic sink its output reaches, the cells,
    net bit -> its name)."""
    mod = netlist["modules"]["top"]
    names: dict[int, str] = {}
    for name, net in mod["netnames"].items():       # a bit's name: a user-given one over Yosys's $...
        for b in net["bits"]:
            if isinstance(b, int) and (b not in names or (names[b].startswith("$") and not name.startswith("$"))):
                names[b] = name
    cells = mod["cells"]
    net = Netlist(mod)
    reached: dict[str, set] = {}

    def visit(cn: str) -> set:
        if cn in reached:
            return reached[cn]
        reached[cn] = out = set()
        c = cells[cn]
        for pin, bits in c["connections"].items():
            if c.get("port_directions", {}).get(pin) != "output":
                continue
            for b in bits:
                for rc, rpin in net.loads_of(b):
                    if not rc:                  # a pin of the top module
                        continue
                    kind = cells[rc]["type"]
                    if kind in LOGIC:
                        out |= visit(rc)
                    elif kind == "TRELLIS_FF":
                        out.add(("ff", names.get(cells[rc]["connections"]["Q"][0], "?").split(".")[-1]))
                    else:
                        out.add((kind, re.sub(r"\d+$", "", rpin)))
        return out
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(cells) + 1000))
    return {cn: visit(cn) for cn, c in cells.items() if c["type"] in LUTS}, cells, names


def main() -> None:
    import calibrate_estimator as C
    from compiler.synth.area import synthesize
    from dse.estimate import design_features, load_prior
    prior = load_prior("ecp5")
    price = dict(zip(prior.metrics["luts"].names, prior.metrics["luts"].coef[1:])) if prior else {}
    corpus = {e.name: e for e in C.corpus()}
    print("| design | LUTs | counter flip-flops | LUTs reaching a counter | LUTs reaching a memory's address or "
          "write enable | either | priced as control |\n|---|---|---|---|---|---|---|")
    for name in sys.argv[1:]:
        design = C.design_of(corpus[name], "ecp5")
        with tempfile.TemporaryDirectory(prefix="cones-") as tmp:
            report = synthesize(design, "ecp5", Path(tmp), netlist=True)
            reached, cells, names = cones(json.loads(Path(report.netlist_path).read_text()))
        counters = sum(1 for c in cells.values() if c["type"] == "TRELLIS_FF"
                       and CONTROL_REGISTER.fullmatch(names.get(c["connections"]["Q"][0], "?").split(".")[-1]))
        to_ctr = to_mem = either = 0
        for cn, sinks in reached.items():
            w = LUTS[cells[cn]["type"]]
            a = any(k == "ff" and CONTROL_REGISTER.fullmatch(n) for k, n in sinks)
            b = any(k in MEMORIES and pin in ADDRESS_PINS for k, pin in sinks)
            to_ctr, to_mem, either = to_ctr + w * a, to_mem + w * b, either + w * (a or b)
        f = design_features(design, target="ecp5")
        priced = sum(price.get(k, 0.0) * f.get(k, 0.0) for k in ("advance_bits", "steps", "read_ports"))
        print(f"| {name} | {report.luts} | {counters} | {to_ctr} | {to_mem} | {either} | {priced:.0f} |", flush=True)


if __name__ == "__main__":
    main()

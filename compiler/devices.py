"""The FPGA parts the tool places designs on: the one catalogue (capacities as nextpnr 0.11
reports them, packages and their pins, speed grades), what a synthesised netlist needs of them,
and the choice of the smallest part that holds a design. Read by place-and-route
(compiler.pnr.timing), the multiplier plan (compiler.synth.multipliers: the DSPs of a target),
and the spec's device bounds (dse.spec)."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Mapping

FAMILIES = ("ecp5", "ice40")
HEADROOM = 0.8
"""The fill of every resource below which a smaller device is preferred."""
IO = "IO"
"""The pseudo-resource name of top-level pins (nextpnr: TRELLIS_IO / SB_IO)."""


@dataclass(frozen=True)
class Device:
    family: str
    name: str                               # the part, e.g. "LFE5U-85F"
    option: str                             # nextpnr's device option, e.g. "--85k"
    capacity: Mapping[str, int]             # nextpnr resource name -> sites on the die
    packages: tuple[tuple[str, int], ...]   # (package, user IO pins), preferred first
    speed: int | None = None                # ECP5 speed grade (SPEED_GRADES) nextpnr times the part at

    def package_for(self, pins: int) -> str | None:
        """The first package with enough pins, else None."""
        return next((p for p, n in self.packages if n >= pins), None)

    @property
    def max_pins(self) -> int:
        return max(n for _, n in self.packages)


def _ecp5(name: str, option: str, luts: int, ramw: int, ebr: int, mult: int, alu: int,
          packages: tuple[tuple[str, int], ...]) -> Device:
    # capacities as nextpnr 0.11 reports them for the die (TRELLIS_COMB = LUT4 sites)
    return Device("ecp5", name, option, {"TRELLIS_COMB": luts, "TRELLIS_FF": luts, "TRELLIS_RAMW": ramw,
                                         "DP16KD": ebr, "MULT18X18D": mult, "ALU54B": alu}, packages,
                  SPEED_GRADES["ecp5"][0])


SPEED_GRADES = {"ecp5": (6, 7, 8)}
"""Speed grades a part name may end in ("LFE5U-85F-8"), slowest first: the default. The parts
are sold in each; only the timing nextpnr signs off differs (`--speed`)."""


DEVICES: dict[str, tuple[Device, ...]] = {
    # smallest first. LFE5U-12F is left out: nextpnr models it as the 25F die (same capacities).
    "ecp5": (
        _ecp5("LFE5U-25F", "--25k", 24288, 3036, 56, 28, 14,
              (("CABGA381", 197), ("CABGA256", 197), ("CSFBGA285", 118), ("TQFP144", 98))),
        _ecp5("LFE5U-45F", "--45k", 43848, 5481, 108, 72, 36,
              (("CABGA381", 203), ("CABGA554", 245))),
        _ecp5("LFE5U-85F", "--85k", 83640, 10455, 208, 156, 78,
              (("CABGA381", 205), ("CABGA554", 259), ("CABGA756", 365))),
    ),
    # HX before UP: the UltraPlus parts are slower, so the UP5K is only chosen for its DSPs.
    "ice40": (
        Device("ice40", "iCE40HX1K", "--hx1k", {"ICESTORM_LC": 1280, "ICESTORM_RAM": 16, "ICESTORM_DSP": 0,
                                                 "ICESTORM_SPRAM": 0}, (("tq144", 96),)),
        Device("ice40", "iCE40HX8K", "--hx8k", {"ICESTORM_LC": 7680, "ICESTORM_RAM": 32, "ICESTORM_DSP": 0,
                                                 "ICESTORM_SPRAM": 0}, (("ct256", 206),)),
        Device("ice40", "iCE40UP5K", "--up5k", {"ICESTORM_LC": 5280, "ICESTORM_RAM": 30, "ICESTORM_DSP": 8,
                                                 "ICESTORM_SPRAM": 4}, (("sg48", 39),)),
    ),
}

DSP_CELLS = ("MULT18X18D", "ICESTORM_DSP")
"""The cells of a family's DSP blocks, as nextpnr counts them."""


def dsp_blocks(family: str, device: Device | None = None) -> int:
    """The DSP blocks of `device` (a part of `family`), or of the family's largest part."""
    parts = (device,) if device is not None else DEVICES[family]
    return max(d.capacity.get(cell, 0) for d in parts for cell in DSP_CELLS)


RESOURCE_NAMES = {
    "TRELLIS_COMB": "LUT4 sites", "TRELLIS_FF": "flip-flops", "TRELLIS_RAMW": "distributed-RAM slices",
    "DP16KD": "block RAMs", "MULT18X18D": "18x18 multipliers", "ALU54B": "54-bit ALUs",
    "ICESTORM_LC": "logic cells", "ICESTORM_RAM": "block RAMs", "ICESTORM_DSP": "DSPs",
    "ICESTORM_SPRAM": "SPRAMs", IO: "IO pins", "TRELLIS_IO": "IO pins", "SB_IO": "IO pins",
}


def find_device(family: str, name: str) -> Device:
    """A device of `family` by part name or nextpnr option, case-insensitive: "LFE5U-85F",
    "85k", "--85k", "iCE40HX8K", "hx8k"; on ECP5 with a speed grade, "LFE5U-85F-8" (the
    device's name then carries it)."""
    want = name.lower().lstrip("-")
    grade = re.fullmatch(r"(.+)-(\d+)", want) if family in SPEED_GRADES else None
    base = grade.group(1) if grade else want
    for d in DEVICES[family]:
        if base in (d.name.lower(), d.option.lstrip("-")):
            if grade is None:
                return d
            speed = int(grade.group(2))
            if speed not in SPEED_GRADES[family]:
                raise ValueError(f"unknown speed grade -{speed} for {d.name} in {name!r}; known: "
                                 + ", ".join(f"-{g}" for g in SPEED_GRADES[family]))
            return replace(d, name=f"{d.name}-{speed}", speed=speed)
    known = ", ".join(f"{d.name} ({d.option.lstrip('-')})" for d in DEVICES[family])
    grades = f"; a part may end in a speed grade ({DEVICES[family][-1].name}-{SPEED_GRADES[family][-1]})" \
        if family in SPEED_GRADES else ""
    raise ValueError(f"unknown {family} device {name!r}; known: {known}{grades}")


def resource_needs(family: str, cells: Mapping[str, int], pins: int) -> dict[str, int]:
    """What a netlist of `cells` needs, in nextpnr's resource names, plus IO (pins).

    Logic counts are lower bounds (nextpnr's packing decides), so a design is never called too
    big for a device it fits. ECP5: a LUT4 takes one TRELLIS_COMB site, a CCU2C carry two, a
    TRELLIS_DPR16X4 (16x4 distributed RAM) four plus one TRELLIS_RAMW; PFUMX/L6MUX21 wide-LUT
    muxes are left out (nextpnr 0.11 gives some of them a site of their own and merges others:
    int8 GEMV 16x64 388 sites, all muxes counted; 128x1024 407, 22 of 77). iCE40: a logic cell
    holds one LUT4, one flip-flop and one carry, so it takes at least as many cells as the most
    numerous of those."""
    c = Counter(cells)
    if family == "ecp5":
        dpr = c["TRELLIS_DPR16X4"] + c["DPR16X4"]
        return {"TRELLIS_COMB": c["LUT4"] + 2 * c["CCU2C"] + 4 * dpr,
                "TRELLIS_FF": c["TRELLIS_FF"], "TRELLIS_RAMW": dpr,
                "DP16KD": c["DP16KD"] + c["PDPW16KD"], "MULT18X18D": c["MULT18X18D"], "ALU54B": c["ALU54B"],
                IO: pins}
    if family == "ice40":
        ffs = sum(n for t, n in c.items() if t.startswith("SB_DFF"))
        return {"ICESTORM_LC": max(c["SB_LUT4"], ffs, c["SB_CARRY"]),
                "ICESTORM_RAM": sum(n for t, n in c.items() if t.startswith("SB_RAM40")),
                "ICESTORM_DSP": c["SB_MAC16"], "ICESTORM_SPRAM": c["SB_SPRAM256KA"], IO: pins}
    raise ValueError(f"no place-and-route for target {family!r}; known: {', '.join(FAMILIES)}")


def shortages(device: Device, needs: Mapping[str, int], fill: float = 1.0) -> dict[str, tuple[int, int]]:
    """Resources `needs` exceeds on `device` at `fill` of its capacity: name -> (need, capacity)."""
    out = {}
    for res, n in needs.items():
        cap = device.max_pins if res == IO else device.capacity.get(res, 0)
        if n > fill * cap:
            out[res] = (n, cap)
    return out


def describe_shortage(device: Device, short: Mapping[str, tuple[int, int]]) -> str:
    return ", ".join(f"needs {n:,} {res} ({RESOURCE_NAMES.get(res, res)}), {device.name} has {cap:,}"
                     + (" in its largest package" if res == IO else "")
                     for res, (n, cap) in short.items())


def choose_devices(family: str, needs: Mapping[str, int], device: str | None = None
                   ) -> tuple[list[Device], str]:
    """(devices to try in order, reason none fits: "" when the list is not empty)."""
    if device is not None:
        d = find_device(family, device)
        short = shortages(d, needs)
        return ([], f"does not fit {d.name}: {describe_shortage(d, short)}") if short else ([d], "")
    devices = DEVICES[family]
    feasible = [d for d in devices if not shortages(d, needs)]
    if not feasible:
        # name the device that comes closest (fewest resources short; the larger on a tie)
        best = min(reversed(devices), key=lambda d: len(shortages(d, needs)))
        return [], f"does not fit any {family} device: {describe_shortage(best, shortages(best, needs))}"
    roomy = next((i for i, d in enumerate(feasible) if not shortages(d, needs, HEADROOM)), 0)
    return feasible[roomy:], ""


METRIC_RESOURCES = {
    # a row's metric -> the device resource that bounds it; synthesis counts LUT4s with carry
    # cells as two, like nextpnr's LUT4 sites
    "ecp5": {"luts": "TRELLIS_COMB", "ffs": "TRELLIS_FF", "bram": "DP16KD", "dsp": "MULT18X18D"},
    "ice40": {"luts": "ICESTORM_LC", "bram": "ICESTORM_RAM", "dsp": "ICESTORM_DSP"},
}

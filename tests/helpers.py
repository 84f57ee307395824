"""What several test modules share: comparisons of outputs, float test vectors, zoo runs and
Yosys's equivalence proof of two netlists. Test modules import from here, never from each
other."""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from tinygrad import Tensor, dtypes

import designs
from compiler import HardwareConfig, compile_model, simulate
from compiler import dtypes as dt
from compiler.fp import FloatFormat
from compiler.fp import reference as R
from compiler.synth.area import AreaReport
from compiler.tools import yosys
from dse.cli import main
from dse.models import zoo
from dse.sweep import SweepOptions

needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None,
                                    reason="Icarus Verilog not installed (apt-get install iverilog; .ci/run does)")
"""For tests that simulate exported Verilog in Icarus."""

TESTS = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------
# outputs

def assert_exact(outputs, reference):
    assert len(outputs) == len(reference)
    for got, want in zip(outputs, reference):
        assert got.shape == want.shape
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    g, w = np.asarray(got, np.float32), np.asarray(want, np.float32)
    both_nan = np.isnan(g) & np.isnan(w)
    return bool(np.all(both_nan | (g.view(np.uint32) == w.view(np.uint32))))


def same_float_bits(a: np.ndarray, b: np.ndarray, dtype: str) -> bool:
    """Same shape and bit patterns (so -0.0 != 0.0; NaN only equals NaN)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    both_nan = np.isnan(a) & np.isnan(b)
    return a.shape == b.shape and bool(np.all(both_nan | (zoo.bits(a, dtype) == zoo.bits(b, dtype))))


# ---------------------------------------------------------------------------------------------
# zoo models end to end

def int8_mlp(sizes, seed=0, shift=7):
    """An int8 MLP with random weights (relu, shift, clamp between layers, int32 out): x, the
    output Tensor, and numpy's model of it (a function of x)."""
    rng = np.random.default_rng(seed)
    ws = [rng.integers(-128, 128, (b, a)).astype(np.int8) for a, b in zip(sizes, sizes[1:])]
    x = Tensor(rng.integers(-128, 128, sizes[0]).astype(np.int8))
    h = x
    for i, w in enumerate(ws):
        acc = Tensor(w).cast(dtypes.int32) @ h.cast(dtypes.int32)
        h = acc if i == len(ws) - 1 else (acc.relu() >> shift).minimum(127).cast(dtypes.int8)

    def ref(v):
        v = np.asarray(v).astype(np.int32)
        for i, w in enumerate(ws):
            v = w.astype(np.int32) @ v
            if i < len(ws) - 1:
                v = np.minimum(np.maximum(v, 0) >> shift, 127).astype(np.int32)
        return v
    return x, h, ref


def narrow_gemv(bits: int, M: int = 8, K: int = 32, seed: int = 0):
    """W (M, K) of `bits`-bit values in an int8 Tensor, x int8: (W, x, y, numpy y, W's range)."""
    rng = np.random.default_rng(seed)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    Wn = rng.integers(lo, hi + 1, (M, K)).astype(np.int8)
    xn = rng.integers(-128, 128, (K,)).astype(np.int8)
    W, x = Tensor(Wn), Tensor(xn)
    return W, x, W.cast(dtypes.int32) @ x.cast(dtypes.int32), Wn.astype(np.int64) @ xn.astype(np.int64), (lo, hi)


def compile_zoo(model: str, dtype: str, params: dict, config: HardwareConfig | None = None, seed: int = 0):
    """(design, input arrays) of zoo `model` in `dtype` compiled with `config`."""
    built = zoo.check_built(zoo.ZOO[model].build(dtype, **params))
    arrays = zoo.make_inputs(built, seed)
    tensors = [Tensor(arrays[n]).cast(dtypes.bfloat16) if dtype == "bf16" else Tensor(arrays[n])
               for n in built.inputs]
    return compile_model(built.forward(*tensors), config=config), arrays


def run_zoo(model: str, dtype: str, params: dict, config: HardwareConfig | None = None, seed: int = 0):
    design, arrays = compile_zoo(model, dtype, params, config, seed)
    return design, simulate(design), arrays


# ---------------------------------------------------------------------------------------------
# float test vectors (bit patterns of a FloatFormat)

def pack(fmt: FloatFormat, sign, exp, man) -> np.ndarray:
    sign, exp, man = (np.asarray(v, dtype=np.uint64) for v in (sign, exp, man))
    return (sign << np.uint64(fmt.width - 1)) | (exp << np.uint64(fmt.man_bits)) | man


def special_values(fmt: FloatFormat) -> np.ndarray:
    """Edge-case magnitudes, with both signs."""
    one = fmt.bias << fmt.man_bits
    mags = [
        0, 1, 2, 3, fmt.man_mask - 1, fmt.man_mask,             # zero, subnormals (min .. max)
        fmt.min_normal_bits, fmt.min_normal_bits + 1,            # smallest normals
        fmt.max_finite_bits, fmt.max_finite_bits - 1,            # largest finite
        fmt.inf_bits, fmt.qnan_bits, fmt.inf_bits + 1,           # inf, quiet NaN, signalling NaN
        one, one + 1, one - 1, one + (1 << (fmt.man_bits - 1)),  # 1, 1+ulp, 1-ulp/2, 1.5
        one + (1 << fmt.man_bits), one - (1 << fmt.man_bits),    # 2, 0.5
        (fmt.exp_max_field - 2) << fmt.man_bits,                 # max exponent / 2
        ((fmt.bias + fmt.man_bits + 1) << fmt.man_bits),         # 2**p: ulp is 2
        ((fmt.bias - fmt.man_bits - 1) << fmt.man_bits),         # 2**-p: half an ulp of 1
        ((fmt.bias - fmt.man_bits - 2) << fmt.man_bits) | 1,     # a bit more than a quarter ulp
    ]
    mags = np.array(sorted(set(mags)), dtype=np.uint64)
    return np.concatenate([mags, mags | np.uint64(fmt.sign_mask)])


def float_pairs(fmt: FloatFormat, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    p, man, top = fmt.precision, fmt.man_bits, fmt.exp_max_field
    parts = []

    def rand(n, hi):
        return rng.integers(0, hi, n, dtype=np.uint64)

    def signs(n):
        return rand(n, 2)

    # Uniform over bit patterns.
    n = 40_000
    parts.append((rand(n, 1 << fmt.width), rand(n, 1 << fmt.width)))
    # Close exponents: additions cancel and round, subtraction of near-equal values.
    n = 30_000
    a = rand(n, 1 << fmt.width)
    a_exp = (a >> np.uint64(man)) & np.uint64(top)
    delta = rng.integers(-(p + 2), p + 3, n)
    b_exp = np.clip(a_exp.astype(np.int64) + delta, 0, top - 1)
    parts.append((a, pack(fmt, signs(n), b_exp, rand(n, 1 << man))))
    # Short significands: exact results and many exact ties in products and sums.
    n = 20_000
    keep_a, keep_b = rng.integers(0, man + 1, n), rng.integers(0, man + 1, n)
    mask_a = ((np.uint64(1) << keep_a.astype(np.uint64)) - np.uint64(1)) << (np.uint64(man) - keep_a.astype(np.uint64))
    mask_b = ((np.uint64(1) << keep_b.astype(np.uint64)) - np.uint64(1)) << (np.uint64(man) - keep_b.astype(np.uint64))
    e_a = rng.integers(fmt.bias - 8, fmt.bias + 8, n)
    e_b = np.clip(e_a + rng.integers(-p - 2, p + 3, n), 1, top - 1)
    parts.append((pack(fmt, signs(n), e_a, rand(n, 1 << man) & mask_a),
                  pack(fmt, signs(n), e_b, rand(n, 1 << man) & mask_b)))
    # Built sums with the shifted-out bits exactly 100..0: halfway cases, both parities.
    n = 15_000
    a = pack(fmt, signs(n), rng.integers(p + 3, top - 1, n), rand(n, 1 << man))
    a_exp = ((a >> np.uint64(man)) & np.uint64(top)).astype(np.int64)
    k = rng.integers(1, p + 1, n)
    b_man = (rand(n, 1 << man) >> k.astype(np.uint64) << k.astype(np.uint64)) | (np.uint64(1) << (k - 1).astype(np.uint64))
    parts.append((a, pack(fmt, signs(n), a_exp - k, b_man & np.uint64(fmt.man_mask))))
    # Products near overflow and underflow (results from max finite down to subnormal and zero).
    n = 20_000
    e_a = rng.integers(1, top - 1, n)
    target = np.where(rng.integers(0, 2, n) == 1,
                      rng.integers(top - 4, top + 2, n),             # around the largest exponent
                      rng.integers(-p - 2, 3, n))                    # around and below the smallest
    e_b = np.clip(target - e_a + fmt.bias, 0, top - 1)
    parts.append((pack(fmt, signs(n), e_a, rand(n, 1 << man)), pack(fmt, signs(n), e_b, rand(n, 1 << man))))
    # Products just below the smallest normal: some round up to it, some stay subnormal.
    n = 5_000
    a = pack(fmt, signs(n), rng.integers(fmt.bias - 4, fmt.bias + 4, n), rand(n, 1 << man))
    target = fmt.min_normal * (1 - rng.random(n) * 2.0 ** -fmt.man_bits)
    b = R.round_to_format(target / np.abs(R.decode(a, fmt)), fmt)
    parts.append((a, b | (signs(n) << np.uint64(fmt.width - 1))))
    # Subnormal operands against anything.
    n = 15_000
    sub = pack(fmt, signs(n), 0, rand(n, 1 << man))
    other = rand(n, 1 << fmt.width)
    swap = rng.integers(0, 2, n) == 1
    parts.append((np.where(swap, other, sub), np.where(swap, sub, other)))
    # Integers as floats, and just beside them: for float -> int.
    n = 20_000
    ints = np.floor(rng.random(n) * 2.0 ** rng.integers(0, 34, n)) * np.where(rng.integers(0, 2, n) == 1, -1, 1)
    ints = ints + rng.choice([0.0, 0.0, 0.25, 0.5, 0.75, -0.5], n)
    parts.append((R.round_to_format(ints, fmt, "rtz"), rand(n, 1 << fmt.width)))
    # Every pair of special values.
    sv = special_values(fmt)
    parts.append((np.repeat(sv, len(sv)), np.tile(sv, len(sv))))
    # The 16-bit formats: every first operand.
    if fmt.width <= 16:
        n = 1 << fmt.width
        parts.append((np.arange(n, dtype=np.uint64), rand(n, 1 << fmt.width)))
    a = np.concatenate([x for x, _ in parts]).astype(np.uint64)
    b = np.concatenate([y for _, y in parts]).astype(np.uint64)
    return a, b


def int_vectors(n: int, rng: np.random.Generator) -> np.ndarray:
    """32-bit integers (as int64): edges, every 16-bit pattern, spread bit lengths, uniform."""
    edges = {0, 1, 2, 3, 65504, 65505, 65519, 65520, 65521, 65535, 257, 259, 0x8080, 0x8180,
             2 ** 24 + 1, 2 ** 24 + 2, 2 ** 24 + 3, 2 ** 25 + 2, 2 ** 25 + 6, 2 ** 31 - 1, 2 ** 31 - 64,
             2 ** 31 - 128, 2 ** 31 - 65, 2 ** 32 - 1, 2 ** 32 - 128, 2 ** 32 - 129}
    edges |= {v for k in range(33) for v in (2 ** k - 1, 2 ** k, 2 ** k + 1) if v < 2 ** 32}
    edges = np.array(sorted(edges), dtype=np.int64)
    edges = np.concatenate([edges, -edges])
    lengths = rng.integers(0, 33, n // 4)
    spread = np.floor(rng.random(n // 4) * 2.0 ** lengths).astype(np.int64)
    spread = np.where(rng.integers(0, 2, n // 4) == 1, -spread, spread)
    every16 = np.arange(1 << 16, dtype=np.int64)
    uniform = rng.integers(0, 2 ** 32, n, dtype=np.int64)
    return np.concatenate([edges, every16, spread, uniform])[:n]


def assert_same_floats(got, want, fmt: FloatFormat, what: str, *operands) -> None:
    """Equal bit patterns, except that NaNs only need to be NaNs."""
    got, want = np.asarray(got).astype(np.uint64), np.asarray(want).astype(np.uint64)
    got_nan, want_nan = np.isnan(R.decode(got, fmt)), np.isnan(R.decode(want, fmt))
    bad = (got_nan != want_nan) | (~want_nan & (got != want))
    if bad.any():
        rows = []
        for k in np.nonzero(bad)[0][:8]:
            ins = ", ".join(f"{int(op[k]):#x}" for op in operands)
            rows.append(f"  ({ins}) -> hw {int(got[k]):#x} ({R.decode(got[k:k+1], fmt)[0]!r}), "
                        f"ref {int(want[k]):#x} ({R.decode(want[k:k+1], fmt)[0]!r})")
        pytest.fail(f"{what}: {int(bad.sum())} of {len(bad)} results differ\n" + "\n".join(rows))


# ---------------------------------------------------------------------------------------------
# equivalence of two netlists (Yosys SAT induction), for the register rewrites before placement

# behavioural models of what the netlists use: TRELLIS_FF (clock enable 1, synchronous reset
# to 0 on LSR) and MULT18X18D with its input and output registers (Yosys's own simulation model
# refuses registered modes)
_PORTS = ([f"A{i}" for i in range(18)] + [f"B{i}" for i in range(18)] + [f"C{i}" for i in range(18)]
          + ["SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB", "CLK0", "CE0", "RST0", "RST1", "RST2", "RST3"])
CELL_MODELS = """
module TRELLIS_FF(input CLK, input DI, input LSR, output reg Q);
    parameter GSR = "ENABLED"; parameter CEMUX = "1"; parameter CLKMUX = "CLK"; parameter LSRMUX = "LSR";
    parameter SRMODE = "LSR_OVER_CE"; parameter REGSET = "RESET";
    always @(posedge CLK) Q <= LSR ? 1'b0 : DI;
endmodule
module MULT18X18D(%s, %s);
    parameter REG_INPUTA_CLK = "NONE"; parameter REG_INPUTB_CLK = "NONE"; parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_INPUTA_RST = "RST0"; parameter REG_INPUTB_RST = "RST0"; parameter REG_OUTPUT_RST = "RST0";
    parameter REG_INPUTA_CE = "CE0"; parameter REG_INPUTB_CE = "CE0"; parameter REG_OUTPUT_CE = "CE0";
    parameter GSR = "ENABLED"; parameter RESETMODE = "SYNC";
    input %s;
    output %s;
    wire [17:0] a = {%s}, b = {%s};
    wire [3:0] rst = {RST3, RST2, RST1, RST0};
    function integer line(input [8*4-1:0] name); line = name[7:0] - "0"; endfunction
    reg [17:0] ra = 0, rb = 0; reg [35:0] rp = 0;
    wire [17:0] xa = REG_INPUTA_CLK == "NONE" ? a : ra, xb = REG_INPUTB_CLK == "NONE" ? b : rb;
    wire [35:0] prod = $signed({SIGNEDA & xa[17], xa}) * $signed({SIGNEDB & xb[17], xb});
    always @(posedge CLK0) begin
        ra <= rst[line(REG_INPUTA_RST)] ? 18'd0 : a;
        rb <= rst[line(REG_INPUTB_RST)] ? 18'd0 : b;
        rp <= rst[line(REG_OUTPUT_RST)] ? 36'd0 : prod;
    end
    wire [35:0] p = REG_OUTPUT_CLK == "NONE" ? prod : rp;
    assign {%s} = p;
endmodule
""" % (", ".join(_PORTS), ", ".join(f"P{i}" for i in range(36)), ", ".join(_PORTS),
       ", ".join(f"P{i}" for i in range(36)), ", ".join(f"A{i}" for i in reversed(range(18))),
       ", ".join(f"B{i}" for i in reversed(range(18))), ", ".join(f"P{i}" for i in reversed(range(36))))

LUT4_MODEL = """
module LUT4(input A, input B, input C, input D, output Z);
    parameter [15:0] INIT = 0;
    assign Z = INIT[{D, C, B, A}];
endmodule
"""


def synthesised_twice(verilog: str, tmp_path) -> tuple[dict, dict]:
    """(gold, gate): two copies of `verilog`'s module `top` through synth_ecp5 as JSON netlists,
    the gate one for a rewrite to change and `equivalent` to prove against the gold."""
    (tmp_path / "top.v").write_text(verilog)
    yosys("read_verilog top.v\nsynth_ecp5 -top top\nwrite_json netlist.json\n", cwd=tmp_path)
    gold = json.loads((tmp_path / "netlist.json").read_text())
    return gold, json.loads(json.dumps(gold))


def cells_of(netlist: dict) -> dict:
    return netlist["modules"]["top"]["cells"]


def _wrapper(module: dict) -> str:
    """A top instantiating `gold` and `gate` (both of `module`'s ports) side by side."""
    ports = module["ports"]
    decl = [f"input [{len(p['bits']) - 1}:0] {n}" for n, p in ports.items() if p["direction"] == "input"]
    decl += [f"output [{len(p['bits']) - 1}:0] {n}_{side}" for n, p in ports.items()
             if p["direction"] == "output" for side in ("gold", "gate")]
    conns = lambda side: ", ".join(f".{n}({n}_{side})" if p["direction"] == "output" else f".{n}({n})"  # noqa: E731
                                   for n, p in ports.items())
    return f"module both({', '.join(decl)});\n    gold g({conns('gold')});\n    gate t({conns('gate')});\nendmodule\n"


def equivalent(gold: dict, gate: dict, tmp_path, models: str | None = None) -> bool:
    """Yosys's proof that two netlists of one module give the same outputs in every cycle
    (temporal induction over their miter, every register starting at 0, rst a free input). A
    wrapper instantiates both, so `hierarchy` gives each MULT18X18D its parameters."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "models.v").write_text(CELL_MODELS if models is None else models)
    (tmp_path / "both.v").write_text(_wrapper(gold["modules"]["top"]))
    for name, netlist in (("gold", gold), ("gate", gate)):
        only = {"modules": {name: netlist["modules"]["top"]}}      # the cell library comes from MODELS
        (tmp_path / f"{name}.json").write_text(json.dumps(only))
    yosys("read_verilog models.v\nread_json gold.json\nread_json gate.json\nread_verilog both.v\n"
          "hierarchy -top both\nproc\nflatten gold gate\nmiter -equiv -flatten -make_assert gold gate miter\n"
          "hierarchy -top miter\nflatten\nopt_clean\n"
          "tee -o proof.txt sat -tempinduct -prove-asserts -set-init-zero -seq 1 -maxsteps 8 miter\n",
          cwd=tmp_path, log_name="equiv.log")
    return "Induction step proven: SUCCESS!" in (tmp_path / "proof.txt").read_text()


# ---------------------------------------------------------------------------------------------
# sweeps of small specs (fake synthesis: conftest's fake_synth)

SMALL_MODELS = [{"name": "gemv_4x8", "builtin": "gemv", "params": {"M": 4, "K": 8}},
                {"name": "add_8", "builtin": "elementwise", "params": {"N": 8}}]


def spec_dict(study="t", sampler="grid", trials=None, models=SMALL_MODELS, dtypes=("int8",), **extra) -> dict:
    search = {"sampler": sampler, "seed": 0}
    if trials is not None:
        search["trials"] = trials
    return {"study": study, "target": "ecp5", "models": list(models), "dtypes": list(dtypes),
            "knobs": {"mem_read": ["sync", "comb"]}, "objectives": ["cycles", "luts"],
            "search": search, **extra}


def write_spec(tmp_path: Path, d: dict, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def options(tmp_path: Path, **kw) -> SweepOptions:
    return SweepOptions(**{"results_root": tmp_path / "results", "cache_dir": tmp_path / "cache",
                           "sim_backend": "pysim", "progress": "off", **kw})


SYNTH_CALLS: list[str] = []


def fake_area(design, target: str) -> AreaReport:
    """Deterministic stand-in numbers: comb read ports cost LUTs, as they do in Yosys."""
    comb = design.config.mem_read == "comb"
    luts = 100 * len(design.kernels) + sum(k.name.count("_") for k in design.kernels) + (40 if comb else 0)
    return AreaReport(target=target, luts=luts, ffs=50 - (20 if comb else 0), bram=0 if comb else 1, lutram=0,
                      dsp=1, yosys_version="fake yosys", script="fake", seconds=0.0)


# ---------------------------------------------------------------------------------------------
# trained models through `dse eval`

def model_spec(tmp_path: Path, dtypes: list[str], **model) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"study": "files", "target": "ecp5", "models": [{"name": "m", **model}],
                                    "dtypes": dtypes, "objectives": ["accuracy", "cycles"],
                                    "search": {"sampler": "grid"}}, sort_keys=False))
    return path


def eval_model(capsys, spec: Path, dtype: str, *extra: str) -> dict:
    assert main(["eval", str(spec), "--model", "m", "--dtype", dtype, "--no-synth", "--json", "--sim", "cxxrtl",
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


def cnn_onnx(path: Path, op: str = "MaxPool", w: dict | None = None) -> tuple[Path, dict]:
    """A small CNN for 8x8 digits: Conv 3x3 (C channels) -> Relu -> 2x2 pool -> Flatten -> Gemm,
    with the weights `w` (default: fixed random ones, 4 channels; names as PyTorch writes them:
    not identifiers)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = w or {"conv.weight": rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32),
              "conv.bias": rng.normal(0, 0.1, (4,)).astype(np.float32),
              "fc.weight": rng.normal(0, 0.3, (10, 36)).astype(np.float32),
              "fc.bias": rng.normal(0, 0.1, (10,)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node(op, ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                              [numpy_helper.from_array(v, k) for k, v in w.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, w


def save_onnx(path: Path, nodes: list, consts: dict, input_shape: list, output_shape: list,
              domains: tuple[str, ...] = ()) -> Path:
    """An ONNX file of `nodes` (onnx.helper.make_node) on the input "x", with the initialisers
    `consts` (name -> numpy array), ending in "y"; `domains`: custom operator sets it uses."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


def onnx_reference(path: Path, x: np.ndarray) -> np.ndarray:
    """The onnx package's own reference evaluator on samples x (float32), one run per sample
    batch: an implementation of the graph independent of the tool's."""
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator
    return np.asarray(ReferenceEvaluator(str(path)).run(None, {"x": np.asarray(x, np.float32)})[0], np.float64)


# ---------------------------------------------------------------------------------------------
# exported designs behind a bus, run by cocotb

COCOTB_DIR = TESTS / "cocotb_bus"


@dataclass(frozen=True)
class Point:
    design: object
    golden: tuple[np.ndarray, ...]        # per model output, its element values (the numpy reference)


def bus_gemv_int8() -> Point:
    case = designs.gemv_int8(M=6, K=10)
    return Point(compile_model(*case.outputs, config=HardwareConfig(mem_read="sync", lanes=2)), case.reference)


def check_expected_files(out: Path, point: Point) -> None:
    """The expected*.hex the testbenches compare with hold the numpy reference's words."""
    info = json.loads((out / "interface.json").read_text())
    design = point.design
    for buf, want in zip(design.graph.outputs, point.golden):
        ports = sorted((p for p in info["host_ports"] if p["role"] == "output" and p["buffer"] == buf),
                       key=lambda p: p["sel"])
        banks = [[0 if "x" in line else int(line, 16) for line in (out / p["file"]).read_text().split()]
                 for p in ports]
        got = design.buffer_words(buf, banks)
        assert np.array_equal(got, dt.to_words(want, design.graph.buffers[buf].dtype)), f"buffer {buf}"


def run_cocotb(out: Path, *, testcase: str = "run_design", env: dict[str, str] | None = None,
               monkeypatch=None, passes: bool = True, top: str = "tinyhw_top",
               sources: list[str] | None = None) -> str:
    """Build `out`'s Verilog for Icarus and run one test of bus_tb.py on it (which must pass, or
    fail when not `passes`); its log."""
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    monkeypatch.syspath_prepend(str(COCOTB_DIR))         # the runner passes sys.path on as PYTHONPATH
    runner = get_runner("icarus")
    build = out / "sim_build"
    runner.build(sources=[out / s for s in sources or ["tinyhw_top.v"]], hdl_toplevel=top, build_dir=build,
                 timescale=("1ns", "1ps"), log_file=out / "build.log")
    log = out / f"{testcase}-{(env or {}).get('TINYHW_WISHBONE_MODE', '')}.log"
    xml = out / f"{log.stem}.xml"
    try:
        runner.test(test_module="bus_tb", hdl_toplevel=top, build_dir=build, test_dir=out,
                    testcase=testcase, extra_env={"TINYHW_EXPORT": str(out), **(env or {})},
                    results_xml=str(xml), log_file=log)
    except SystemExit:                  # the runner's way of saying a test failed: the results say which
        pass
    text = log.read_text()
    tests, failed = get_results(xml)
    assert tests == 1 and failed == (not passes), text[-3000:]
    return text


def pass_line(log: str) -> str:
    m = re.search(r"PASS: .*", log)
    assert m, log[-2000:]
    print(m.group(0))                    # the run's PASS line, in pytest's -s / -rA output
    return m.group(0)

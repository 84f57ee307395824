"""Export a design point of the explorer as Verilog, memory files, a testbench and an interface
description (compiler.export does the work; this module finds the point and its figures).

    export_point(model=spec.model("gemv"), point=point, out_dir="hw/", measured=metrics.as_row())
    find_trial("results/gemv", number=7) -> TrialPoint (model, point, data seed, measured row)

The point is rebuilt exactly as the evaluation built it (same model, dtype, knobs and data
seed), simulated, and exported; the testbench expects that simulation's outputs. The LUT/FF
and Fmax figures in the interface description are the ones the evaluation or the sweep
measured (`measured`, a metrics row), never re-estimated; a rebuilt design whose cycle model
differs from the measured row's is refused (the compiler changed since the sweep).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from compiler import ExportedDesign, compile_model, export_design
from compiler.config import HardwareConfig
from compiler.pnr.timing import TimingReport
from compiler.synth.area import AreaReport
from dse.models import zoo
from dse.evaluate import Simulator, declared_input_ranges, point_arrays, streamed_inputs
from dse.models.zoo import input_tensors
from dse.spec import DesignPoint, Spec, TimingSpec
from dse.frozen import FrozenMap
from dse.models.model import ModelSpec, kernel_config
from dse.models.widths import is_format_knob


class ExportError(ValueError):
    """The point cannot be exported (no such trial, a failed trial, a changed compiler)."""


@dataclass(frozen=True)
class TrialPoint:
    """A trial of a sweep's results folder, as what is needed to rebuild it."""
    number: int
    model: ModelSpec
    point: DesignPoint
    data_seed: int
    measured: Mapping[str, Any]            # the trial's row of trials.csv


def export_point(*, model: ModelSpec, point: DesignPoint, out_dir: str | Path, data_seed: int = 0,
                 sim_backend: str = "auto", measured: Mapping[str, Any] | None = None,
                 top: str = "tinyhw_top", source: Mapping[str, Any] | None = None,
                 bus: str = "native") -> ExportedDesign:
    """Rebuild `point`, simulate it and export it (compiler.export_design) to `out_dir`, behind
    `bus` (compiler.bus.wrapper); `source` (e.g. the study and trial) is added to what the interface
    says the design is."""
    model = point.model_of(model)      # the point's weight_bits/act_bits (and prune), as evaluated
    built = model.build(point.dtype)
    arrays, real = point_arrays(model, point.dtype, built, data_seed)   # trained weights, as evaluated
    tensors = input_tensors(built, arrays)
    config = kernel_config(model, point.dtype, point.hardware_config())     # lanes@W1: the kernel computing W1
    design = compile_model(built.forward(*tensors), config=config,
                           stream=streamed_inputs(model, point.dtype, built, tensors),
                           input_ranges=declared_input_ranges(model, point.dtype, built, tensors, real))
    measured = dict(measured or {})
    want = measured.get("cycles_model")
    if _present(want) and int(want) != design.cycle_model().total:
        raise ExportError(f"the rebuilt design's cycle model says {design.cycle_model().total} cycles, the "
                          f"evaluation measured {int(want)}: the compiler changed since; re-run the point")
    formats = point.formats().as_dict()        # the quantiser's widths (interface.json `knobs` are the hardware's)
    origin = {"model": model.describe(), "dtype": point.dtype, **({"formats": formats} if formats else {}),
              "data_seed": data_seed, "inputs": _input_buffers(design, built, tensors), **(source or {})}
    host = _host_input(model, point.dtype, design, built, tensors)
    if design.flow is not None:      # streamed: the data set's first test samples, else the data rolled
        sim = Simulator(sim_backend)
        samples = None
        if real is not None and real.samples is not None and len(real.samples) > 1:
            buf = design.buffer_of(tensors[list(built.inputs).index(real.data_input)])
            samples = [{buf: s} for s in real.samples[:4]]
        return export_design(design=design, out_dir=out_dir, backend=sim.backend, area=_area(measured),
                             timing=_timing(measured), top=top, source=origin, bus=bus, samples=samples,
                             host_input=host)
    result = Simulator(sim_backend).run(design, None)
    return export_design(design=design, out_dir=out_dir, result=result, area=_area(measured),
                         timing=_timing(measured), top=top, source=origin, bus=bus, host_input=host)


def _host_input(model: ModelSpec, dtype: str, design, built, tensors: list):
    """What the host does to a raw sample before the design takes it, for a network the tool
    builds (its input map and quantisation: compiler.host_input.HostInput), else None."""
    if not model.runs_trained(dtype):
        return None
    import dataclasses
    buffer = _input_buffers(design, built, tensors).get("x")
    return dataclasses.replace(model.trained.host_input(dtype), buffer=buffer)


def _input_buffers(design, built, tensors: list) -> dict[str, int | None]:
    """Each model input by name -> the buffer that holds it (interface.json `buffers`), None for
    one built into the hardware (weights="constant")."""
    out: dict[str, int | None] = {}
    for name, tensor in zip(built.inputs, tensors):
        try:
            buf = design.buffer_of(tensor)
        except KeyError:
            buf = None
        out[name] = buf if buf in design.host_buffers else None
    return out


def _present(v: Any) -> bool:
    """Not a blank cell: None, NaN and pandas' NA are absent values."""
    return v is not None and not (pd.api.types.is_scalar(v) and pd.isna(v))


def _area(row: Mapping[str, Any]) -> AreaReport | None:
    if not all(_present(row.get(k)) for k in ("luts", "ffs", "bram", "lutram", "dsp")):
        return None
    return AreaReport(target=str(row["target"]), luts=int(row["luts"]), ffs=int(row["ffs"]), bram=int(row["bram"]),
                      lutram=int(row["lutram"]), dsp=int(row["dsp"]), yosys_version=str(row.get("yosys_version") or ""),
                      script=str(row.get("synth_script") or ""))


def _timing(row: Mapping[str, Any]) -> TimingReport | None:
    if not _present(row.get("fits")):
        return None
    fmax = row.get("fmax_mhz")
    fits = str(row["fits"]).lower() == "true" if isinstance(row["fits"], str) else bool(row["fits"])
    # a row without recorded settings (a trials.csv written by hand): nextpnr's defaults
    # the settings that are the report's fields (regroup and repair say how it was placed, not what)
    report_fields = {f.name for f in fields(TimingReport)}
    settings = {k: v for k, v in recorded_pnr_settings(row).items() if k in report_fields}
    return TimingReport(fits=fits, fmax_mhz=float(fmax) if _present(fmax) else None,
                        device=str(row.get("pnr_device") or ""), package=str(row.get("pnr_package") or ""),
                        target=str(row["target"]), reason="" if fits else str(row.get("error") or ""),
                        ripup=row_flag(row.get("pnr_ripup")), **settings)


def row_flag(v: Any) -> bool:
    """A flag of a row: True, or "True" / "1" / "1.0" from a CSV."""
    return _present(v) and str(v).strip().lower() in ("true", "1", "1.0")


def recorded_pnr_settings(row: Mapping[str, Any]) -> dict[str, Any]:
    """The nextpnr settings a row's Fmax was measured with (Metrics pnr_router, pnr_placer,
    pnr_seed, pnr_freq_mhz, pnr_regroup, pnr_repair) as place_and_route's keyword arguments,
    typed as TimingSpec's fields (trials.csv gives 3.0 for a seed, "False" for a flag); those the
    row lacks (blank cells) are left out."""
    kinds = {k: type(v) for k, v in TimingSpec().options().items()}
    typed = lambda v, kind: row_flag(v) if kind is bool else kind(v)  # noqa: E731
    return {k: typed(row[f"pnr_{k}"], kind) for k, kind in kinds.items() if _present(row.get(f"pnr_{k}"))}


# ---------------------------------------------------------------------------------------------
# a trial of a results folder

def find_trial(results: str | Path, *, number: int, spec: Spec | None = None) -> TrialPoint:
    """Trial `number` of a sweep's results folder. Its model is the one the sweep recorded in
    study.journal (dse.models.record: the whole definition, every file by content), refused when
    a file it reads is missing or changed since; or `spec`'s when given, which must be the one
    the sweep recorded (files compared by content: they may lie elsewhere), or is taken as it is
    for a study without a journal (kept in a database)."""
    from dse.report import ReportError, load_study_results
    try:
        res = load_study_results(results)
    except ReportError as e:
        raise ExportError(str(e)) from None
    rows = res.trials[res.trials["number"] == number]
    if rows.empty:
        numbers = sorted(int(n) for n in res.trials["number"].dropna())
        raise ExportError(f"{results}: no trial {number} (trials: {_ranges(numbers)})")
    row = {k: (None if not _present(v) else v) for k, v in rows.iloc[0].to_dict().items()}
    if row.get("status") != "OK":
        raise ExportError(f"{results}: trial {number} did not evaluate OK (status {row.get('status')}, stage "
                          f"{row.get('stage')}: {row.get('error')}); nothing to export")
    name = str(row["model"])
    described = next((m for m in (res.space or {}).get("models", []) if m[0] == name), None)
    record = (res.model_records or {}).get(name)
    if spec is not None:
        model = _spec_model(name, spec, described, record, results)
    elif record is not None:
        model = _recorded_model(record, results, number)
    else:
        model = _described_model(name, described, row, results)
    knobs = _knobs(row, number)
    return TrialPoint(number, model, DesignPoint(model.name, str(row["dtype"]), knobs),
                      int(row.get("data_seed") or 0), row)


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    return f"{numbers[0]}..{numbers[-1]}" if numbers == list(range(numbers[0], numbers[-1] + 1)) \
        else ", ".join(map(str, numbers))


def _knobs(row: Mapping[str, Any], number: int) -> FrozenMap[str, Any]:
    """The trial's knob columns as Python values (CSV gives floats for integer columns with
    blanks): the hardware's, per layer too (`lanes@0`), and the quantiser's formats
    (`weight_bits`, ...); a blank cell is a knob the trial left at its default."""
    values: dict[str, Any] = {}
    for k, v in row.items():
        if not (HardwareConfig.is_knob(k) or is_format_knob(k)) or v is None:
            continue
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        values[k] = v
    try:
        DesignPoint(str(row["model"]), str(row["dtype"]), FrozenMap(values)).hardware_config()
    except (ValueError, TypeError) as e:
        raise ExportError(f"trial {number}: its knobs {values} are not a hardware configuration: {e}") from None
    return FrozenMap(values)


def _spec_model(name: str, spec: Spec, described: list | None, record: Mapping[str, Any] | None,
                results: str | Path) -> ModelSpec:
    """`spec`'s model `name`, which must be the one the sweep recorded."""
    from dse.models.record import model_record, record_change
    try:
        model = spec.model(name)
    except KeyError as e:
        raise ExportError(f"--spec: {e.args[0]}") from None
    if described is not None and (described[1], described[2]) != (model.describe(), str(model.source or "")):
        raise ExportError(f"--spec: model {name!r} is {model.describe()} there, but the sweep in {results} "
                          f"ran {described[1]}")
    if record is not None:
        try:
            change = record_change(record, model_record(model, spec.model_dtypes(name)))
        except OSError as e:
            raise ExportError(f"--spec: model {name!r}: {e}") from None
        if change is not None:
            what, then, now = change
            raise ExportError(f"--spec: model {name!r}: {what} is not the one the sweep in {results} evaluated "
                              f"({now} there, {then} in the sweep)")
    return model


def _recorded_model(record: Mapping[str, Any], results: str | Path, number: int) -> ModelSpec:
    """The model the sweep recorded, its files checked against their recorded content."""
    from dse.models.record import file_problem, model_from_record
    from dse.models.user_model import UserModelError
    name = record["name"]
    problem = file_problem(record)
    if problem is not None:
        f = problem.file
        fix = ("restore it" if problem.now is None else "restore the file the sweep read") + \
            f", or pass --spec SPEC whose model {name!r} reads a copy of it (sha256 {f.sha256[:12]}...)"
        raise ExportError(f"{results}: trial {number}: model {name!r} was swept with {f.what} {f.path}, which "
                          f"{'is missing' if problem.now is None else 'has changed since'}: {fix}")
    try:
        return model_from_record(record)
    except UserModelError as e:
        raise ExportError(f"{results}: trial {number}: model {name!r}: {e}") from None


def _described_model(name: str, described: list | None, row: Mapping[str, Any], results: str | Path) -> ModelSpec:
    """A study made before models were recorded whole: its search space describes each model
    in a line ([name, "builtin(params)" or "file.py:function(params)", source, ranges]), which
    with the trial's params is the whole definition of a builtin model without files, and of
    nothing else."""
    if described is None:
        raise ExportError(f"{results}: no study.journal recording model {name!r}: pass --spec SPEC (the spec the "
                          "sweep ran)")
    _, text, source, ranges = described[:4]
    builtin = text.split("(", 1)[0]
    if not source and builtin in zoo.ZOO:
        params = json.loads(row["params"]) if row.get("params") else {}
        model = ModelSpec(name, builtin, None, None, FrozenMap(params), FrozenMap(
            (dt, zoo.InputRange(lo, hi)) for dt, (lo, hi) in ranges.items()))
        if model.describe() == text:
            return model
    raise ExportError(f"{results}: its study.journal describes model {name!r} only as {text!r} (a sweep made "
                      f"before studies recorded their models' files): pass --spec SPEC (the spec the sweep ran)")

"""A model's whole definition as JSON values, with the SHA-256 of every file it is built from:
what a study records (dse.study.space), so that `dse export` rebuilds a trial's model without
the spec and a file changed after the sweep is noticed (by the sweep resuming, and by the export).

    record = model_record(spec.model("m"), spec.model_dtypes("m"))   # {"name": "m", "builtin": ..., ...}
    model_from_record(record) == spec.model("m")
    file_problem(record)                        # None, or the first file missing or changed since
    record_change(old, new)                     # None, or what differs (where files lie aside)

A file is recorded as {"path": absolute, "sha256": hex}: the source of a `source:` model and the
files its code read while imported and built, `weights:`, `onnx:` and the data file. What it means
is its content: two records whose files moved but kept their content are the same model.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from dse.frozen import FrozenMap
from dse.models.model import ModelFiles, ModelSpec, TrainedModel
from dse.models.qat import QatOptions
from dse.models.user_model import bind_params, import_reads, load_function, recording_reads
from dse.models.zoo import InputRange

_EXACT = (str, int, float, bool, type(None))
"""Parameter values JSON gives back as they were. A spec gives only these; a value of another
type is a default of the user's function, which its source (recorded by content) restores."""


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def model_record(model: ModelSpec, dtypes: Iterable[str]) -> dict[str, Any]:
    """`model` as JSON values (model_from_record gives it back), every file with its SHA-256;
    `dtypes`: the ones it runs (a `source:` model is built in each, to see the files it reads)."""
    digests: dict[Path, str] = {}

    def entry(path: Path | None) -> dict[str, str] | None:
        if path is None:
            return None
        if path not in digests:
            digests[path] = file_sha256(path)
        return {"path": str(path), "sha256": digests[path]}

    def data(d) -> dict[str, Any] | None:
        # `split` only where given: a record made before it existed stays the same model
        return None if d is None else {"dataset": d.dataset, "file": entry(d.file), "samples": d.samples,
                                       "input": d.input, **({"split": d.split} if d.split is not None else {})}
    t, f = model.trained, model.files
    return {
        "name": model.name, "builtin": model.builtin, "source": entry(model.source), "function": model.function,
        "params": {k: v for k, v in model.params.items() if type(v) in _EXACT},
        "input_ranges": {dt: [r.min, r.max] for dt, r in model.input_ranges.items()},
        "dtypes": list(model.dtypes),
        "trained": None if t is None else {"kind": t.kind, "file": entry(t.path), "data": data(t.data),
                                           "prune": t.prune, **({"qat": t.qat.as_dict()} if t.qat else {})},
        "files": None if f is None else {"weights": entry(f.weights), "data": data(f.data)},
        "onnx": entry(model.onnx),
        # after the others: a file recorded above is not recorded again
        "reads": [entry(p) for p in sorted(_user_reads(model, dtypes) - set(digests))],
    }


def _user_reads(model: ModelSpec, dtypes: Iterable[str]) -> set[Path]:
    """The data files a `source:` model's code reads (at import, and building each dtype), as
    dse.cache keys them: they decide its result as much as its source does."""
    if model.source is None:
        return set()
    with recording_reads() as reads:
        for dt in dtypes:
            model.build(dt)
    return set(import_reads(model.source)) | reads


def model_from_record(record: Mapping[str, Any]) -> ModelSpec:
    """The ModelSpec `record` (model_record) describes. A `source:` model's parameters the record
    leaves out are its function's defaults (its file imported: UserModelError if it cannot be)."""
    def data(d):
        from dse.models.data import DataSpec
        return None if d is None else DataSpec(dataset=d["dataset"], file=_path(d["file"]), samples=d["samples"],
                                               input=d["input"], split=d.get("split"))
    t, f = record["trained"], record["files"]
    source, params = _path(record["source"]), dict(record["params"])
    if source is not None:
        fn = record["function"]
        params = bind_params(load_function(source, fn), params, f"{fn}() in {source.name}")
    return ModelSpec(
        record["name"], record["builtin"], source, record["function"], FrozenMap(params),
        FrozenMap((dt, InputRange(lo, hi)) for dt, (lo, hi) in record["input_ranges"].items()),
        None if t is None else TrainedModel(t["kind"], Path(t["file"]["path"]), data(t["data"]), t["prune"],
                                            qat=QatOptions(**t["qat"]) if t.get("qat") else None),
        None if f is None else ModelFiles(_path(f["weights"]), data(f["data"])),
        _path(record["onnx"]), tuple(record["dtypes"]))


def _path(entry: Mapping[str, str] | None) -> Path | None:
    return None if entry is None else Path(entry["path"])


# ---------------------------------------------------------------------------------------------
# the files of a record, and what changed

@dataclass(frozen=True)
class RecordedFile:
    what: str                   # "the weights file", "the data file", ... (a phrase)
    path: Path
    sha256: str


@dataclass(frozen=True)
class FileProblem:
    file: RecordedFile
    now: str | None             # its SHA-256 now; None: the file is missing


def recorded_files(record: Mapping[str, Any]) -> Iterator[RecordedFile]:
    """Every file of `record` with what it is to the model, in record order."""
    for key, what, entry in _entries(record):
        yield RecordedFile(what, Path(entry["path"]), entry["sha256"])


def file_problem(record: Mapping[str, Any]) -> FileProblem | None:
    """The first file of `record` that is missing or whose content is not the recorded one."""
    for f in recorded_files(record):
        try:
            now = file_sha256(f.path)
        except OSError:
            return FileProblem(f, None)
        if now != f.sha256:
            return FileProblem(f, now)
    return None


def record_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """What differs between two records of a model, files compared by content (where they lie
    is left aside): (what, its value in `old`, in `new`): a file named with its values their
    SHA-256 cut short, else the spec's key (`data.samples`, `prune`, `params.K`); None: the same
    model."""
    a, b = _flat(old), _flat(new)
    for key in list(a) + [k for k in b if k not in a]:
        if a.get(key, _ABSENT) != b.get(key, _ABSENT):
            va, vb = a.get(key), b.get(key)
            named = next(((w, e) for k, w, e in _entries(new if key in b else old) if k == key), None)
            if named is None:       # the spec's key: trained.data.samples is data.samples there
                return (key.removeprefix("trained.").removeprefix("files."),
                        *("not set" if v is None else v for v in (va, vb)))
            what, entry = named
            return f"{what} {entry['path']}", *("no file" if v is None else f"sha256 {v[:12]}..." for v in (va, vb))
    return None


_ABSENT = object()

_WHAT = {"source": "the source file", "onnx": "the ONNX file", "files.weights": "the weights file",
         "files.data.file": "the data file", "trained.data.file": "the data file"}


def _entries(record: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, str]]]:
    """(flat key, what it is, {"path", "sha256"}) of every file of `record`."""
    for key, value in _walk(record, ""):
        if _is_file(value):
            if key == "trained.file":       # `weights:` or `onnx:`
                what = "the ONNX file" if record["trained"]["kind"] == "onnx" else "the weights file"
            else:
                what = _WHAT.get(key, "a file its source read")
            yield key, what, value


def _flat(record: Mapping[str, Any]) -> dict[str, Any]:
    """key -> value of every leaf, a file's value its SHA-256 (not its path)."""
    return {k: v["sha256"] if _is_file(v) else v for k, v in _walk(record, "")}


def _walk(value: Any, key: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping) and not _is_file(value) and value:
        for k, v in value.items():
            yield from _walk(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from _walk(v, f"{key}[{i}]")
    else:
        yield key, value


def _is_file(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"path", "sha256"}

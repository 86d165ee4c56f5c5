"""The study file: schema, loader and validator, the search space, and the systems of its points.

A study is a TOML file::

    [study]
    name = "mesh-sizing"           # optional, default the file's stem
    base = "mesh-4x4"              # required: a preset name or a system TOML file (a path
                                   #   relative to the study file); compact (grid) form for the
                                   #   grid parameters
    seed = 0                       # optional: random search, TPE and random faults
    models = ["resnet18", "nets/my.onnx",
              {name = "bert", label = "bert-tiny", options = {layers = 2, hidden = 128}}]
                                   # bundled generators (tools/models.py), with options and a
                                   #   label, or ONNX files (relative to the study file); an
                                   #   inline table stays on one line (TOML)
    strategies = ["pipeline"]      # optional, default ["pipeline"]: placement strategies
    batch = [1]                    # optional, default [1]: the models' input batch size

    [parameters]                   # what to vary: a list of values (any search), or a range
    rows = [2, 4]                  #   {low = 16, high = 64, log = true} (random and tpe)
    nop_bandwidth = {low = 16.0, high = 64.0, log = true}

    [objectives]
    names = ["latency", "throughput", "energy", "edp", "area"]   # optional, default all
    area = {per_mac = 2.0e-4, per_sram_mib = 0.6, per_phy = 0.5, per_dram_channel = 1.0}
                                   # the area / cost proxy's coefficients (required with "area";
                                   #   per_dram_channel optional): units of your choosing

    [search]
    method = "grid"                # grid (every point), random or tpe (Optuna via Ray Tune)
    budget = 50                    # random and tpe: points to run
    metric = "edp"                 # tpe: the objective it optimises
    timeout_s = 1800               # optional: a trial running longer is stopped, "timeout";
                                   #   counted from its start on a worker (a marker under
                                   #   <out>/running; without a shared file system, from its
                                   #   hand-off plus 300 s for the worker to start)

Parameters (:data:`PARAMETERS`) map onto fields of the base system's TOML description, so a
point's system is loaded and validated like any file: ``rows`` / ``cols`` the grid,
``macs_per_cycle`` and ``sram_bytes`` every cluster, ``nop_bandwidth`` / ``nop_latency`` the
``[nop]`` defaults, ``dram_channels`` the ``[[dram]]`` controllers (placed alternately on the
west and east edges, each as the base's first), ``faults`` random faulty chiplets (``[faults]
chiplets``, drawn with ``fault_seed``, never a chiplet carrying DRAM, the rest kept connected)
and ``device_dtype`` the device precision. Two only change the simulation, so points differing
in them share one compiled plan: ``network`` (``analytical``, ``flow``, ``flit``) and ``inputs``
(pipelined inputs simulated for throughput, default 8). A changed network drops the base's
``[calibration]``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
import random
import tomllib
from pathlib import Path
from typing import Any

from tvm_chiplet.passes.planners import PLANNERS
from tvm_chiplet.targets.system import DEVICE_DTYPES, ChipletSystem, SystemConfigError
from tvm_chiplet.targets.system_toml import (
    PRESET_DIR,
    PRESET_PREFIX,
    preset_names,
    system_from_dict,
)
from tvm_chiplet.tools.models import MODELS

NETWORKS = ("analytical", "flow", "flit")

PARAMETERS: dict[str, str] = {
    "rows": "grid rows (chiplets along y)",
    "cols": "grid columns (chiplets along x)",
    "macs_per_cycle": "MACs/cycle of every cluster at the default dtype",
    "sram_bytes": "SRAM bytes of every cluster",
    "nop_bandwidth": "bytes/cycle of every die-to-die link",
    "nop_latency": "cycles per die-to-die hop",
    "dram_channels": "number of DRAM controllers",
    "device_dtype": f"device precision ({', '.join(DEVICE_DTYPES)})",
    "faults": "number of random faulty chiplets",
    "fault_seed": "seed of the random faults (default the study's seed)",
    "network": f"simulation only: network model ({', '.join(NETWORKS)})",
    "inputs": "simulation only: pipelined inputs simulated for throughput",
}
"""Every parameter a study may vary, with what it sets."""

SIMULATION_ONLY = ("network", "inputs")
"""Parameters that leave the compiled plan alone: points differing only in them share it."""

GRID_PARAMETERS = ("rows", "cols", "macs_per_cycle", "sram_bytes", "nop_bandwidth",
                   "nop_latency", "dram_channels", "faults")
_NETWORK_PARAMETERS = ("rows", "cols", "nop_bandwidth", "nop_latency", "dram_channels", "faults")
_INTEGER = ("rows", "cols", "macs_per_cycle", "sram_bytes", "dram_channels", "faults",
            "fault_seed", "inputs")

AXES = ("model", "strategy", "batch")
"""The axes every study has besides its parameters."""

OBJECTIVES: dict[str, tuple[str, str]] = {
    "latency": ("latency_ms", "min"),
    "throughput": ("throughput_per_s", "max"),
    "energy": ("energy_uj", "min"),
    "edp": ("edp_uj_ms", "min"),
    "area": ("area", "min"),
}
"""Objective name -> (results column, direction). Latency is one batch's, throughput in input
samples per second with pipelined batches, energy per input sample, EDP their product."""

AREA_COEFFICIENTS = ("per_mac", "per_sram_mib", "per_phy")
_AREA_OPTIONAL = ("per_dram_channel",)
METHODS = ("grid", "random", "tpe")
DEFAULT_INPUTS = 8
_STUDY_KEYS = ("name", "base", "seed", "models", "strategies", "batch")
_ROOT_KEYS = ("study", "parameters", "objectives", "search")
_SEARCH_KEYS = ("method", "budget", "metric", "timeout_s")
_RANGE_KEYS = ("low", "high", "log")


class StudyError(ValueError):
    """A study file is invalid: the message names the file, the field and the remedy."""


@dataclasses.dataclass(frozen=True)
class Range:
    """A continuous (or integer, for integer parameters) range for random and TPE search."""

    low: float
    high: float
    log: bool = False
    integer: bool = False

    def sample(self, rng: random.Random) -> float | int:
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return round(value) if self.integer else value


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model of a study: a bundled generator with options, or an ONNX file."""

    label: str
    generator: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    path: str | None = None

    def key(self) -> str:
        """What identifies the model's content (the ONNX file's digest for a file)."""
        if self.path is not None:
            digest = hashlib.sha256(Path(self.path).read_bytes()).hexdigest()
            return f"onnx:{digest}"
        return f"generator:{self.generator}:{json.dumps(self.options)}"


@dataclasses.dataclass(frozen=True)
class Study:
    """A loaded, validated study (see the module docstring for the file)."""

    name: str
    source: str
    base: str
    base_data: dict
    seed: int
    models: tuple[ModelSpec, ...]
    space: dict[str, list | Range]
    objectives: tuple[str, ...]
    area: dict[str, float]
    method: str
    budget: int | None
    metric: str | None
    timeout_s: float | None

    def model(self, label: str) -> ModelSpec:
        return next(m for m in self.models if m.label == label)

    @property
    def parameters(self) -> list[str]:
        """The varied parameters (the space's axes besides :data:`AXES`)."""
        return [name for name in self.space if name not in AXES]

    def to_dict(self) -> dict:
        """What ``tvmc explore --report`` needs of the study, JSON-serialisable."""
        return {"name": self.name, "source": self.source, "method": self.method,
                "objectives": list(self.objectives), "parameters": self.parameters}


def _fail(source: str, path: str, message: str) -> StudyError:
    return StudyError(f"{source}: {path}: {message}")


def _base_data(base: str, study_dir: Path, source: str) -> dict:
    name = base.removeprefix(PRESET_PREFIX)
    if name in preset_names():
        file = PRESET_DIR / f"{name}.toml"
    else:
        file = Path(base) if Path(base).is_absolute() else study_dir / base
        if not file.is_file():
            raise _fail(source, "study.base", f"{base!r} is neither a preset "
                        f"({', '.join(preset_names())}) nor an existing file")
    with open(file, "rb") as handle:
        data = tomllib.load(handle)
    system_from_dict(copy.deepcopy(data), source=str(file))
    return data


def _models(value: Any, study_dir: Path, source: str) -> tuple[ModelSpec, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(source, "study.models", "expected a non-empty list of model generator names "
                    f"({', '.join(sorted(MODELS))}), ONNX files or {{name, options, label}} tables")
    specs = []
    for i, item in enumerate(value):
        path = f"study.models[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _fail(source, path, f"expected a name or a table with a name, got {item!r}")
        unknown = sorted(set(item) - {"name", "options", "label"})
        if unknown:
            raise _fail(source, path, f"unknown keys {unknown}; expected name, options, label")
        name, options = item["name"], item.get("options", {})
        if not isinstance(options, dict):
            raise _fail(source, f"{path}.options", f"expected a table, got {options!r}")
        if name in MODELS:
            spec = ModelSpec(item.get("label", name), generator=name,
                             options=tuple(sorted(options.items())))
        else:
            file = Path(name) if Path(name).is_absolute() else study_dir / name
            if not file.is_file():
                raise _fail(source, path, f"{name!r} is neither a bundled model "
                            f"({', '.join(sorted(MODELS))}) nor an existing ONNX file")
            if options:
                raise _fail(source, f"{path}.options", "options apply to bundled models only")
            spec = ModelSpec(item.get("label", file.stem), path=str(file.resolve()))
        specs.append(spec)
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise _fail(source, "study.models", f"labels must differ, got {labels}; give a label")
    return tuple(specs)


def _values(value: Any, path: str, source: str, default: list) -> list:
    if value is None:
        return default
    values = value if isinstance(value, list) else [value]
    if not values:
        raise _fail(source, path, "the list is empty: the space has no point; give a value")
    return values


def _check_value(name: str, value: Any, path: str, source: str) -> None:
    if name == "device_dtype":
        ok, expected = value in DEVICE_DTYPES, f"one of {', '.join(DEVICE_DTYPES)}"
    elif name == "network":
        ok, expected = value in NETWORKS, f"one of {', '.join(NETWORKS)}"
    elif name in ("faults", "fault_seed"):
        ok, expected = isinstance(value, int) and value >= 0, "an integer >= 0"
    elif name in _INTEGER:
        ok, expected = isinstance(value, int) and value >= 1, "an integer >= 1"
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        expected = "a number >= 0"
    if not ok:
        raise _fail(source, path, f"expected {expected}, got {value!r}")


def _parameter(name: str, value: Any, source: str) -> list | Range:
    path = f"parameters.{name}"
    if name not in PARAMETERS:
        raise _fail(source, path, f"unknown parameter {name!r}; valid parameters: "
                    + ", ".join(PARAMETERS))
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(_RANGE_KEYS))
        if unknown or "low" not in value or "high" not in value:
            raise _fail(source, path, "a range is a table {low, high, log = false}, "
                        f"got {value!r}")
        if name in ("device_dtype", "network"):
            raise _fail(source, path, f"{name} takes a list of values, not a range")
        low, high = value["low"], value["high"]
        for bound, key in ((low, "low"), (high, "high")):
            _check_value(name, bound, f"{path}.{key}", source)
        if low > high:
            raise _fail(source, path, f"the range is empty: low {low} > high {high}")
        if value.get("log") and low <= 0:
            raise _fail(source, path, f"a log range needs low > 0, got {low}")
        return Range(float(low), float(high), bool(value.get("log", False)), name in _INTEGER)
    values = _values(value, path, source, [])
    for i, item in enumerate(values):
        _check_value(name, item, f"{path}[{i}]", source)
    return values


def load_study(path: str | Path) -> Study:
    """Read and validate a study TOML file; raise :class:`StudyError` naming what is wrong."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise StudyError(f"study file {source!r} does not exist")
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise StudyError(f"{source}: not valid TOML: {err}") from None
    unknown = sorted(set(data) - set(_ROOT_KEYS))
    if unknown:
        raise _fail(source, "<root>", f"unknown tables {unknown}; expected {list(_ROOT_KEYS)}")
    study = data.get("study", {})
    unknown = sorted(set(study) - set(_STUDY_KEYS))
    if unknown:
        raise _fail(source, "study", f"unknown keys {unknown}; expected {list(_STUDY_KEYS)}")
    if not isinstance(study.get("base"), str):
        raise _fail(source, "study.base", "required: a preset name (e.g. \"mesh-4x4\") or a "
                    "system TOML file")
    try:
        base_data = _base_data(study["base"], path.parent, source)
    except SystemConfigError as err:
        raise _fail(source, "study.base", f"the base system is invalid: {err}") from None
    models = _models(study.get("models"), path.parent, source)
    strategies = _values(study.get("strategies"), "study.strategies", source, ["pipeline"])
    for i, strategy in enumerate(strategies):
        if strategy not in PLANNERS:
            raise _fail(source, f"study.strategies[{i}]", f"unknown strategy {strategy!r}; "
                        f"expected one of {', '.join(PLANNERS)}")
    batches = _values(study.get("batch"), "study.batch", source, [1])
    for i, batch in enumerate(batches):
        if not isinstance(batch, int) or batch < 1:
            raise _fail(source, f"study.batch[{i}]", f"expected an integer >= 1, got {batch!r}")
    space: dict[str, list | Range] = {"model": [m.label for m in models],
                                      "strategy": strategies, "batch": batches}
    parameters = data.get("parameters", {})
    for name, value in parameters.items():
        space[name] = _parameter(name, value, source)
    grid_needed = sorted(set(parameters) & set(GRID_PARAMETERS))
    if grid_needed and "grid" not in base_data:
        raise _fail(source, "parameters", f"{grid_needed} vary the grid of a compact-form base "
                    f"system, but {study['base']!r} lists its chiplets explicitly; use a base "
                    "with a [grid] table")
    objectives, area = _objectives(data.get("objectives", {}), source)
    if {"energy", "edp"} & set(objectives) and not system_from_dict(
            copy.deepcopy(base_data)).has_energy:
        raise _fail(source, "objectives.names", f"energy and edp need energy coefficients, "
                    f"which {study['base']!r} does not declare; drop them or pick another base")
    search = data.get("search", {})
    unknown = sorted(set(search) - set(_SEARCH_KEYS))
    if unknown:
        raise _fail(source, "search", f"unknown keys {unknown}; expected {list(_SEARCH_KEYS)}")
    method = search.get("method", "grid")
    if method not in METHODS:
        raise _fail(source, "search.method", f"expected one of {', '.join(METHODS)}, "
                    f"got {method!r}")
    ranges = [name for name, dom in space.items() if isinstance(dom, Range)]
    if method == "grid" and ranges:
        raise _fail(source, "parameters", f"{ranges} are ranges, which a grid cannot "
                    "enumerate; give lists of values or use method random or tpe")
    budget = search.get("budget")
    if method != "grid" and (not isinstance(budget, int) or budget < 1):
        raise _fail(source, "search.budget", f"method {method} needs a budget, an integer "
                    f">= 1 (points to run), got {budget!r}")
    metric = search.get("metric")
    if method == "tpe" and metric not in objectives:
        raise _fail(source, "search.metric", f"tpe optimises one objective: expected one of "
                    f"{', '.join(objectives)}, got {metric!r}")
    timeout = search.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise _fail(source, "search.timeout_s", f"expected seconds > 0, got {timeout!r}")
    seed = study.get("seed", 0)
    if not isinstance(seed, int):
        raise _fail(source, "study.seed", f"expected an integer, got {seed!r}")
    return Study(
        name=study.get("name", path.stem), source=source, base=study["base"],
        base_data=base_data, seed=seed, models=models, space=space, objectives=objectives,
        area=area, method=method, budget=budget, metric=metric,
        timeout_s=float(timeout) if timeout is not None else None,
    )


def _objectives(table: dict, source: str) -> tuple[tuple[str, ...], dict[str, float]]:
    unknown = sorted(set(table) - {"names", "area"})
    if unknown:
        raise _fail(source, "objectives", f"unknown keys {unknown}; expected names, area")
    names = _values(table.get("names"), "objectives.names", source, list(OBJECTIVES))
    for name in names:
        if name not in OBJECTIVES:
            raise _fail(source, "objectives.names", f"unknown objective {name!r}; valid "
                        f"objectives: {', '.join(OBJECTIVES)}")
    area = table.get("area", {})
    if "area" in names:
        missing = [key for key in AREA_COEFFICIENTS if key not in area]
        if missing:
            raise _fail(source, "objectives.area", f"the area proxy needs its coefficients "
                        f"stated: missing {missing} (e.g. area = {{per_mac = 2e-4, "
                        "per_sram_mib = 0.6, per_phy = 0.5}), or drop \"area\" from names")
    for key, value in area.items():
        if key not in AREA_COEFFICIENTS + _AREA_OPTIONAL:
            raise _fail(source, f"objectives.area.{key}", "unknown coefficient; expected "
                        f"{', '.join(AREA_COEFFICIENTS + _AREA_OPTIONAL)}")
        if not isinstance(value, int | float) or value < 0:
            raise _fail(source, f"objectives.area.{key}", f"expected a number >= 0, got {value!r}")
    return tuple(dict.fromkeys(names)), {k: float(v) for k, v in area.items()}


# ------------------------------------------------------------------- the space
def point_id(point: dict) -> str:
    """A stable identifier of a point: the digest of its values."""
    return hashlib.sha256(json.dumps(point, sort_keys=True).encode()).hexdigest()[:12]


def grid_points(study: Study) -> list[dict]:
    """Every point of a space of value lists, in file order (the last axis fastest)."""
    names = list(study.space)
    return [dict(zip(names, values, strict=True))
            for values in itertools.product(*(study.space[n] for n in names))]


def random_points(study: Study, count: int) -> list[dict]:
    """``count`` distinct points drawn with the study's seed (fewer if the space is smaller)."""
    rng = random.Random(study.seed)
    finite = all(isinstance(d, list) for d in study.space.values())
    size = math.prod(len(d) for d in study.space.values()) if finite else None
    points: dict[str, dict] = {}
    attempts = 0
    while len(points) < count and (size is None or len(points) < size) and attempts < 100 * count:
        attempts += 1
        point = {name: (rng.choice(dom) if isinstance(dom, list) else dom.sample(rng))
                 for name, dom in study.space.items()}
        points.setdefault(point_id(point), point)
    return list(points.values())


# ---------------------------------------------------------------- point systems
def _cluster_entries(data: dict) -> list[dict]:
    entries = data["grid"]["chiplet"]["cluster"]
    return entries if isinstance(entries, list) else [entries]


def _dram_positions(count: int, rows: int, cols: int) -> list[list[int]]:
    """Controllers alternately on the west and east edges, spread over the rows."""
    sides = [[0], [cols - 1]] if cols > 1 else [[0], [0]]
    per_side = [math.ceil(count / 2), count // 2]
    positions = []
    for side, n in enumerate(per_side):
        for k in range(n):
            y = min(rows - 1, (2 * k + 1) * rows // (2 * n)) if n else 0
            positions.append([sides[side][0], y])
    return positions


def _faulty_chiplets(data: dict, count: int, seed: int, source: str) -> list[list[int]]:
    rows, cols = data["grid"]["rows"], data["grid"]["cols"]
    with_dram = {tuple(d["chiplet"]) for d in data.get("dram", [])
                 if isinstance(d.get("chiplet"), list)}
    candidates = [[x, y] for y in range(rows) for x in range(cols) if (x, y) not in with_dram]
    if count > len(candidates):
        raise StudyError(f"{source}: faults = {count}, but a {rows}x{cols} grid has only "
                         f"{len(candidates)} chiplets without DRAM to fail")
    rng = random.Random(seed)
    for _ in range(200):
        chosen = sorted(rng.sample(candidates, count))
        trial = {**data, "faults": {"chiplets": chosen}}
        try:
            system_from_dict(copy.deepcopy(trial))
        except SystemConfigError:
            continue
        return chosen
    raise StudyError(f"{source}: no set of {count} faulty chiplets keeps the {rows}x{cols} grid "
                     "connected in 200 draws; lower faults")


def point_system(study: Study, point: dict) -> ChipletSystem:
    """The chiplet system of a point: the base description with the point's parameters."""
    data = copy.deepcopy(study.base_data)
    if any(name in point for name in GRID_PARAMETERS):
        grid = data["grid"]
        grid["rows"] = point.get("rows", grid["rows"])
        grid["cols"] = point.get("cols", grid["cols"])
        for entry in _cluster_entries(data):
            if "macs_per_cycle" in point:
                macs = entry["macs_per_cycle"]
                if isinstance(macs, dict):
                    dtype = data["system"].get("dtype", "fp32")
                    scale = point["macs_per_cycle"] / macs[dtype]
                    entry["macs_per_cycle"] = {k: max(1, round(v * scale))
                                               for k, v in macs.items()}
                else:
                    entry["macs_per_cycle"] = point["macs_per_cycle"]
            if "sram_bytes" in point:
                entry["sram_bytes"] = point["sram_bytes"]
        nop = data.setdefault("nop", {})
        if "nop_bandwidth" in point:
            nop["bandwidth"] = float(point["nop_bandwidth"])
        if "nop_latency" in point:
            nop["latency"] = float(point["nop_latency"])
        if any(name in point for name in ("rows", "cols", "dram_channels")):
            drams = data.get("dram", [])
            template = {k: v for k, v in drams[0].items() if k not in ("chiplet", "cluster")}
            count = point.get("dram_channels", len(drams))
            data["dram"] = [{"chiplet": xy, **template}
                            for xy in _dram_positions(count, grid["rows"], grid["cols"])]
        if any(name in point for name in _NETWORK_PARAMETERS):
            data.pop("calibration", None)
        if point.get("faults"):
            seed = point.get("fault_seed", study.seed)
            data["faults"] = {"chiplets": _faulty_chiplets(data, point["faults"], seed,
                                                           study.source)}
    system = system_from_dict(data, source=f"{study.source} point {point_id(point)}")
    if "device_dtype" in point:
        system = system.with_device_dtype(point["device_dtype"])
    return system


def area_proxy(system: ChipletSystem, coefficients: dict[str, float]) -> float:
    """The area / cost proxy: MACs/cycle, SRAM MiB, die-to-die PHYs (one per directed ``nop``
    link: each end of a bidirectional link has a transmitter) and DRAM channels, each times
    its stated coefficient."""
    macs = sum(c.macs_per_cycle for c in system.clusters)
    sram_mib = sum(c.sram_bytes for c in system.clusters) / 2**20
    phys = sum(1 for link in system.links if link.kind == "nop")
    return (coefficients.get("per_mac", 0.0) * macs
            + coefficients.get("per_sram_mib", 0.0) * sram_mib
            + coefficients.get("per_phy", 0.0) * phys
            + coefficients.get("per_dram_channel", 0.0) * len(system.drams))

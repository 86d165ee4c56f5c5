"""The TOML schema of a chiplet system: loader, validator and bundled presets.

A description (a TOML file, or the same schema as Python data) is checked field by field and
turned into a :class:`~tvm_chiplet.targets.system.ChipletSystem`; the model itself is described
in :mod:`tvm_chiplet.targets.system`.

TOML schema
-----------
Two forms describe the chiplets; a file uses exactly one of them.

Compact form (a grid shorthand)::

    [system]
    name = "mesh-4x4"              # required; letters, digits, '-', '_'
    description = "..."            # optional one-line text
    frequency_hz = 1.0e9           # required, > 0: the clock every cycle count refers to
    dtype = "int8"                 # optional, default "fp32": the default device dtype, one
                                   #   of int8, fp16, bf16, fp32
    dtype_macs = {fp16 = 0.5, fp32 = 0.125}
                                   # optional shorthand: every cluster whose macs_per_cycle is
                                   #   a number also computes these dtypes at this fraction of
                                   #   its default-dtype rate (rounded down, at least 1)
    accumulator_bytes = {int8 = 3} # optional: bytes of the accumulators of MACs at a dtype
                                   #   (1..8; default 4: int32, fp32), the width partial sums
                                   #   are held and sent at (never narrower than the dtype)
    multicast_orders = ["xy"]      # optional, default ["xy", "yx"]: the orders multicasting
                                   #   routers build trees in on a mesh (grid legs X then Y,
                                   #   Y then X; see targets/topology.py)

    [grid]
    rows = 4                       # required, >= 1 (y runs over rows); a system has at most
    cols = 4                       # required, >= 1 (x runs over cols);  65536 clusters in all

    [grid.chiplet]                 # template applied to every grid position
    name = "x{x}y{y}"              # optional format string (default shown)
    layout = "mesh"                # "mesh" (default) or "ring": how clusters are linked
    local_cols = 2                 # mesh only: clusters per local row (default: most square)
    static_power_w = 0.05          # energy (see below): >= 0 watts of static power per chiplet

    [grid.chiplet.cluster]         # one table, or an array [[grid.chiplet.cluster]]
    count = 4                      # optional, default 1: repeat this entry
    name = "k0"                    # optional (only with count = 1); default "k<i>"
    macs_per_cycle = 1024          # required: MACs/cycle (2 FLOPs each) at the default dtype,
                                   #   an integer > 0 (the cluster computes that dtype, plus
                                   #   those of [system] dtype_macs), or a table of integers
                                   #   {int8 = 1024, fp16 = 512} that includes the default dtype
    sram_bytes = 2097152           # required integer > 0: local scratchpad
    local_bandwidth = 256.0        # required > 0: bytes/cycle between the cluster and its SRAM
    energy_pj_per_mac = {int8 = 0.1, fp16 = 0.72, fp32 = 1.69}
                                   # energy: pJ per MAC for every dtype the cluster computes
                                   #   (a plain number when it computes one dtype only)
    energy_pj_per_sram_byte = 1.75 # energy: pJ per byte read from or written to the SRAM

Explicit form (list every chiplet)::

    [[chiplet]]
    name = "left"                  # optional, default "x<x>y<y>"
    x = 0                          # required integer >= 0
    y = 0                          # required integer >= 0
    layout = "mesh"                # as in the template; local_cols and static_power_w too
    [[chiplet.cluster]]            # as in the template; may also give "lx"/"ly" (integers
    macs_per_cycle = 1024          # >= 0), the local mesh position, for every cluster or none
    sram_bytes = 2097152
    local_bandwidth = 256.0

Sections shared by both forms::

    [noc]                          # defaults for links inside a chiplet
    bandwidth = 64.0               # > 0 bytes/cycle per direction
    latency = 2.0                  # >= 0 cycles per hop
    energy_pj_per_bit = 0.075      # energy: pJ per bit per link traversed
    auto = true                    # generate the local mesh/ring links (see below)
    multicast = false              # routers replicate packets: a value sent to several
                                   #   clusters crosses each link of its tree once

    [nop]                          # defaults for links between chiplets; same keys as [noc]

    [[link]]                       # explicit links (directed pairs unless bidirectional = false)
    src = "x0y0"                   # a chiplet name (its gateway cluster), "chiplet.cluster",
    dst = "x1y0.k1"                #   or [x, y] (the gateway of the chiplet at that position)
    kind = "nop"                   # optional; inferred ("noc" within a chiplet, else "nop")
    bandwidth = 32.0               # optional, default from [noc] / [nop]
    latency = 10.0                 # optional, default from [noc] / [nop]
    energy_pj_per_bit = 0.5        # optional, default from [noc] / [nop]
    multicast = true               # optional, default from [noc] / [nop]
    bidirectional = true           # optional, default true: also add dst -> src

    [[dram]]                       # at least one controller is required
    chiplet = "x0y1"               # chiplet name or [x, y]
    cluster = "k0"                 # optional local cluster name or index, default the gateway
    bandwidth = 51.2               # > 0 bytes/cycle
    energy_pj_per_bit = 4.5        # energy: pJ per bit read or written
    capacity_bytes = 2147483648    # optional integer > 0: memory behind the controller (a
                                   #   model must fit the SRAM plus this; unbounded if absent)

    [calibration]                  # optional: the flow model corrected towards the flit model,
                                   #   as tools/bench/fidelity.py --calibrate writes it
    flow_efficiency = {nop = 0.9}  # per link kind (noc, nop) or dram: a fraction in (0, 1] of
                                   #   the rated bandwidth the flow model gives those links
    flit_error = 0.04              # how far flow stayed from flit after fitting (relative)
    workload = "resnet50 ..."      # what it was fitted on
    fingerprint = "3f2a..."        # the network it was measured on (links, faults, DRAM); on a
                                   #   mismatch it is ignored with a warning

    [faults]                       # parts removed before use; names keep their meaning
    chiplets = ["x1y1", [2, 3]]    # chiplet names or [x, y]
    clusters = ["x0y0.k3"]         # "chiplet.cluster"
    links = [["x0y0", "x1y0"]]     # endpoint pairs (chiplet or cluster references): every link
                                   # between the two, in both directions, is removed

Energy: a description declares all of its energy coefficients or none. Without any, every
coefficient is 0 and ``ChipletSystem.has_energy`` is false. Once one is given, each of these is
required: ``energy_pj_per_mac`` and ``energy_pj_per_sram_byte`` on every cluster entry,
``static_power_w`` on every chiplet (or the grid template), ``energy_pj_per_bit`` on every
``[[dram]]``, and a link energy for every link: its own ``energy_pj_per_bit`` or its kind's
(``[noc]`` / ``[nop]``; a kind without links needs none). Coefficients are numbers >= 0.

Automatic links: when ``auto`` is not given for a kind, links of that kind are generated unless
some ``[[link]]`` of that kind is listed. ``noc``: a ``mesh`` chiplet links clusters at
neighbouring local positions (row-major ``lx = i % local_cols``, ``ly = i // local_cols``); a
``ring`` chiplet links listing neighbours and closes the ring. ``nop``: the gateways of chiplets
at neighbouring coordinates are linked. Every generated or listed pair yields two directed
:class:`Link` objects. Link ids follow generation order: ``noc`` (chiplet by chiplet), then
``nop`` (chiplets in id order, east neighbour before south neighbour), then ``[[link]]`` entries.

Numbering: in the compact form chiplets are numbered row-major (``id = y * cols + x``); in the
explicit form in listing order. Faults are applied last: faulty chiplets, clusters and links
disappear (with every link and DRAM attached to them); the survivors are renumbered in the same
order and keep their names. A system whose clusters cannot all reach each other is refused.

Every error is a :class:`SystemConfigError` naming the file, the field path (for example
``chiplet[3].cluster[0].macs_per_cycle``), the value found and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import networkx as nx

from tvm_chiplet.targets.system import (
    CALIBRATED_KINDS,
    DEVICE_DTYPES,
    LINK_KINDS,
    MULTICAST_ORDERS,
    Chiplet,
    ChipletSystem,
    Cluster,
    Dram,
    FlowCalibration,
    Link,
    SystemConfigError,
    _preview,
)

PRESET_DIR = Path(__file__).resolve().parent / "presets"
PRESET_PREFIX = "chiplet/"
LAYOUTS = ("mesh", "ring")

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_CLUSTERS = 65536
"""Most clusters a system may have (and most chiplets per grid side, clusters per chiplet,
chiplet coordinate): far beyond any real system, small enough that a typo such as
``count = 1e30`` gets an error rather than a machine out of memory."""
_ROOT_KEYS = ("system", "grid", "chiplet", "noc", "nop", "link", "dram", "faults",
              "calibration")
_CALIBRATION_KEYS = ("flow_efficiency", "flit_error", "workload", "fingerprint")
_SYSTEM_KEYS = ("name", "description", "frequency_hz", "dtype", "dtype_macs",
                "accumulator_bytes", "multicast_orders")
_GRID_KEYS = ("rows", "cols", "chiplet")
_TEMPLATE_KEYS = ("name", "layout", "local_cols", "static_power_w", "cluster")
_CHIPLET_KEYS = ("name", "x", "y", "layout", "local_cols", "static_power_w", "cluster")
_CLUSTER_KEYS = (
    "name",
    "count",
    "macs_per_cycle",
    "sram_bytes",
    "local_bandwidth",
    "lx",
    "ly",
    "energy_pj_per_mac",
    "energy_pj_per_sram_byte",
)
_LINK_DEFAULT_KEYS = ("bandwidth", "latency", "energy_pj_per_bit", "auto", "multicast")
_LINK_KEYS = ("src", "dst", "kind", "bandwidth", "latency", "energy_pj_per_bit", "multicast",
              "bidirectional")
_DRAM_KEYS = ("chiplet", "cluster", "bandwidth", "energy_pj_per_bit", "capacity_bytes")
_FAULT_KEYS = ("chiplets", "clusters", "links")
_DEFAULT_DTYPE = "fp32"  # what a file without [system] dtype has always meant


# ---------------------------------------------------------------------- loading
def system_from_toml(path: str | Path) -> ChipletSystem:
    """Read and validate a system TOML file (see the module docstring for the schema)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SystemConfigError(
            f"{path}: cannot read the system file ({err.strerror}); expected a readable "
            f"TOML file or a preset name ({', '.join(preset_names())})"
        ) from err
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SystemConfigError(f"{path}: malformed TOML: {err}") from err
    return system_from_dict(data, source=str(path))


def system_from_dict(data: dict[str, Any], source: str = "<dict>") -> ChipletSystem:
    """Validate a parsed description (the TOML schema as Python data) and build the system."""
    return _Builder(source).build(data)


# ---------------------------------------------------------------------- presets
def preset_names() -> list[str]:
    """Names of the bundled presets, sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def list_presets() -> list[tuple[str, str]]:
    """``(name, one-line summary)`` of every bundled preset, sorted by name."""
    result = []
    for name in preset_names():
        system = system_from_toml(PRESET_DIR / f"{name}.toml")
        headline = system.description.splitlines()[0] if system.description else system.name
        result.append((name, f"{headline} ({system.stats()})"))
    return result


def load_system(name_or_path: str | Path) -> ChipletSystem:
    """Load a preset (``"mesh-4x4"`` or ``"chiplet/mesh-4x4"``) or a TOML file path.

    Raises
    ------
    SystemConfigError
        For an unknown preset (listing the valid names) or an invalid file.
    """
    if isinstance(name_or_path, Path):
        return system_from_toml(name_or_path)
    text = str(name_or_path)
    candidate = Path(text)
    if text.endswith(".toml") or "/" in text.removeprefix(PRESET_PREFIX) or candidate.is_file():
        return system_from_toml(candidate)
    return load_preset(text)


def load_preset(name: str) -> ChipletSystem:
    """Load the bundled preset ``name`` (``"mesh-4x4"`` or ``"chiplet/mesh-4x4"``).

    Raises
    ------
    SystemConfigError
        When there is no such preset; the message lists the valid names.
    """
    bare = name.removeprefix(PRESET_PREFIX)
    names = preset_names()
    if bare not in names:
        close = difflib.get_close_matches(bare, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SystemConfigError(
            f"unknown chiplet system preset {name!r}{hint}; expected one of "
            f"{', '.join(names)} or a path to a .toml file"
        )
    return system_from_toml(PRESET_DIR / f"{bare}.toml")


# ---------------------------------------------------------------------- parsing
def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@dataclass
class _ClusterSpec:
    name: str
    macs: dict[str, int]  # dtype -> MACs/cycle, in DEVICE_DTYPES order
    sram: int
    bandwidth: float
    lx: int
    ly: int
    mac_energy: dict[str, float] | None
    sram_energy: float | None


@dataclass
class _ChipletSpec:
    path: str
    name: str
    x: int
    y: int
    layout: str
    clusters: list[_ClusterSpec]
    static_power: float | None
    first: int = 0  # global index of the first cluster, set once all chiplets are known


@dataclass
class _LinkSpec:
    src: int
    dst: int
    kind: str
    bandwidth: float
    latency: float
    energy: float | None
    multicast: bool = False


@dataclass
class _DramSpec:
    node: int
    bandwidth: float
    energy: float | None
    capacity: int | None = None


class _Builder:
    """One validation run over a parsed description; holds nothing beyond that run."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.dtype = _DEFAULT_DTYPE
        self.dtype_macs: dict[str, float] = {}
        self.accumulators: tuple[tuple[str, int], ...] = ()  # [system] accumulator_bytes
        self.multicast_orders = MULTICAST_ORDERS  # [system] multicast_orders
        # Energy is all or nothing: the first coefficient given and the first one missing.
        self.energy_given: str | None = None
        self.energy_missing: tuple[str, str] | None = None

    # -------------------------------------------------------------- error helpers
    def fail(self, path: str, message: str) -> NoReturn:
        raise SystemConfigError(f"{self.source}: {path}: {message}")

    def bad(self, path: str, value: Any, expected: str) -> NoReturn:
        self.fail(path, f"found {value!r}; expected {expected}")

    def array_of_tables(self, value: Any, key: str, allowed: tuple[str, ...],
                        empty: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """The ``(path, table)`` of each entry of the array of tables ``[[key]]``, each checked
        by :meth:`table`; ``empty``: the error for an empty array (default: allowed)."""
        if not isinstance(value, list):
            self.bad(key, value, f"an array of tables [[{key}]]")
        if not value and empty is not None:
            self.fail(key, empty)
        for i, item in enumerate(value):
            path = f"{key}[{i}]"
            yield path, self.table(item, path, allowed)

    def table(self, value: Any, path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.bad(path, value, f"a table with keys {', '.join(allowed)}")
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.fail(
                    _join(path, key),
                    f"unknown key {key!r}{hint}; allowed keys here: {', '.join(allowed)}",
                )
        return value

    def tables(self, value: Any, path: str, allowed: tuple[str, ...]) -> list[dict[str, Any]]:
        if isinstance(value, dict):
            return [self.table(value, path, allowed)]
        if not isinstance(value, list):
            self.bad(path, value, "a table or an array of tables")
        return [self.table(item, f"{path}[{i}]", allowed) for i, item in enumerate(value)]

    def missing(self, tbl: dict[str, Any], key: str, path: str, expected: str) -> None:
        if key not in tbl:
            self.fail(_join(path, key), f"missing required field; expected {expected}")

    def get_int(
        self, tbl: dict[str, Any], key: str, path: str, minimum: int, default: int | None = None,
        maximum: int | None = None,
    ) -> int:
        expected = (f"an integer >= {minimum}" if maximum is None
                    else f"an integer in {minimum}..{maximum}")
        if key not in tbl:
            if default is None:
                self.missing(tbl, key, path, expected)
            return default
        value = tbl[key]
        if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
                or (maximum is not None and value > maximum)):
            self.bad(_join(path, key), value, expected)
        return value

    def get_number(
        self,
        tbl: dict[str, Any],
        key: str,
        path: str,
        *,
        positive: bool,
        default: float | None = None,
        unit: str = "",
    ) -> float:
        expected = ("a number > 0" if positive else "a number >= 0") + (
            f" ({unit})" if unit else ""
        )
        if key not in tbl:
            if default is None:
                self.missing(tbl, key, path, expected)
            return default
        value = tbl[key]
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0 or (positive and value == 0):
            self.bad(_join(path, key), value, expected)
        return float(value)

    def get_str(self, tbl: dict[str, Any], key: str, path: str, default: str | None = None) -> str:
        if key not in tbl:
            if default is None:
                self.missing(tbl, key, path, "a string")
            return default
        if not isinstance(tbl[key], str):
            self.bad(_join(path, key), tbl[key], "a string")
        return tbl[key]

    def get_name(self, tbl: dict[str, Any], key: str, path: str, default: str | None) -> str:
        name = self.get_str(tbl, key, path, default)
        if not _NAME_RE.match(name):
            self.bad(_join(path, key), name, "a name of letters, digits, '-' and '_' only")
        return name

    def get_bool(self, tbl: dict[str, Any], key: str, path: str) -> bool | None:
        if key not in tbl:
            return None
        if not isinstance(tbl[key], bool):
            self.bad(_join(path, key), tbl[key], "true or false")
        return tbl[key]

    # -------------------------------------------------------------- precision and energy
    def dtype_key(self, key: Any, path: str) -> str:
        if key not in DEVICE_DTYPES:
            self.fail(
                _join(path, str(key)),
                f"unknown dtype {key!r}; expected one of {', '.join(DEVICE_DTYPES)}",
            )
        return key

    def system_multicast_orders(self, sys_tbl: dict[str, Any]) -> None:
        orders = sys_tbl.get("multicast_orders", list(MULTICAST_ORDERS))
        expected = f"a non-empty list of distinct orders from {list(MULTICAST_ORDERS)}"
        if (not isinstance(orders, list) or not orders or len(set(map(str, orders))) < len(orders)
                or any(order not in MULTICAST_ORDERS for order in orders)):
            self.bad("system.multicast_orders", orders, expected)
        self.multicast_orders = tuple(order for order in MULTICAST_ORDERS if order in orders)

    def system_dtypes(self, sys_tbl: dict[str, Any]) -> None:
        self.dtype = self.get_str(sys_tbl, "dtype", "system", _DEFAULT_DTYPE)
        if self.dtype not in DEVICE_DTYPES:
            self.bad("system.dtype", self.dtype, f"one of {', '.join(DEVICE_DTYPES)}")
        widths = sys_tbl.get("accumulator_bytes", {})
        path = "system.accumulator_bytes"
        if not isinstance(widths, dict):
            self.bad(path, widths, "a table {dtype = bytes of its accumulators}")
        listed = {self.dtype_key(key, path) for key in widths}
        self.accumulators = tuple((dtype, self.get_int(widths, dtype, path, 1, maximum=8))
                                  for dtype in DEVICE_DTYPES if dtype in listed)
        if "dtype_macs" not in sys_tbl:
            return
        path = "system.dtype_macs"
        fractions = sys_tbl["dtype_macs"]
        if not isinstance(fractions, dict):
            self.bad(path, fractions, "a table {dtype = fraction of the default dtype's rate}")
        for key in fractions:
            dtype = self.dtype_key(key, path)
            if dtype == self.dtype:
                self.fail(
                    _join(path, dtype),
                    f"{dtype} is the default dtype ([system] dtype), whose rate is each "
                    f"cluster's macs_per_cycle; expected only other dtypes here",
                )
            self.dtype_macs[dtype] = self.get_number(
                fractions, dtype, path, positive=True, unit="fraction of the default rate"
            )

    def cluster_macs(self, entry: dict[str, Any], epath: str) -> dict[str, int]:
        """dtype -> MACs/cycle of one cluster entry, in DEVICE_DTYPES order."""
        path = _join(epath, "macs_per_cycle")
        expected = (
            f"an integer >= 1 (MACs/cycle at the default dtype {self.dtype}) or a table of "
            f"them per dtype"
        )
        self.missing(entry, "macs_per_cycle", epath, expected)
        value = entry["macs_per_cycle"]
        if isinstance(value, dict):
            rates = {self.dtype_key(key, path): self.get_int(value, key, path, 1) for key in value}
            if self.dtype not in rates:
                self.bad(
                    path,
                    value,
                    f"a table that includes the default dtype {self.dtype} ([system] dtype)",
                )
        else:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                self.bad(path, value, expected)
            rates = {self.dtype: value}
            for dtype, fraction in self.dtype_macs.items():
                # The tiny relative slack keeps e.g. 100 * 0.29 from rounding down to 28.
                rates[dtype] = max(1, math.floor(value * fraction * (1 + 1e-12)))
        return {d: rates[d] for d in DEVICE_DTYPES if d in rates}

    def energy(self, tbl: dict[str, Any], key: str, path: str, unit: str) -> float | None:
        """An energy coefficient, or None (remembered as missing) when it is not given."""
        if key not in tbl:
            self.energy_absent(_join(path, key), f"a number >= 0 ({unit})")
            return None
        self.energy_given = self.energy_given or _join(path, key)
        return self.get_number(tbl, key, path, positive=False, unit=unit)

    def energy_absent(self, path: str, expected: str) -> None:
        self.energy_missing = self.energy_missing or (path, expected)

    def mac_energy(
        self, entry: dict[str, Any], epath: str, dtypes: list[str]
    ) -> dict[str, float] | None:
        key = "energy_pj_per_mac"
        path = _join(epath, key)
        value = entry.get(key)
        if not isinstance(value, dict):
            if value is not None and len(dtypes) > 1:
                self.bad(
                    path,
                    value,
                    f"a table of pJ per MAC for every dtype the cluster computes "
                    f"({', '.join(dtypes)})",
                )
            found = self.energy(entry, key, epath, f"pJ per MAC at {dtypes[0]}")
            return None if found is None else {dtypes[0]: found}
        self.energy_given = self.energy_given or path
        for dtype in value:
            if self.dtype_key(dtype, path) not in dtypes:
                self.fail(
                    _join(path, dtype),
                    f"the cluster does not compute {dtype} (its macs_per_cycle gives "
                    f"{', '.join(dtypes)}); expected energies for those dtypes only",
                )
        for dtype in dtypes:
            if dtype not in value:
                self.fail(
                    _join(path, dtype),
                    f"missing; expected a number >= 0 (pJ per MAC) because the cluster "
                    f"computes {dtype}",
                )
        return {
            d: self.get_number(value, d, path, positive=False, unit="pJ per MAC") for d in dtypes
        }

    def check_energy_complete(self) -> None:
        if self.energy_given and self.energy_missing:
            path, expected = self.energy_missing
            self.fail(
                path,
                f"missing energy coefficient; expected {expected} (the description declares "
                f"energy, e.g. {self.energy_given}: declare every coefficient or none)",
            )

    # -------------------------------------------------------------- top level
    def build(self, data: Any) -> ChipletSystem:
        data = self.table(data, "", _ROOT_KEYS)
        if "system" not in data:
            self.fail("system", "missing required section [system]; expected name, frequency_hz")
        sys_tbl = self.table(data["system"], "system", _SYSTEM_KEYS)
        name = self.get_name(sys_tbl, "name", "system", None)
        description = self.get_str(sys_tbl, "description", "system", "")
        frequency = self.get_number(
            sys_tbl, "frequency_hz", "system", positive=True, unit="clock in Hz"
        )
        self.system_dtypes(sys_tbl)
        self.system_multicast_orders(sys_tbl)

        if ("grid" in data) == ("chiplet" in data):
            found = "both" if "grid" in data else "neither"
            self.fail(
                "grid/chiplet",
                f"found {found} of [grid] and [[chiplet]]; expected exactly one: a [grid] "
                f"shorthand or an explicit [[chiplet]] list",
            )
        if "grid" in data:
            chiplets = self.grid_chiplets(data["grid"])
        else:
            chiplets = self.explicit_chiplets(data["chiplet"])
        self.check_unique_chiplets(chiplets)
        clusters: list[tuple[_ChipletSpec, _ClusterSpec]] = []
        for spec in chiplets:
            spec.first = len(clusters)
            clusters.extend((spec, c) for c in spec.clusters)
        if not clusters:
            self.fail("chiplet", "the system has no clusters; expected at least one cluster")

        defaults = {kind: self.link_defaults(data.get(kind, {}), kind) for kind in LINK_KINDS}
        listed = self.explicit_links(data.get("link", []), chiplets, defaults)
        links: list[_LinkSpec] = []
        for kind in LINK_KINDS:
            auto = defaults[kind]["auto"]
            if auto is None:
                auto = not any(link.kind == kind for link in listed)
            if auto:
                links.extend(self.auto_links(kind, chiplets, defaults))
        links.extend(listed)

        drams = self.drams(data.get("dram", []), chiplets)
        self.check_energy_complete()
        faults = self.faults(data.get("faults", {}), chiplets, links)
        system = self.assemble(name, description, frequency, chiplets, links, drams, faults)
        if "calibration" not in data:
            return system
        calibration = self.calibration(data["calibration"])
        if calibration.fingerprint != system.network_fingerprint():
            warnings.warn(
                f"{self.source}: [calibration] was measured on another network (fingerprint "
                f"{calibration.fingerprint!r}, this system's is "
                f"{system.network_fingerprint()!r}: links, faults, DRAM or multicast orders "
                "changed); the flow model runs uncalibrated. Re-run the calibration "
                "(python -m tvm_chiplet.tools.bench.fidelity --calibrate)",
                stacklevel=2,
            )
            return system
        return dataclasses.replace(system, calibration=calibration)

    def calibration(self, value: Any) -> FlowCalibration:
        table = self.table(value, "calibration", _CALIBRATION_KEYS)
        for key in _CALIBRATION_KEYS:
            if key not in table:
                self.fail(f"calibration.{key}", "missing; expected flow_efficiency, flit_error, "
                          "workload and fingerprint, as the fidelity benchmark writes them")
        rates = self.table(table["flow_efficiency"], "calibration.flow_efficiency",
                           CALIBRATED_KINDS)
        efficiency = []
        for kind in CALIBRATED_KINDS:
            if kind in rates:
                eta = self.get_number(rates, kind, "calibration.flow_efficiency", positive=True,
                                      unit="fraction of the rated bandwidth")
                if eta > 1:
                    self.fail(f"calibration.flow_efficiency.{kind}",
                              f"found {eta!r}; expected a fraction in (0, 1]")
                efficiency.append((kind, eta))
        error = self.get_number(table, "flit_error", "calibration", positive=False,
                                unit="relative error")
        return FlowCalibration(
            efficiency=tuple(efficiency), flit_error=error,
            workload=self.get_str(table, "workload", "calibration", ""),
            fingerprint=self.get_str(table, "fingerprint", "calibration", ""),
        )

    # -------------------------------------------------------------- chiplets
    def grid_chiplets(self, value: Any) -> list[_ChipletSpec]:
        grid = self.table(value, "grid", _GRID_KEYS)
        rows = self.get_int(grid, "rows", "grid", 1, maximum=MAX_CLUSTERS)
        cols = self.get_int(grid, "cols", "grid", 1, maximum=MAX_CLUSTERS)
        if rows * cols > MAX_CLUSTERS:
            self.fail("grid", f"{rows} x {cols} chiplets; expected at most {MAX_CLUSTERS}")
        if "chiplet" not in grid:
            self.fail("grid.chiplet", "missing required table; expected the chiplet template")
        template = self.table(grid["chiplet"], "grid.chiplet", _TEMPLATE_KEYS)
        pattern = self.get_str(template, "name", "grid.chiplet", "x{x}y{y}")
        chiplets = []
        for y in range(rows):
            for x in range(cols):
                try:
                    name = pattern.format(x=x, y=y)
                except (KeyError, IndexError, ValueError):
                    self.bad("grid.chiplet.name", pattern, "a format string using {x} and {y}")
                if not _NAME_RE.match(name):
                    self.bad(
                        "grid.chiplet.name", name, "a name of letters, digits, '-' and '_' only"
                    )
                spec = self.chiplet_body(template, "grid.chiplet", name, x, y)
                if rows * cols * len(spec.clusters) > MAX_CLUSTERS:
                    self.fail("grid", f"{rows} x {cols} chiplets of {len(spec.clusters)} "
                              f"clusters; expected at most {MAX_CLUSTERS} clusters in all")
                spec.path = f"grid.chiplet at (x={x}, y={y})"
                chiplets.append(spec)
        return chiplets

    def explicit_chiplets(self, value: Any) -> list[_ChipletSpec]:
        chiplets = []
        for path, tbl in self.array_of_tables(value, "chiplet", _CHIPLET_KEYS,
                                     "empty list; expected at least one [[chiplet]]"):
            x = self.get_int(tbl, "x", path, 0, maximum=MAX_CLUSTERS)
            y = self.get_int(tbl, "y", path, 0, maximum=MAX_CLUSTERS)
            name = self.get_name(tbl, "name", path, f"x{x}y{y}")
            chiplets.append(self.chiplet_body(tbl, path, name, x, y))
        return chiplets

    def chiplet_body(
        self, tbl: dict[str, Any], path: str, name: str, x: int, y: int
    ) -> _ChipletSpec:
        layout = self.get_str(tbl, "layout", path, "mesh")
        if layout not in LAYOUTS:
            self.bad(_join(path, "layout"), layout, f"one of {', '.join(LAYOUTS)}")
        if "cluster" not in tbl:
            self.fail(_join(path, "cluster"), "missing required field; expected cluster table(s)")
        entries = self.tables(tbl["cluster"], _join(path, "cluster"), _CLUSTER_KEYS)
        if isinstance(tbl["cluster"], dict):
            entries_paths = [_join(path, "cluster")]
        else:
            entries_paths = [f"{path}.cluster[{i}]" for i in range(len(entries))]
        raw: list[tuple[str, dict[str, Any], str | None]] = []
        for entry, epath in zip(entries, entries_paths, strict=True):
            count = self.get_int(entry, "count", epath, 1, default=1, maximum=MAX_CLUSTERS)
            if "name" in entry and count != 1:
                self.fail(
                    _join(epath, "name"),
                    f"a name needs count = 1 (found count = {count}); drop the name to get "
                    f"k0, k1, ...",
                )
            local = self.get_name(entry, "name", epath, "") if "name" in entry else None
            raw.extend((epath, entry, local) for _ in range(count))
        if not raw:
            self.fail(_join(path, "cluster"), "empty list; expected at least one cluster")

        positions = [("lx" in e) or ("ly" in e) for _, e, _ in raw]
        if any(positions) and not all(positions):
            self.fail(
                _join(path, "cluster"),
                "lx/ly given for some clusters only; expected them on every cluster or none",
            )
        explicit_positions = all(positions)
        if explicit_positions and "local_cols" in tbl:
            self.fail(
                _join(path, "local_cols"),
                "local_cols conflicts with explicit lx/ly positions; expected one or the other",
            )
        n = len(raw)
        local_cols = self.local_cols(tbl, path, n, layout)
        clusters = []
        seen_names: dict[str, str] = {}
        seen_pos: dict[tuple[int, int], str] = {}
        for i, (epath, entry, local) in enumerate(raw):
            local = local if local is not None else f"k{i}"
            if local in seen_names:
                self.fail(
                    _join(epath, "name"),
                    f"duplicate cluster name {local!r} in chiplet {name!r} (also at "
                    f"{seen_names[local]}); expected unique names",
                )
            seen_names[local] = epath
            if explicit_positions:
                lx = self.get_int(entry, "lx", epath, 0)
                ly = self.get_int(entry, "ly", epath, 0)
            elif layout == "ring":
                lx, ly = i, 0
            else:
                lx, ly = i % local_cols, i // local_cols
            if (lx, ly) in seen_pos:
                self.fail(
                    epath,
                    f"duplicate local position (lx={lx}, ly={ly}) in chiplet {name!r} (also "
                    f"{seen_pos[(lx, ly)]}); expected distinct positions",
                )
            seen_pos[(lx, ly)] = epath
            macs = self.cluster_macs(entry, epath)
            clusters.append(
                _ClusterSpec(
                    name=local,
                    macs=macs,
                    sram=self.get_int(entry, "sram_bytes", epath, 1),
                    bandwidth=self.get_number(
                        entry, "local_bandwidth", epath, positive=True, unit="bytes/cycle"
                    ),
                    lx=lx,
                    ly=ly,
                    mac_energy=self.mac_energy(entry, epath, list(macs)),
                    sram_energy=self.energy(
                        entry, "energy_pj_per_sram_byte", epath, "pJ per SRAM byte"
                    ),
                )
            )
        static_power = self.energy(tbl, "static_power_w", path, "watts per chiplet")
        return _ChipletSpec(path, name, x, y, layout, clusters, static_power)

    def local_cols(self, tbl: dict[str, Any], path: str, n: int, layout: str) -> int:
        if "local_cols" in tbl and layout != "mesh":
            self.fail(_join(path, "local_cols"), f"only valid with layout = 'mesh', not {layout!r}")
        rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
        cols = self.get_int(tbl, "local_cols", path, 1, default=n // rows)
        if n % cols:
            self.bad(
                _join(path, "local_cols"),
                cols,
                f"a divisor of the cluster count {n} so the local mesh is a full rectangle",
            )
        return cols

    def check_unique_chiplets(self, chiplets: list[_ChipletSpec]) -> None:
        names: dict[str, str] = {}
        coords: dict[tuple[int, int], str] = {}
        for spec in chiplets:
            if spec.name in names:
                self.fail(
                    spec.path,
                    f"duplicate chiplet name {spec.name!r} (also {names[spec.name]}); expected "
                    f"unique names",
                )
            if (spec.x, spec.y) in coords:
                self.fail(
                    spec.path,
                    f"duplicate coordinates (x={spec.x}, y={spec.y}) of chiplet {spec.name!r} "
                    f"(also {coords[(spec.x, spec.y)]}); expected one chiplet per position",
                )
            names[spec.name] = spec.path
            coords[(spec.x, spec.y)] = spec.path

    # -------------------------------------------------------------- references
    def chiplet_ref(self, value: Any, path: str, chiplets: list[_ChipletSpec]) -> _ChipletSpec:
        if isinstance(value, str):
            for spec in chiplets:
                if spec.name == value:
                    return spec
            names = [s.name for s in chiplets]
            close = difflib.get_close_matches(value, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self.fail(
                path,
                f"unknown chiplet {value!r}{hint}; expected one of {_preview(names)} or [x, y]",
            )
        if (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            for spec in chiplets:
                if (spec.x, spec.y) == tuple(value):
                    return spec
            coords = sorted((s.x, s.y) for s in chiplets)
            self.fail(
                path,
                f"no chiplet at coordinates {value}; expected one of "
                f"{_preview([list(c) for c in coords])}",
            )
        self.bad(path, value, "a chiplet name or an [x, y] coordinate pair")

    def node_refs(self, value: Any, path: str, chiplets: list[_ChipletSpec]) -> tuple[int, ...]:
        """Global cluster indices a reference covers: one cluster, or all of a chiplet's."""
        if isinstance(value, str) and "." in value:
            chip_name, local = value.split(".", 1)
            spec = self.chiplet_ref(chip_name, path, chiplets)
            for i, cluster in enumerate(spec.clusters):
                if cluster.name == local:
                    return (spec.first + i,)
            self.fail(
                path,
                f"chiplet {chip_name!r} has no cluster {local!r}; expected one of "
                f"{_preview([c.name for c in spec.clusters])}",
            )
        spec = self.chiplet_ref(value, path, chiplets)
        return tuple(range(spec.first, spec.first + len(spec.clusters)))

    def node_ref(self, value: Any, path: str, chiplets: list[_ChipletSpec]) -> int:
        """A single routing node: a cluster reference, or a chiplet's gateway."""
        return self.node_refs(value, path, chiplets)[0]

    # -------------------------------------------------------------- links
    def link_defaults(self, value: Any, kind: str) -> dict[str, Any]:
        tbl = self.table(value, kind, _LINK_DEFAULT_KEYS)
        params: dict[str, Any] = {"bandwidth": None, "latency": None, "energy": None}
        if "bandwidth" in tbl:
            params["bandwidth"] = self.get_number(
                tbl, "bandwidth", kind, positive=True, unit="bytes/cycle"
            )
        if "latency" in tbl:
            params["latency"] = self.get_number(tbl, "latency", kind, positive=False, unit="cycles")
        if "energy_pj_per_bit" in tbl:
            params["energy"] = self.energy(tbl, "energy_pj_per_bit", kind, "pJ per bit")
        params["auto"] = self.get_bool(tbl, "auto", kind)
        params["multicast"] = bool(self.get_bool(tbl, "multicast", kind))
        return params

    def link_params(
        self,
        tbl: dict[str, Any],
        path: str,
        kind: str,
        defaults: dict[str, dict[str, Any]],
        reason: str,
        energy_for: str,
    ) -> tuple[float, float, float | None, bool]:
        base = defaults[kind]
        if "bandwidth" in tbl:
            bandwidth = self.get_number(tbl, "bandwidth", path, positive=True, unit="bytes/cycle")
        elif base["bandwidth"] is None:
            self.fail(
                f"{kind}.bandwidth",
                f"missing; expected a number > 0 (bytes/cycle) because {reason}",
            )
        else:
            bandwidth = base["bandwidth"]
        if "latency" in tbl:
            latency = self.get_number(tbl, "latency", path, positive=False, unit="cycles")
        elif base["latency"] is None:
            self.fail(
                f"{kind}.latency", f"missing; expected a number >= 0 (cycles) because {reason}"
            )
        else:
            latency = base["latency"]
        if "energy_pj_per_bit" in tbl:
            energy = self.energy(tbl, "energy_pj_per_bit", path, "pJ per bit")
        else:
            energy = base["energy"]
            if energy is None:
                self.energy_absent(
                    f"{kind}.energy_pj_per_bit",
                    f"a number >= 0 (pJ per bit) for {energy_for}",
                )
        multicast = self.get_bool(tbl, "multicast", path)
        return bandwidth, latency, energy, base["multicast"] if multicast is None else multicast

    def explicit_links(
        self, value: Any, chiplets: list[_ChipletSpec], defaults: dict[str, dict[str, Any]]
    ) -> list[_LinkSpec]:
        owner = {}
        for spec in chiplets:
            for i in range(len(spec.clusters)):
                owner[spec.first + i] = spec
        links = []
        for path, tbl in self.array_of_tables(value, "link", _LINK_KEYS):
            for key in ("src", "dst"):
                self.missing(tbl, key, path, "a chiplet name, 'chiplet.cluster' or [x, y]")
            src = self.node_ref(tbl["src"], f"{path}.src", chiplets)
            dst = self.node_ref(tbl["dst"], f"{path}.dst", chiplets)
            if src == dst:
                self.fail(path, f"src and dst are the same node {tbl['src']!r}; expected two nodes")
            inferred = "noc" if owner[src] is owner[dst] else "nop"
            kind = self.get_str(tbl, "kind", path, inferred)
            if kind not in LINK_KINDS:
                self.bad(f"{path}.kind", kind, f"one of {', '.join(LINK_KINDS)}")
            if kind != inferred:
                where = "the same chiplet" if inferred == "noc" else "different chiplets"
                self.bad(f"{path}.kind", kind, f"{inferred!r}: the endpoints are on {where}")
            bandwidth, latency, energy, multicast = self.link_params(
                tbl,
                path,
                kind,
                defaults,
                f"{path} gives no {kind} bandwidth/latency",
                f"{path}, which gives none of its own",
            )
            bidirectional = self.get_bool(tbl, "bidirectional", path)
            links.append(_LinkSpec(src, dst, kind, bandwidth, latency, energy, multicast))
            if bidirectional is not False:
                links.append(_LinkSpec(dst, src, kind, bandwidth, latency, energy, multicast))
        return links

    def auto_links(
        self, kind: str, chiplets: list[_ChipletSpec], defaults: dict[str, dict[str, Any]]
    ) -> list[_LinkSpec]:
        pairs: list[tuple[int, int]] = []
        if kind == "noc":
            for spec in chiplets:
                pairs.extend((spec.first + a, spec.first + b) for a, b in _local_pairs(spec))
        else:
            at = {(s.x, s.y): s for s in chiplets}
            for spec in chiplets:
                for nx, ny in ((spec.x + 1, spec.y), (spec.x, spec.y + 1)):
                    if (nx, ny) in at:
                        pairs.append((spec.first, at[(nx, ny)].first))
        if not pairs:
            return []
        bandwidth, latency, energy, multicast = self.link_params(
            {},
            kind,
            kind,
            defaults,
            f"automatic {kind} links are generated",
            f"the automatic {kind} links",
        )
        links = []
        for a, b in pairs:
            links.append(_LinkSpec(a, b, kind, bandwidth, latency, energy, multicast))
            links.append(_LinkSpec(b, a, kind, bandwidth, latency, energy, multicast))
        return links

    # -------------------------------------------------------------- DRAM and faults
    def drams(self, value: Any, chiplets: list[_ChipletSpec]) -> list[_DramSpec]:
        result = []
        for path, tbl in self.array_of_tables(value, "dram", _DRAM_KEYS,
                                     "no DRAM controller; expected at least one [[dram]] entry"):
            self.missing(tbl, "chiplet", path, "a chiplet name or [x, y]")
            spec = self.chiplet_ref(tbl["chiplet"], f"{path}.chiplet", chiplets)
            local = tbl.get("cluster", 0)
            names = [c.name for c in spec.clusters]
            if isinstance(local, str) and local in names:
                index = names.index(local)
            elif isinstance(local, int) and not isinstance(local, bool) and 0 <= local < len(names):
                index = local
            else:
                self.bad(
                    f"{path}.cluster",
                    local,
                    f"a cluster of chiplet {spec.name!r}: one of {_preview(names)} or an index "
                    f"0..{len(names) - 1}",
                )
            bandwidth = self.get_number(tbl, "bandwidth", path, positive=True, unit="bytes/cycle")
            energy = self.energy(tbl, "energy_pj_per_bit", path, "pJ per bit")
            capacity = (self.get_int(tbl, "capacity_bytes", path, 1)
                        if "capacity_bytes" in tbl else None)
            result.append(_DramSpec(spec.first + index, bandwidth, energy, capacity))
        return result

    def faults(
        self, value: Any, chiplets: list[_ChipletSpec], links: list[_LinkSpec]
    ) -> tuple[set[int], set[int]]:
        """Faulty cluster indices and faulty link indices (pre-renumbering)."""
        tbl = self.table(value, "faults", _FAULT_KEYS)
        dead_nodes: set[int] = set()
        dead_links: set[int] = set()
        for key in _FAULT_KEYS:
            items = tbl.get(key, [])
            if not isinstance(items, list):
                self.bad(f"faults.{key}", items, "an array")
            for i, item in enumerate(items):
                path = f"faults.{key}[{i}]"
                if key == "chiplets":
                    spec = self.chiplet_ref(item, path, chiplets)
                    dead_nodes.update(range(spec.first, spec.first + len(spec.clusters)))
                elif key == "clusters":
                    if not isinstance(item, str) or "." not in item:
                        self.bad(path, item, "a cluster reference 'chiplet.cluster'")
                    dead_nodes.update(self.node_refs(item, path, chiplets))
                else:
                    if not isinstance(item, list) or len(item) != 2:
                        self.bad(path, item, "a pair [a, b] of chiplet or cluster references")
                    a = set(self.node_refs(item[0], f"{path}[0]", chiplets))
                    b = set(self.node_refs(item[1], f"{path}[1]", chiplets))
                    hit = {
                        j
                        for j, link in enumerate(links)
                        if (link.src in a and link.dst in b) or (link.src in b and link.dst in a)
                    }
                    if not hit:
                        self.fail(
                            path,
                            f"no link joins {item[0]!r} and {item[1]!r}; expected a pair of "
                            f"directly linked chiplets or clusters",
                        )
                    dead_links |= hit
        return dead_nodes, dead_links

    # -------------------------------------------------------------- assembly
    def assemble(
        self,
        name: str,
        description: str,
        frequency: float,
        chiplets: list[_ChipletSpec],
        links: list[_LinkSpec],
        drams: list[_DramSpec],
        faults: tuple[set[int], set[int]],
    ) -> ChipletSystem:
        dead_nodes, dead_links = faults
        has_energy = self.energy_given is not None
        new_id: dict[int, int] = {}
        out_chiplets: list[Chiplet] = []
        out_clusters: list[Cluster] = []
        for spec in chiplets:
            members = []
            for i, c in enumerate(spec.clusters):
                old = spec.first + i
                if old in dead_nodes:
                    continue
                new_id[old] = len(out_clusters)
                members.append(len(out_clusters))
                out_clusters.append(
                    Cluster(
                        id=len(out_clusters),
                        chiplet=len(out_chiplets),
                        name=f"{spec.name}.{c.name}",
                        macs_per_cycle=c.macs[self.dtype],
                        sram_bytes=c.sram,
                        local_bandwidth=c.bandwidth,
                        lx=c.lx,
                        ly=c.ly,
                        macs=tuple(c.macs.items()),
                        mac_energy_pj=tuple(c.mac_energy.items()) if has_energy else (),
                        sram_energy_pj_per_byte=c.sram_energy if has_energy else 0.0,
                    )
                )
            if members:
                out_chiplets.append(
                    Chiplet(
                        len(out_chiplets),
                        spec.name,
                        spec.x,
                        spec.y,
                        tuple(members),
                        static_power_w=spec.static_power if has_energy else 0.0,
                    )
                )
        if not out_clusters:
            self.fail("faults", "every cluster is faulty; expected at least one working cluster")
        out_links = []
        for j, link in enumerate(links):
            if j in dead_links or link.src not in new_id or link.dst not in new_id:
                continue
            out_links.append(
                Link(
                    len(out_links),
                    new_id[link.src],
                    new_id[link.dst],
                    link.kind,
                    link.bandwidth,
                    link.latency,
                    energy_pj_per_bit=link.energy if has_energy else 0.0,
                    multicast=link.multicast,
                )
            )
        out_drams = [
            Dram(
                i,
                new_id[dram.node],
                dram.bandwidth,
                energy_pj_per_bit=dram.energy if has_energy else 0.0,
                capacity_bytes=dram.capacity,
            )
            for i, dram in enumerate(d for d in drams if d.node in new_id)
        ]
        if not out_drams:
            self.fail(
                "faults",
                "every DRAM controller sits on a faulty part; expected at least one to survive",
            )
        self.check_connected(out_clusters, out_links, bool(dead_nodes or dead_links))
        return ChipletSystem(
            name=name,
            description=description,
            frequency_hz=frequency,
            chiplets=tuple(out_chiplets),
            clusters=tuple(out_clusters),
            links=tuple(out_links),
            drams=tuple(out_drams),
            source=self.source,
            device_dtype=self.dtype,
            has_energy=has_energy,
            accumulator_bytes=self.accumulators,
            multicast_orders=self.multicast_orders,
        )

    def check_connected(self, clusters: list[Cluster], links: list[Link], faulty: bool) -> None:
        """Refuse a system whose clusters cannot all reach each other, naming its islands: the
        groups of clusters that reach each other (strongly connected components), each given
        by its whole chiplets' names and any lone clusters'."""
        graph = nx.DiGraph()
        graph.add_nodes_from(c.id for c in clusters)
        graph.add_edges_from((link.src, link.dst) for link in links)
        if nx.is_strongly_connected(graph):
            return
        islands = sorted(sorted(part) for part in nx.strongly_connected_components(graph))
        described = "; ".join(f"{{{_island_names(clusters, island)}}}" for island in islands)
        one_way = ", one-way links only between them" if nx.is_weakly_connected(graph) else ""
        cause = "after removing [faults]" if faulty else "with the links given"
        self.fail(
            "link" if not faulty else "faults",
            f"the system is disconnected {cause}: it splits into {len(islands)} islands "
            f"whose clusters cannot reach each other{one_way}: {described}; expected every "
            f"cluster to reach every other (add links or remove fewer parts)",
        )


def _island_names(clusters: list[Cluster], island: list[int]) -> str:
    """An island's parts: a chiplet's name where all of its surviving clusters are in it."""
    members = set(island)
    by_chiplet: dict[int, list[Cluster]] = {}
    for cluster in clusters:
        by_chiplet.setdefault(cluster.chiplet, []).append(cluster)
    names = []
    for group in by_chiplet.values():
        inside = [c for c in group if c.id in members]
        if len(inside) == len(group):
            names.append(group[0].name.split(".", 1)[0])
        else:
            names.extend(c.name for c in inside)
    shown = ", ".join(names[:12])
    return shown + (f", ... ({len(names)} in all)" if len(names) > 12 else "")


def _local_pairs(spec: _ChipletSpec) -> list[tuple[int, int]]:
    """Undirected local ``noc`` pairs (local indices) of a chiplet, in a fixed order."""
    n = len(spec.clusters)
    if spec.layout == "ring":
        pairs = [(i, i + 1) for i in range(n - 1)]
        if n > 2:
            pairs.append((n - 1, 0))
        return pairs
    at = {(c.lx, c.ly): i for i, c in enumerate(spec.clusters)}
    pairs = []
    for i, c in enumerate(spec.clusters):
        for pos in ((c.lx + 1, c.ly), (c.lx, c.ly + 1)):
            if pos in at:
                pairs.append((i, at[pos]))
    return pairs


__all__ = [
    "PRESET_DIR",
    "list_presets",
    "load_preset",
    "load_system",
    "preset_names",
    "system_from_dict",
    "system_from_toml",
]

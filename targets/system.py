"""The chiplet system model: dataclasses, the TOML schema, validation and presets.

A :class:`ChipletSystem` is a graph. Its routing nodes are the compute **clusters** (global ids
``0..N-1``, numbered chiplet by chiplet, and inside a chiplet in listing order). Clusters sit on
**chiplets** placed at integer mesh coordinates ``(x, y)``; inside a chiplet the clusters form a
small local mesh (or a ring, or a single node) joined by ``noc`` links; chiplets are joined by
``nop`` (network-on-package) links between their *gateway* clusters (the first cluster of each
chiplet). **DRAM** controllers hang off routing nodes. Units: bandwidth in bytes per cycle,
latency in cycles, both at the system clock ``frequency_hz``.

TOML schema
-----------
Two forms describe the chiplets; a file uses exactly one of them.

Compact form (a grid shorthand)::

    [system]
    name = "mesh-4x4"              # required; letters, digits, '-', '_'
    description = "..."            # optional one-line text
    frequency_hz = 1.0e9           # required, > 0: the clock every cycle count refers to

    [grid]
    rows = 4                       # required, >= 1 (y runs over rows)
    cols = 4                       # required, >= 1 (x runs over cols)

    [grid.chiplet]                 # template applied to every grid position
    name = "x{x}y{y}"              # optional format string (default shown)
    layout = "mesh"                # "mesh" (default) or "ring": how clusters are linked
    local_cols = 2                 # mesh only: clusters per local row (default: most square)

    [grid.chiplet.cluster]         # one table, or an array [[grid.chiplet.cluster]]
    count = 4                      # optional, default 1: repeat this entry
    name = "k0"                    # optional (only with count = 1); default "k<i>"
    macs_per_cycle = 1024          # required integer > 0: MAC units (2 FLOPs each per cycle)
    sram_bytes = 2097152           # required integer > 0: local scratchpad
    local_bandwidth = 256.0        # required > 0: bytes/cycle between the cluster and its SRAM

Explicit form (list every chiplet)::

    [[chiplet]]
    name = "left"                  # optional, default "x<x>y<y>"
    x = 0                          # required integer >= 0
    y = 0                          # required integer >= 0
    layout = "mesh"                # as in the template; local_cols too
    [[chiplet.cluster]]            # as in the template; may also give "lx"/"ly" (integers
    macs_per_cycle = 1024          # >= 0), the local mesh position, for every cluster or none
    sram_bytes = 2097152
    local_bandwidth = 256.0

Sections shared by both forms::

    [noc]                          # defaults for links inside a chiplet
    bandwidth = 64.0               # > 0 bytes/cycle per direction
    latency = 2.0                  # >= 0 cycles per hop
    auto = true                    # generate the local mesh/ring links (see below)

    [nop]                          # defaults for links between chiplets; same keys as [noc]

    [[link]]                       # explicit links (directed pairs unless bidirectional = false)
    src = "x0y0"                   # a chiplet name (its gateway cluster), "chiplet.cluster",
    dst = "x1y0.k1"                #   or [x, y] (the gateway of the chiplet at that position)
    kind = "nop"                   # optional; inferred ("noc" within a chiplet, else "nop")
    bandwidth = 32.0               # optional, default from [noc] / [nop]
    latency = 10.0                 # optional, default from [noc] / [nop]
    bidirectional = true           # optional, default true: also add dst -> src

    [[dram]]                       # at least one controller is required
    chiplet = "x0y1"               # chiplet name or [x, y]
    cluster = "k0"                 # optional local cluster name or index, default the gateway
    bandwidth = 51.2               # > 0 bytes/cycle

    [faults]                       # parts removed before use; names keep their meaning
    chiplets = ["x1y1", [2, 3]]    # chiplet names or [x, y]
    clusters = ["x0y0.k3"]         # "chiplet.cluster"
    links = [["x0y0", "x1y0"]]     # endpoint pairs (chiplet or cluster references): every link
                                   # between the two, in both directions, is removed

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

import difflib
import math
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from tvm_chiplet.targets.topology import Topology

PRESET_DIR = Path(__file__).resolve().parent / "presets"
PRESET_PREFIX = "chiplet/"
LINK_KINDS = ("noc", "nop")
LAYOUTS = ("mesh", "ring")

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_ROOT_KEYS = ("system", "grid", "chiplet", "noc", "nop", "link", "dram", "faults")
_SYSTEM_KEYS = ("name", "description", "frequency_hz")
_GRID_KEYS = ("rows", "cols", "chiplet")
_TEMPLATE_KEYS = ("name", "layout", "local_cols", "cluster")
_CHIPLET_KEYS = ("name", "x", "y", "layout", "local_cols", "cluster")
_CLUSTER_KEYS = ("name", "count", "macs_per_cycle", "sram_bytes", "local_bandwidth", "lx", "ly")
_LINK_DEFAULT_KEYS = ("bandwidth", "latency", "auto")
_LINK_KEYS = ("src", "dst", "kind", "bandwidth", "latency", "bidirectional")
_DRAM_KEYS = ("chiplet", "cluster", "bandwidth")
_FAULT_KEYS = ("chiplets", "clusters", "links")


class SystemConfigError(ValueError):
    """A chiplet system description is invalid; the message names file, field and fix."""


@dataclass(frozen=True)
class Cluster:
    """A compute cluster: a routing node with MAC units and a local SRAM.

    Attributes
    ----------
    id : int
        Global cluster id (index into ``ChipletSystem.clusters``).
    chiplet : int
        Id of the chiplet the cluster sits on.
    name : str
        ``"<chiplet>.<cluster>"``, stable across fault renumbering.
    macs_per_cycle : int
        Multiply-accumulate units; one MAC is two FLOPs.
    sram_bytes : int
        Local scratchpad capacity.
    local_bandwidth : float
        Bytes per cycle between the MAC array and the local SRAM.
    lx, ly : int
        Position in the chiplet's local mesh (``(0, 0)`` is the gateway's corner).
    """

    id: int
    chiplet: int
    name: str
    macs_per_cycle: int
    sram_bytes: int
    local_bandwidth: float
    lx: int = 0
    ly: int = 0


@dataclass(frozen=True)
class Chiplet:
    """A die at mesh coordinates ``(x, y)`` holding clusters; ``clusters[0]`` is its gateway."""

    id: int
    name: str
    x: int
    y: int
    clusters: tuple[int, ...]

    @property
    def gateway(self) -> int:
        """Cluster id through which automatic ``nop`` links enter and leave the chiplet."""
        return self.clusters[0]


@dataclass(frozen=True)
class Link:
    """A directed link between routing nodes (cluster ids); bytes/cycle and cycles."""

    id: int
    src: int
    dst: int
    kind: str
    bandwidth: float
    latency: float


@dataclass(frozen=True)
class Dram:
    """A DRAM controller attached to routing node ``node`` with ``bandwidth`` bytes/cycle."""

    id: int
    node: int
    bandwidth: float


@dataclass(frozen=True)
class ChipletSystem:
    """A whole chiplet system. Build it with :meth:`from_toml`, :meth:`from_dict` or
    :func:`load_system`; ids of clusters, chiplets, links and DRAMs equal their tuple index.

    Attributes
    ----------
    name, description : str
        Identity and one-line description.
    frequency_hz : float
        Clock that every cycle figure of the system (and of the cost model) refers to.
    chiplets, clusters, links, drams : tuple
        The parts, each indexed by id.
    source : str
        Where the description came from (a file path, a preset, ``"<dict>"``); not compared.
    """

    name: str
    description: str
    frequency_hz: float
    chiplets: tuple[Chiplet, ...]
    clusters: tuple[Cluster, ...]
    links: tuple[Link, ...]
    drams: tuple[Dram, ...]
    source: str = field(default="<dict>", compare=False)

    def __post_init__(self) -> None:
        for kind, items in (
            ("chiplets", self.chiplets),
            ("clusters", self.clusters),
            ("links", self.links),
            ("drams", self.drams),
        ):
            for index, item in enumerate(items):
                if item.id != index:
                    raise SystemConfigError(
                        f"{self.source}: {kind}[{index}] has id {item.id}: expected ids equal "
                        f"to positions; build systems with ChipletSystem.from_dict"
                    )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_toml(cls, path: str | Path) -> ChipletSystem:
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
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> ChipletSystem:
        """Validate a parsed description (the TOML schema as Python data) and build the system."""
        return _Builder(source).build(data)

    def to_dict(self) -> dict[str, Any]:
        """Explicit-form description that :meth:`from_dict` turns back into an equal system.

        Faults are already applied, so the result lists only surviving parts, with every link
        explicit and automatic link generation switched off. It is JSON- and TOML-serialisable.
        """
        chiplets = []
        for chiplet in self.chiplets:
            clusters = []
            for cid in chiplet.clusters:
                cluster = self.clusters[cid]
                clusters.append(
                    {
                        "name": _local_name(cluster.name),
                        "macs_per_cycle": cluster.macs_per_cycle,
                        "sram_bytes": cluster.sram_bytes,
                        "local_bandwidth": cluster.local_bandwidth,
                        "lx": cluster.lx,
                        "ly": cluster.ly,
                    }
                )
            chiplets.append(
                {"name": chiplet.name, "x": chiplet.x, "y": chiplet.y, "cluster": clusters}
            )
        links = [
            {
                "src": self.clusters[link.src].name,
                "dst": self.clusters[link.dst].name,
                "kind": link.kind,
                "bandwidth": link.bandwidth,
                "latency": link.latency,
                "bidirectional": False,
            }
            for link in self.links
        ]
        drams = [
            {
                "chiplet": self.chiplets[self.clusters[dram.node].chiplet].name,
                "cluster": _local_name(self.clusters[dram.node].name),
                "bandwidth": dram.bandwidth,
            }
            for dram in self.drams
        ]
        return {
            "system": {
                "name": self.name,
                "description": self.description,
                "frequency_hz": self.frequency_hz,
            },
            "noc": {"auto": False},
            "nop": {"auto": False},
            "chiplet": chiplets,
            "link": links,
            "dram": drams,
        }

    # ------------------------------------------------------------------ queries
    @property
    def num_clusters(self) -> int:
        """Number of clusters (routing nodes)."""
        return len(self.clusters)

    @property
    def peak_macs_per_cycle(self) -> int:
        """MAC units summed over every cluster."""
        return sum(c.macs_per_cycle for c in self.clusters)

    @property
    def total_sram_bytes(self) -> int:
        """SRAM bytes summed over every cluster."""
        return sum(c.sram_bytes for c in self.clusters)

    @cached_property
    def topology(self) -> Topology:
        """The routing view of this system, built once per system object."""
        from tvm_chiplet.targets.topology import Topology

        return Topology(self)

    def chiplet_of(self, cluster: int) -> Chiplet:
        """The chiplet holding cluster id ``cluster``."""
        return self.chiplets[self.clusters[cluster].chiplet]

    def find_cluster(self, name: str) -> Cluster:
        """The cluster called ``name`` (``"chiplet.cluster"``); raises listing a few names."""
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        known = [c.name for c in self.clusters]
        raise SystemConfigError(
            f"{self.source}: no cluster named {name!r}; expected one of {_preview(known)}"
        )

    def stats(self) -> str:
        """Counts and peaks in one line, without the name."""
        xs = [c.x for c in self.chiplets]
        ys = [c.y for c in self.chiplets]
        rows, cols = max(ys) - min(ys) + 1, max(xs) - min(xs) + 1
        tops = 2.0 * self.peak_macs_per_cycle * self.frequency_hz / 1e12
        dram_bw = sum(d.bandwidth for d in self.drams)
        return (
            f"{_count(len(self.chiplets), 'chiplet')} on a {rows}x{cols} grid, "
            f"{_count(self.num_clusters, 'cluster')}, {self.peak_macs_per_cycle} MACs/cycle at "
            f"{self.frequency_hz / 1e9:.2f} GHz ({tops:.1f} TOPS), "
            f"{self.total_sram_bytes / 2**20:.1f} MiB SRAM, "
            f"{_count(len(self.drams), 'DRAM controller')} ({dram_bw:g} B/cycle)"
        )

    def summary(self) -> str:
        """One-line description: name, counts and peaks."""
        return f"{self.name}: {self.stats()}"


# ---------------------------------------------------------------------- presets
def preset_names() -> list[str]:
    """Names of the bundled presets, sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def list_presets() -> list[tuple[str, str]]:
    """``(name, one-line summary)`` of every bundled preset, sorted by name."""
    result = []
    for name in preset_names():
        system = ChipletSystem.from_toml(PRESET_DIR / f"{name}.toml")
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
        return ChipletSystem.from_toml(name_or_path)
    text = str(name_or_path)
    candidate = Path(text)
    if text.endswith(".toml") or "/" in text.removeprefix(PRESET_PREFIX) or candidate.is_file():
        return ChipletSystem.from_toml(candidate)
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
    return ChipletSystem.from_toml(PRESET_DIR / f"{bare}.toml")


# ---------------------------------------------------------------------- parsing
def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _local_name(full_name: str) -> str:
    return full_name.split(".", 1)[1]


def _preview(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@dataclass
class _ClusterSpec:
    name: str
    macs: int
    sram: int
    bandwidth: float
    lx: int
    ly: int


@dataclass
class _ChipletSpec:
    path: str
    name: str
    x: int
    y: int
    layout: str
    clusters: list[_ClusterSpec]
    first: int = 0  # global index of the first cluster, set once all chiplets are known


@dataclass
class _LinkSpec:
    src: int
    dst: int
    kind: str
    bandwidth: float
    latency: float


class _Builder:
    """One validation run over a parsed description; holds nothing beyond that run."""

    def __init__(self, source: str) -> None:
        self.source = source

    # -------------------------------------------------------------- error helpers
    def fail(self, path: str, message: str) -> NoReturn:
        raise SystemConfigError(f"{self.source}: {path}: {message}")

    def bad(self, path: str, value: Any, expected: str) -> NoReturn:
        self.fail(path, f"found {value!r}; expected {expected}")

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
        self, tbl: dict[str, Any], key: str, path: str, minimum: int, default: int | None = None
    ) -> int:
        expected = f"an integer >= {minimum}"
        if key not in tbl:
            if default is None:
                self.missing(tbl, key, path, expected)
            return default
        value = tbl[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
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
        faults = self.faults(data.get("faults", {}), chiplets, links)
        return self.assemble(name, description, frequency, chiplets, links, drams, faults)

    # -------------------------------------------------------------- chiplets
    def grid_chiplets(self, value: Any) -> list[_ChipletSpec]:
        grid = self.table(value, "grid", _GRID_KEYS)
        rows = self.get_int(grid, "rows", "grid", 1)
        cols = self.get_int(grid, "cols", "grid", 1)
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
                spec.path = f"grid.chiplet at (x={x}, y={y})"
                chiplets.append(spec)
        return chiplets

    def explicit_chiplets(self, value: Any) -> list[_ChipletSpec]:
        if not isinstance(value, list):
            self.bad("chiplet", value, "an array of tables [[chiplet]]")
        if not value:
            self.fail("chiplet", "empty list; expected at least one [[chiplet]]")
        chiplets = []
        for i, item in enumerate(value):
            path = f"chiplet[{i}]"
            tbl = self.table(item, path, _CHIPLET_KEYS)
            x = self.get_int(tbl, "x", path, 0)
            y = self.get_int(tbl, "y", path, 0)
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
            count = self.get_int(entry, "count", epath, 1, default=1)
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
            clusters.append(
                _ClusterSpec(
                    name=local,
                    macs=self.get_int(entry, "macs_per_cycle", epath, 1),
                    sram=self.get_int(entry, "sram_bytes", epath, 1),
                    bandwidth=self.get_number(
                        entry, "local_bandwidth", epath, positive=True, unit="bytes/cycle"
                    ),
                    lx=lx,
                    ly=ly,
                )
            )
        return _ChipletSpec(path, name, x, y, layout, clusters)

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
        params: dict[str, Any] = {"bandwidth": None, "latency": None}
        if "bandwidth" in tbl:
            params["bandwidth"] = self.get_number(
                tbl, "bandwidth", kind, positive=True, unit="bytes/cycle"
            )
        if "latency" in tbl:
            params["latency"] = self.get_number(tbl, "latency", kind, positive=False, unit="cycles")
        params["auto"] = self.get_bool(tbl, "auto", kind)
        return params

    def link_params(
        self,
        tbl: dict[str, Any],
        path: str,
        kind: str,
        defaults: dict[str, dict[str, Any]],
        reason: str,
    ) -> tuple[float, float]:
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
        return bandwidth, latency

    def explicit_links(
        self, value: Any, chiplets: list[_ChipletSpec], defaults: dict[str, dict[str, Any]]
    ) -> list[_LinkSpec]:
        if not isinstance(value, list):
            self.bad("link", value, "an array of tables [[link]]")
        owner = {}
        for spec in chiplets:
            for i in range(len(spec.clusters)):
                owner[spec.first + i] = spec
        links = []
        for i, item in enumerate(value):
            path = f"link[{i}]"
            tbl = self.table(item, path, _LINK_KEYS)
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
            bandwidth, latency = self.link_params(
                tbl, path, kind, defaults, f"{path} gives no {kind} bandwidth/latency"
            )
            bidirectional = self.get_bool(tbl, "bidirectional", path)
            links.append(_LinkSpec(src, dst, kind, bandwidth, latency))
            if bidirectional is not False:
                links.append(_LinkSpec(dst, src, kind, bandwidth, latency))
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
        bandwidth, latency = self.link_params(
            {}, kind, kind, defaults, f"automatic {kind} links are generated"
        )
        links = []
        for a, b in pairs:
            links.append(_LinkSpec(a, b, kind, bandwidth, latency))
            links.append(_LinkSpec(b, a, kind, bandwidth, latency))
        return links

    # -------------------------------------------------------------- DRAM and faults
    def drams(self, value: Any, chiplets: list[_ChipletSpec]) -> list[tuple[int, float]]:
        if not isinstance(value, list):
            self.bad("dram", value, "an array of tables [[dram]]")
        if not value:
            self.fail("dram", "no DRAM controller; expected at least one [[dram]] entry")
        result = []
        for i, item in enumerate(value):
            path = f"dram[{i}]"
            tbl = self.table(item, path, _DRAM_KEYS)
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
            result.append((spec.first + index, bandwidth))
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
        drams: list[tuple[int, float]],
        faults: tuple[set[int], set[int]],
    ) -> ChipletSystem:
        dead_nodes, dead_links = faults
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
                        macs_per_cycle=c.macs,
                        sram_bytes=c.sram,
                        local_bandwidth=c.bandwidth,
                        lx=c.lx,
                        ly=c.ly,
                    )
                )
            if members:
                out_chiplets.append(
                    Chiplet(len(out_chiplets), spec.name, spec.x, spec.y, tuple(members))
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
                )
            )
        out_drams = [
            Dram(i, new_id[node], bandwidth)
            for i, (node, bandwidth) in enumerate((n, b) for n, b in drams if n in new_id)
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
        )

    def check_connected(self, clusters: list[Cluster], links: list[Link], faulty: bool) -> None:
        forward: dict[int, list[int]] = {c.id: [] for c in clusters}
        backward: dict[int, list[int]] = {c.id: [] for c in clusters}
        for link in links:
            forward[link.src].append(link.dst)
            backward[link.dst].append(link.src)
        for adjacency, direction in ((forward, "be reached from"), (backward, "reach")):
            seen = {0}
            stack = [0]
            while stack:
                for nxt in adjacency[stack.pop()]:
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            if len(seen) < len(clusters):
                lost = [c.name for c in clusters if c.id not in seen]
                cause = "after removing [faults]" if faulty else "with the links given"
                self.fail(
                    "link" if not faulty else "faults",
                    f"the system is disconnected {cause}: {_preview(lost)} cannot {direction} "
                    f"{clusters[0].name!r}; expected every cluster to reach every other "
                    f"(add links or remove fewer parts)",
                )


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
    "Chiplet",
    "ChipletSystem",
    "Cluster",
    "Dram",
    "Link",
    "SystemConfigError",
    "list_presets",
    "load_preset",
    "load_system",
    "preset_names",
]

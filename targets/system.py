"""The chiplet system model: the dataclasses of clusters, chiplets, links, DRAMs and systems.

A :class:`ChipletSystem` is a graph. Its routing nodes are the compute **clusters** (global ids
``0..N-1``, numbered chiplet by chiplet, and inside a chiplet in listing order). Clusters sit on
**chiplets** placed at integer mesh coordinates ``(x, y)``; inside a chiplet the clusters form a
small local mesh (or a ring, or a single node) joined by ``noc`` links; chiplets are joined by
``nop`` (network-on-package) links between their *gateway* clusters (the first cluster of each
chiplet). **DRAM** controllers hang off routing nodes. Units: bandwidth in bytes per cycle,
latency in cycles, both at the system clock ``frequency_hz``.

Systems are described in TOML (or the same schema as Python data) and read, validated and
looked up among the bundled presets by :mod:`tvm_chiplet.targets.system_toml`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tvm_chiplet.targets.topology import Topology

LINK_KINDS = ("noc", "nop")
DTYPE_BYTES = {"int8": 1, "fp16": 2, "bf16": 2, "fp32": 4}
DEVICE_DTYPES = tuple(DTYPE_BYTES)
MULTICAST_ORDERS = ("xy", "yx")
"""The orders a multicast tree may take its grid legs in (X then Y, Y then X) unless a system
says otherwise (``[system] multicast_orders``; see :mod:`~tvm_chiplet.targets.topology`)."""
ACCUMULATOR_BYTES = 4
"""Bytes of an accumulator unless a system says otherwise (``[system] accumulator_bytes``):
int32 for int8 MACs, fp32 for fp16, bf16 and fp32 MACs."""


def partial_sum_width(device_dtype: str, accumulators: Mapping[str, int] | None = None) -> int:
    """Bytes per element of a partial sum at ``device_dtype``: the parts of a split along input
    channels (or a matmul's reduction) are summed at the accumulators' width (``accumulators``:
    bytes per dtype, :data:`ACCUMULATOR_BYTES` for the others), so they are held and sent at
    it, never narrower than the dtype (an int8 partial sum is 4 bytes by default)."""
    return max(DTYPE_BYTES[device_dtype],
               (accumulators or {}).get(device_dtype, ACCUMULATOR_BYTES))


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
        MACs per cycle at the system's device dtype in force; one MAC is two FLOPs.
    sram_bytes : int
        Local scratchpad capacity.
    local_bandwidth : float
        Bytes per cycle between the MAC array and the local SRAM.
    lx, ly : int
        Position in the chiplet's local mesh (``(0, 0)`` is the gateway's corner).
    macs : tuple of (str, int)
        Every dtype the cluster computes with its MACs/cycle, in :data:`DEVICE_DTYPES` order.
    mac_energy_pj : tuple of (str, float)
        pJ per MAC for each dtype in ``macs``; empty when the system declares no energy.
    sram_energy_pj_per_byte : float
        pJ per byte read from or written to the local SRAM.
    """

    id: int
    chiplet: int
    name: str
    macs_per_cycle: int
    sram_bytes: int
    local_bandwidth: float
    lx: int = 0
    ly: int = 0
    macs: tuple[tuple[str, int], ...] = ()
    mac_energy_pj: tuple[tuple[str, float], ...] = ()
    sram_energy_pj_per_byte: float = 0.0

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes the cluster computes, in :data:`DEVICE_DTYPES` order."""
        return tuple(dtype for dtype, _ in self.macs)

    def supports(self, dtype: str) -> bool:
        """Whether the cluster computes ``dtype``."""
        return dtype in self.dtypes

    def macs_for(self, dtype: str) -> int:
        """MACs/cycle at ``dtype``; raises naming the dtypes the cluster supports."""
        self._check(dtype)
        return dict(self.macs)[dtype]

    def mac_energy(self, dtype: str) -> float:
        """pJ per MAC at ``dtype`` (0 when the system declares no energy)."""
        self._check(dtype)
        return dict(self.mac_energy_pj).get(dtype, 0.0)

    def _check(self, dtype: str) -> None:
        if dtype not in DTYPE_BYTES:
            raise SystemConfigError(
                f"unknown dtype {dtype!r}; expected one of {', '.join(DEVICE_DTYPES)}"
            )
        if not self.supports(dtype):
            raise SystemConfigError(
                f"cluster {self.name!r} does not compute {dtype}; it supports "
                f"{', '.join(self.dtypes) or 'no dtype'}"
            )


@dataclass(frozen=True)
class Chiplet:
    """A die at mesh coordinates ``(x, y)`` holding clusters; ``clusters[0]`` is its gateway."""

    id: int
    name: str
    x: int
    y: int
    clusters: tuple[int, ...]
    static_power_w: float = 0.0

    @property
    def gateway(self) -> int:
        """Cluster id through which automatic ``nop`` links enter and leave the chiplet."""
        return self.clusters[0]


@dataclass(frozen=True)
class Link:
    """A directed link between routing nodes (cluster ids); bytes/cycle, cycles, pJ per bit.

    ``multicast``: the router driving the link replicates packets, so a value sent to several
    clusters crosses it once (see :func:`~tvm_chiplet.targets.workload.build_workload`).
    """

    id: int
    src: int
    dst: int
    kind: str
    bandwidth: float
    latency: float
    energy_pj_per_bit: float = 0.0
    multicast: bool = False


@dataclass(frozen=True)
class Dram:
    """A DRAM controller at routing node ``node``: ``bandwidth`` bytes/cycle, pJ per bit moved,
    and the bytes of memory behind it (``capacity_bytes``; None when the system does not say,
    which the planners take as room for any model)."""

    id: int
    node: int
    bandwidth: float
    energy_pj_per_bit: float = 0.0
    capacity_bytes: int | None = None


CALIBRATED_KINDS = (*LINK_KINDS, "dram")
"""What a :class:`FlowCalibration` rates: on-chip links, die-to-die links, DRAM controllers."""


@dataclass(frozen=True)
class FlowCalibration:
    """Efficiencies that bring the ``flow`` network model to the ``flit`` model's timing.

    The flow model shares each link's bandwidth max-min fairly; routers with finite buffers and
    allocators lose more under contention. ``efficiency`` scales the bandwidth the flow model
    gives each link of a kind (``noc``, ``nop``, or a ``dram`` controller), as fitted on
    ``workload`` against the flit model, where flow then came within ``flit_error`` (the largest
    relative difference in total cycles). ``fingerprint`` is the
    :meth:`ChipletSystem.network_fingerprint` of the system it was measured on.
    """

    efficiency: tuple[tuple[str, float], ...]
    flit_error: float
    workload: str
    fingerprint: str

    def factor(self, kind: str) -> float:
        """The efficiency of links of ``kind`` (1.0 when not calibrated)."""
        return dict(self.efficiency).get(kind, 1.0)

    def summary(self) -> str:
        """``"nop x0.87, dram x0.95; within 3.1% of flit on resnet50 (8 inputs)"``."""
        parts = ", ".join(f"{kind} x{eta:.3g}" for kind, eta in self.efficiency)
        return f"{parts}; within {100 * self.flit_error:.1f}% of flit on {self.workload}"

    def to_dict(self) -> dict[str, Any]:
        return {"flow_efficiency": dict(self.efficiency), "flit_error": self.flit_error,
                "workload": self.workload, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class ChipletSystem:
    """A whole chiplet system. Build it with :meth:`from_toml`, :meth:`from_dict` or
    :func:`~tvm_chiplet.targets.system_toml.load_system`; ids of clusters, chiplets, links and
    DRAMs equal their tuple index.

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
    device_dtype : str
        The dtype the device model computes and stores in; starts as the file's default
        dtype. Change it with :meth:`with_device_dtype`.
    has_energy : bool
        True when the description declares energy coefficients (else they are all 0).
    calibration : FlowCalibration or None
        How the ``flow`` network model is corrected towards the ``flit`` model; not compared.
    accumulator_bytes : tuple of (dtype, bytes)
        The width of the accumulators of MACs at each listed dtype (``[system]
        accumulator_bytes``); the others are :data:`ACCUMULATOR_BYTES` wide.
    multicast_orders : tuple of str
        The orders its multicasting routers build trees in (``[system] multicast_orders``,
        :data:`MULTICAST_ORDERS` by default).
    """

    name: str
    description: str
    frequency_hz: float
    chiplets: tuple[Chiplet, ...]
    clusters: tuple[Cluster, ...]
    links: tuple[Link, ...]
    drams: tuple[Dram, ...]
    source: str = field(default="<dict>", compare=False)
    device_dtype: str = "fp32"
    has_energy: bool = False
    calibration: FlowCalibration | None = field(default=None, compare=False)
    accumulator_bytes: tuple[tuple[str, int], ...] = ()
    multicast_orders: tuple[str, ...] = MULTICAST_ORDERS

    @property
    def partial_sum_bytes(self) -> int:
        """Bytes per element of a partial sum at the device dtype (:func:`partial_sum_width`)."""
        return partial_sum_width(self.device_dtype, dict(self.accumulator_bytes))

    @property
    def partial_sum_scale(self) -> float:
        """A partial sum's bytes over those of the same value at the device dtype."""
        return self.partial_sum_bytes / DTYPE_BYTES[self.device_dtype]

    def __post_init__(self) -> None:
        if self.device_dtype not in DTYPE_BYTES:
            raise SystemConfigError(
                f"{self.source}: unknown device dtype {self.device_dtype!r}; expected one of "
                f"{', '.join(DEVICE_DTYPES)}"
            )
        for cluster in self.clusters:
            if cluster.macs and cluster.macs_per_cycle != dict(cluster.macs).get(self.device_dtype):
                raise SystemConfigError(
                    f"{self.source}: cluster {cluster.name!r} has macs_per_cycle "
                    f"{cluster.macs_per_cycle}, not its rate at the device dtype "
                    f"{self.device_dtype} ({dict(cluster.macs).get(self.device_dtype)}); "
                    f"switch dtypes with ChipletSystem.with_device_dtype"
                )
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
        """Read and validate a system TOML file (the schema: :mod:`.system_toml`)."""
        from tvm_chiplet.targets.system_toml import system_from_toml

        return system_from_toml(path)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> ChipletSystem:
        """Validate a parsed description (the TOML schema as Python data) and build the system."""
        from tvm_chiplet.targets.system_toml import system_from_dict

        return system_from_dict(data, source)

    def to_dict(self) -> dict[str, Any]:
        """Explicit-form description that :meth:`from_dict` turns back into an equal system.

        Faults are already applied, so the result lists only surviving parts, with every link
        explicit and automatic link generation switched off. The default dtype written is the
        device dtype in force, and every cluster lists its rates per dtype, so the round trip
        keeps a dtype chosen with :meth:`with_device_dtype`. Energy coefficients are written
        when the system has them. It is JSON- and TOML-serialisable.
        """
        energy = self.has_energy
        chiplets = []
        for chiplet in self.chiplets:
            clusters = []
            for cid in chiplet.clusters:
                cluster = self.clusters[cid]
                entry: dict[str, Any] = {
                    "name": _local_name(cluster.name),
                    "macs_per_cycle": (
                        cluster.macs_per_cycle if len(cluster.macs) <= 1 else dict(cluster.macs)
                    ),
                    "sram_bytes": cluster.sram_bytes,
                    "local_bandwidth": cluster.local_bandwidth,
                    "lx": cluster.lx,
                    "ly": cluster.ly,
                }
                if energy:
                    entry["energy_pj_per_mac"] = dict(cluster.mac_energy_pj)
                    entry["energy_pj_per_sram_byte"] = cluster.sram_energy_pj_per_byte
                clusters.append(entry)
            chiplet_entry: dict[str, Any] = {
                "name": chiplet.name,
                "x": chiplet.x,
                "y": chiplet.y,
                "cluster": clusters,
            }
            if energy:
                chiplet_entry["static_power_w"] = chiplet.static_power_w
            chiplets.append(chiplet_entry)
        links = []
        for link in self.links:
            entry = {
                "src": self.clusters[link.src].name,
                "dst": self.clusters[link.dst].name,
                "kind": link.kind,
                "bandwidth": link.bandwidth,
                "latency": link.latency,
                "bidirectional": False,
            }
            if link.multicast:
                entry["multicast"] = True
            if energy:
                entry["energy_pj_per_bit"] = link.energy_pj_per_bit
            links.append(entry)
        drams = []
        for dram in self.drams:
            entry = {
                "chiplet": self.chiplets[self.clusters[dram.node].chiplet].name,
                "cluster": _local_name(self.clusters[dram.node].name),
                "bandwidth": dram.bandwidth,
            }
            if energy:
                entry["energy_pj_per_bit"] = dram.energy_pj_per_bit
            if dram.capacity_bytes is not None:
                entry["capacity_bytes"] = dram.capacity_bytes
            drams.append(entry)
        return {
            "system": {
                "name": self.name,
                "description": self.description,
                "frequency_hz": self.frequency_hz,
                "dtype": self.device_dtype,
                **({"accumulator_bytes": dict(self.accumulator_bytes)}
                   if self.accumulator_bytes else {}),
                **({"multicast_orders": list(self.multicast_orders)}
                   if self.multicast_orders != MULTICAST_ORDERS else {}),
            },
            "noc": {"auto": False},
            "nop": {"auto": False},
            "chiplet": chiplets,
            "link": links,
            "dram": drams,
            **({"calibration": self.calibration.to_dict()} if self.calibration else {}),
        }

    def network_fingerprint(self) -> str:
        """A short hash of the network a calibration depends on: every link's ends, kind,
        bandwidth and latency, every DRAM controller's node and bandwidth, and the multicast
        trees' orders when they are not the default."""
        parts = [(link.src, link.dst, link.kind, link.bandwidth, link.latency)
                 for link in self.links] + [(d.node, d.bandwidth) for d in self.drams]
        if self.multicast_orders != MULTICAST_ORDERS:
            parts.append(("multicast_orders", self.multicast_orders))
        return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]

    def with_device_dtype(self, dtype: str) -> ChipletSystem:
        """A copy whose device model computes and stores in ``dtype``.

        Every cluster's ``macs_per_cycle`` becomes its rate at ``dtype``; the rest is unchanged.

        Raises
        ------
        SystemConfigError
            For an unknown dtype (listing :data:`DEVICE_DTYPES`), or when a cluster does not
            compute ``dtype`` (naming the cluster and the dtypes it supports).
        """
        if dtype not in DTYPE_BYTES:
            raise SystemConfigError(
                f"{self.name}: unknown device dtype {dtype!r}; expected one of "
                f"{', '.join(DEVICE_DTYPES)}"
            )
        if dtype == self.device_dtype:
            return self
        lacking = [c for c in self.clusters if not c.supports(dtype)]
        if lacking:
            first, others = lacking[0], len(lacking) - 1
            verb = "lacks" if others == 1 else "lack"
            more = f" ({_count(others, 'other cluster')} also {verb} {dtype})" if others else ""
            raise SystemConfigError(
                f"{self.name}: cluster {first.name!r} does not compute {dtype}; it supports "
                f"{', '.join(first.dtypes)}{more}; choose a dtype every cluster computes: "
                f"{', '.join(self.supported_dtypes)}"
            )
        clusters = tuple(replace(c, macs_per_cycle=c.macs_for(dtype)) for c in self.clusters)
        return replace(self, clusters=clusters, device_dtype=dtype)

    # ------------------------------------------------------------------ queries
    @property
    def num_clusters(self) -> int:
        """Number of clusters (routing nodes)."""
        return len(self.clusters)

    @property
    def peak_macs_per_cycle(self) -> int:
        """MACs/cycle at the device dtype summed over every cluster."""
        return sum(c.macs_per_cycle for c in self.clusters)

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element at the device dtype."""
        return DTYPE_BYTES[self.device_dtype]

    @property
    def supported_dtypes(self) -> tuple[str, ...]:
        """The dtypes every cluster computes, in :data:`DEVICE_DTYPES` order."""
        return tuple(d for d in DEVICE_DTYPES if all(c.supports(d) for c in self.clusters))

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
        """Counts and peaks (at the device dtype) in one line, without the name."""
        xs = [c.x for c in self.chiplets]
        ys = [c.y for c in self.chiplets]
        rows, cols = max(ys) - min(ys) + 1, max(xs) - min(xs) + 1
        tops = 2.0 * self.peak_macs_per_cycle * self.frequency_hz / 1e12
        dram_bw = sum(d.bandwidth for d in self.drams)
        dtype = self.device_dtype
        return (
            f"{_count(len(self.chiplets), 'chiplet')} on a {rows}x{cols} grid, "
            f"{_count(self.num_clusters, 'cluster')}, {self.peak_macs_per_cycle} {dtype} "
            f"MACs/cycle at {self.frequency_hz / 1e9:.2f} GHz ({tops:.1f} {dtype} TOPS), "
            f"{self.total_sram_bytes / 2**20:.1f} MiB SRAM, "
            f"{_count(len(self.drams), 'DRAM controller')} ({dram_bw:g} B/cycle)"
        )

    def summary(self) -> str:
        """One-line description: name, counts and peaks."""
        return f"{self.name}: {self.stats()}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _local_name(full_name: str) -> str:
    return full_name.split(".", 1)[1]


def _preview(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


__all__ = [
    "DEVICE_DTYPES",
    "DTYPE_BYTES",
    "Chiplet",
    "ChipletSystem",
    "Cluster",
    "Dram",
    "FlowCalibration",
    "Link",
    "SystemConfigError",
]

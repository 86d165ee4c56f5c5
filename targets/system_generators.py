"""Synthetic chiplet systems for studies and tests: meshes and tori of one-cluster chiplets.

Each generator writes a description in the TOML schema of :mod:`tvm_chiplet.targets.system_toml`
and validates it like any file, so a generated system behaves exactly like a loaded one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_toml import system_from_dict


@dataclass(frozen=True)
class GridEnergy:
    """Energy coefficients of a generated grid, in the units of the TOML schema.

    Attributes
    ----------
    pj_per_mac : float or mapping of dtype to float
        pJ per MAC: a number when the cluster computes one dtype, else one per dtype.
    pj_per_sram_byte : float
        pJ per byte read from or written to a cluster's SRAM.
    nop_pj_per_bit : float
        pJ per bit per ``nop`` link traversed.
    dram_pj_per_bit : float
        pJ per bit moved by a DRAM controller.
    static_power_w : float
        Static power of each chiplet, watts.
    """

    pj_per_mac: float | Mapping[str, float]
    pj_per_sram_byte: float
    nop_pj_per_bit: float
    dram_pj_per_bit: float
    static_power_w: float


def _grid_dict(
    name: str,
    rows: int,
    cols: int,
    bandwidth: float,
    latency: float,
    macs_per_cycle: int | Mapping[str, int],
    sram_bytes: int,
    local_bandwidth: float,
    frequency_hz: float,
    dram_bandwidth: float,
    dram_at: Iterable[tuple[int, int]],
    dtype: str,
    energy: GridEnergy | None,
) -> dict[str, Any]:
    macs = macs_per_cycle if isinstance(macs_per_cycle, int) else dict(macs_per_cycle)
    cluster: dict[str, Any] = {
        "macs_per_cycle": macs,
        "sram_bytes": sram_bytes,
        "local_bandwidth": local_bandwidth,
    }
    chiplet: dict[str, Any] = {"cluster": cluster}
    nop: dict[str, Any] = {"bandwidth": bandwidth, "latency": latency}
    dram: dict[str, Any] = {"bandwidth": dram_bandwidth}
    if energy is not None:
        per_mac = energy.pj_per_mac
        cluster["energy_pj_per_mac"] = dict(per_mac) if isinstance(per_mac, Mapping) else per_mac
        cluster["energy_pj_per_sram_byte"] = energy.pj_per_sram_byte
        chiplet["static_power_w"] = energy.static_power_w
        nop["energy_pj_per_bit"] = energy.nop_pj_per_bit
        dram["energy_pj_per_bit"] = energy.dram_pj_per_bit
    return {
        "system": {
            "name": name,
            "description": f"synthetic {rows}x{cols} grid of one-cluster chiplets",
            "frequency_hz": frequency_hz,
            "dtype": dtype,
        },
        "grid": {"rows": rows, "cols": cols, "chiplet": chiplet},
        "nop": nop,
        "dram": [{"chiplet": list(xy), **dram} for xy in dram_at],
    }


def mesh_system(
    rows: int,
    cols: int,
    bandwidth: float = 32.0,
    latency: float = 10.0,
    *,
    macs_per_cycle: int | Mapping[str, int] = 1024,
    sram_bytes: int = 2 * 2**20,
    local_bandwidth: float = 256.0,
    frequency_hz: float = 1.0e9,
    dram_bandwidth: float = 64.0,
    dram_at: Iterable[tuple[int, int]] = ((0, 0),),
    dtype: str = "fp32",
    energy: GridEnergy | None = None,
    faults: dict[str, Any] | None = None,
    name: str | None = None,
    multicast: bool = False,
) -> ChipletSystem:
    """A ``rows x cols`` mesh of one-cluster chiplets for synthetic NoC studies.

    Parameters
    ----------
    rows, cols : int
        Grid size.
    bandwidth, latency : float
        Every ``nop`` link, bytes/cycle and cycles per hop.
    macs_per_cycle : int or mapping of dtype to int
        MACs/cycle of every cluster: at ``dtype`` (a number), or per dtype (a mapping that
        includes ``dtype``).
    sram_bytes, local_bandwidth : optional
        The cluster of every chiplet.
    frequency_hz : float
        System clock.
    dram_bandwidth : float
        Bytes/cycle of each DRAM controller.
    dram_at : iterable of (x, y)
        Chiplet coordinates carrying a DRAM controller.
    dtype : str
        The default device dtype (``[system] dtype``).
    energy : GridEnergy, optional
        Energy coefficients; without them the system has none (all 0).
    faults : dict, optional
        A ``[faults]`` table (see :mod:`tvm_chiplet.targets.system_toml`).
    name : str, optional
        System name, default ``"mesh-<rows>x<cols>"``.
    multicast : bool
        Whether the routers replicate packets on every link (``[nop] multicast``).
    """
    data = _grid_dict(
        name or f"mesh-{rows}x{cols}",
        rows,
        cols,
        bandwidth,
        latency,
        macs_per_cycle,
        sram_bytes,
        local_bandwidth,
        frequency_hz,
        dram_bandwidth,
        dram_at,
        dtype,
        energy,
    )
    if faults:
        data["faults"] = faults
    data["nop"]["multicast"] = multicast
    return system_from_dict(data, source=f"<mesh_system({rows}, {cols})>")


def torus_system(
    rows: int,
    cols: int,
    bandwidth: float = 32.0,
    latency: float = 10.0,
    *,
    macs_per_cycle: int | Mapping[str, int] = 1024,
    sram_bytes: int = 2 * 2**20,
    local_bandwidth: float = 256.0,
    frequency_hz: float = 1.0e9,
    dram_bandwidth: float = 64.0,
    dram_at: Iterable[tuple[int, int]] = ((0, 0),),
    dtype: str = "fp32",
    energy: GridEnergy | None = None,
    name: str | None = None,
) -> ChipletSystem:
    """A ``rows x cols`` torus of one-cluster chiplets: :func:`mesh_system` plus wrap links.

    Wrap-around links are added along every dimension of length >= 3 (shorter ones are already
    fully linked by the mesh). Parameters as in :func:`mesh_system`.
    """
    data = _grid_dict(
        name or f"torus-{rows}x{cols}",
        rows,
        cols,
        bandwidth,
        latency,
        macs_per_cycle,
        sram_bytes,
        local_bandwidth,
        frequency_hz,
        dram_bandwidth,
        dram_at,
        dtype,
        energy,
    )
    data["nop"]["auto"] = True
    wraps = []
    if cols >= 3:
        wraps += [([cols - 1, y], [0, y]) for y in range(rows)]
    if rows >= 3:
        wraps += [([x, rows - 1], [x, 0]) for x in range(cols)]
    data["link"] = [{"src": a, "dst": b} for a, b in wraps]
    return system_from_dict(data, source=f"<torus_system({rows}, {cols})>")


__all__ = ["GridEnergy", "mesh_system", "torus_system"]

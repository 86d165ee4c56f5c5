"""PNG plots of a simulated run: a Gantt chart per cluster, a link-load map of the system, and
the energy per inference by term and by cluster.

The figures are built on :class:`matplotlib.figure.Figure` with the non-interactive Agg canvas:
nothing touches pyplot's global figure registry or needs a display, so the functions are safe to
call from tests, worker threads and headless machines.

Example
-------
>>> module = tvm_chiplet.build(model, target="chiplet/quad-2x2")  # doctest: +SKIP
>>> sim = simulate_plan(module.plan, module.system, batches=2)  # doctest: +SKIP
>>> write_report(module.plan, module.system, sim, "report")  # doctest: +SKIP
['report/gantt.png', 'report/link_load.png', 'report/energy.png']
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from tvm_chiplet.runtime.device import ENERGY_TERMS
from tvm_chiplet.runtime.files import atomic_write
from tvm_chiplet.runtime.profile import bytes_label, energy_label, run_label
from tvm_chiplet.targets.system import ChipletSystem

GANTT_FILE = "gantt.png"
LINK_LOAD_FILE = "link_load.png"
ENERGY_FILE = "energy.png"

_DPI = 110
_LINK_CMAP = "plasma"
_IDLE_LINK_COLOR = "0.8"
_CHIPLET_MARGIN = 0.1  # of a grid cell, on each side of a chiplet's square
_LABEL_CLUSTERS_UP_TO = 16
_MAX_BATCH_LEGEND = 10
# A bar gets its op id written on it when it spans at least this fraction of the time axis.
_MIN_LABELLED_BAR = 0.04


def gantt_figure(plan: dict, system: ChipletSystem, sim: Any) -> Figure:
    """The Gantt chart of a simulated run as a figure (see :func:`gantt_chart`)."""
    tasks = plan["tasks"]
    _check_task_arrays(tasks, sim)
    clusters = sorted({int(task["cluster"]) for task in tasks})
    row_of = {cid: row for row, cid in enumerate(clusters)}
    height = min(2.0 + 0.4 * max(len(clusters), 1), 20.0)
    fig = Figure(figsize=(11.0, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    span = max(float(sim.total_cycles), 1.0)
    colors = [colormaps["tab10"](batch % 10) for batch in range(int(sim.batches))]
    for batch in range(int(sim.batches)):
        for index, task in enumerate(tasks):
            start = float(sim.task_start[batch, index])
            width = float(sim.task_end[batch, index]) - start
            row = row_of[int(task["cluster"])]
            ax.broken_barh([(start, width)], (row - 0.4, 0.8), facecolors=colors[batch],
                           edgecolors="black", linewidth=0.3)
            if width >= _MIN_LABELLED_BAR * span:
                ax.text(start + width / 2, row, str(task["op_id"]), ha="center", va="center",
                        fontsize=7, color="white")
    ax.set_yticks(range(len(clusters)), [system.clusters[cid].name for cid in clusters])
    ax.set_ylim(len(clusters) - 0.5, -0.5)
    ax.set_xlim(0.0, span)
    ax.set_xlabel("cycles")
    ax.set_ylabel("cluster")
    ax.grid(axis="x", linewidth=0.3)
    to_us = 1e6 / system.frequency_hz
    top = ax.secondary_xaxis("top", functions=(lambda c: c * to_us, lambda us: us / to_us))
    top.set_xlabel(f"microseconds at {system.frequency_hz / 1e9:g} GHz")
    if not tasks:
        ax.text(0.5, 0.5, "no tasks", transform=ax.transAxes, ha="center", va="center")
    if 1 < sim.batches <= _MAX_BATCH_LEGEND:
        ax.legend(handles=[Patch(color=colors[b], label=f"batch {b}") for b in range(sim.batches)],
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_title(
        f"{system.name}: strategy {plan.get('strategy', '?')}, {_run_label(sim)}, "
        f"{sim.network} network, "
        f"{float(sim.total_cycles):.0f} cycles ({float(sim.total_cycles) * to_us:.3g} us)"
    )
    return fig


def link_load_figure(system: ChipletSystem, sim: Any) -> Figure:
    """The link-load map of a simulated run as a figure (see :func:`link_heatmap`)."""
    _check_link_arrays(system, sim)
    xs = [chiplet.x for chiplet in system.chiplets]
    ys = [chiplet.y for chiplet in system.chiplets]
    x0, y0 = min(xs), min(ys)
    cols, rows = max(xs) - x0 + 1, max(ys) - y0 + 1
    side = min(3.0 + 1.3 * max(cols, rows), 14.0)
    fig = Figure(figsize=(2.1 * side, side), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    links_ax, cells_ax = fig.subplots(1, 2, width_ratios=[1.0, 1.0])
    _draw_links(links_ax, system, sim, (x0, y0, cols, rows))
    _draw_chiplet_load(cells_ax, system, sim, (x0, y0, cols, rows))
    fig.suptitle(f"{system.name}: link load, {_run_label(sim)}, {sim.network} network")
    return fig


def energy_figure(plan: dict, system: ChipletSystem, sim: Any) -> Figure:
    """Energy per inference of a simulated run: a bar per term (:data:`ENERGY_TERMS`), and the
    compute + SRAM energy of each used cluster."""
    energy = sim.energy
    fig = Figure(figsize=(11.0, 4.0), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    terms_ax, clusters_ax = fig.subplots(1, 2, width_ratios=[1.0, 2.0])
    values = [energy.per_inference_pj[term] / 1e6 for term in ENERGY_TERMS]
    terms_ax.bar(ENERGY_TERMS, values, color=colormaps["tab10"](np.arange(len(values))))
    terms_ax.set_ylabel("uJ per inference")
    terms_ax.set_title(f"total {energy_label(energy.total_pj)} per inference")
    used = sorted(set(plan.get("clusters_used", [])) or range(system.num_clusters))
    clusters_ax.bar(range(len(used)), [energy.cluster_pj[c] / 1e6 for c in used], color="C0")
    clusters_ax.set_xticks(range(len(used)),
                           [system.clusters[c].name for c in used] if len(used) <= 16 else
                           [str(c) for c in used], rotation=90, fontsize=7)
    clusters_ax.set_ylabel("uJ per inference (MACs + SRAM)")
    clusters_ax.set_title("by cluster")
    fig.suptitle(f"{system.name}: energy at {system.device_dtype}, {_run_label(sim)}")
    return fig


def _run_label(sim: Any) -> str:
    return run_label(int(sim.batches), getattr(sim, "copies", 1), getattr(sim, "microbatch", 1))


def gantt_chart(plan: dict, system: ChipletSystem, sim: Any, path: str | os.PathLike) -> str:
    """Write a Gantt chart PNG of a simulated run: one row per used cluster, a bar per task.

    Parameters
    ----------
    plan : dict
        The artifact's ``plan.json`` dictionary (``tasks`` with ``name``, ``cluster``, ``op_id``).
    system : ChipletSystem
        The system the plan was compiled for (cluster names, clock frequency).
    sim : SimResult
        The simulation of ``plan`` (``task_start`` / ``task_end`` of shape ``[batches, tasks]``).
    path : str or os.PathLike
        The PNG file to write (atomically: a temporary file, then a rename).

    Returns
    -------
    str
        ``path`` as a string.

    Bars are coloured by batch and carry their op id when wide enough. The x axis is in cycles,
    with microseconds at ``system.frequency_hz`` on the top axis.
    """
    return _save(gantt_figure(plan, system, sim), path)


def link_heatmap(system: ChipletSystem, sim: Any, path: str | os.PathLike) -> str:
    """Write a PNG of link load on the chiplet grid.

    The left panel draws every chiplet at its grid position with its clusters as dots (named when
    there are few) and every link as an arrow coloured by utilisation (busy / total cycles);
    on-chip NoC links are solid and straight-ish, package NoP links dashed and more curved; idle
    links are grey. The right panel is a heatmap of the bytes carried by the links touching each
    chiplet; grid cells without a chiplet (missing or faulty) are hatched.

    Parameters
    ----------
    system : ChipletSystem
        The system (any preset or TOML file, with or without faults).
    sim : SimResult
        Needs ``link_bytes`` and ``link_utilisation`` indexed by link id, ``batches``, ``network``.
    path : str or os.PathLike
        The PNG file to write (atomically).

    Returns
    -------
    str
        ``path`` as a string.
    """
    return _save(link_load_figure(system, sim), path)


def write_report(
    plan: dict, system: ChipletSystem, sim: Any, directory: str | os.PathLike
) -> list[str]:
    """Write ``gantt.png``, ``link_load.png`` and, for a system with energy coefficients,
    ``energy.png`` into ``directory`` (created if needed).

    Parameters
    ----------
    plan, system, sim
        As for :func:`gantt_chart`.
    directory : str or os.PathLike
        Folder for the plots; created with its parents when missing.

    Returns
    -------
    list[str]
        The paths written, Gantt chart first.

    Raises
    ------
    ValueError
        When ``directory`` cannot be created or is not a folder.
    """
    directory = os.fspath(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        raise ValueError(
            f"report directory {directory!r} cannot be created ({err.strerror or err}); "
            "give a path to a writable folder"
        ) from None
    written = [
        gantt_chart(plan, system, sim, os.path.join(directory, GANTT_FILE)),
        link_heatmap(system, sim, os.path.join(directory, LINK_LOAD_FILE)),
    ]
    if system.has_energy and getattr(sim, "energy", None) is not None:
        written.append(_save(energy_figure(plan, system, sim),
                             os.path.join(directory, ENERGY_FILE)))
    return written


# ---------------------------------------------------------------------- helpers


def _check_task_arrays(tasks: list[dict], sim: Any) -> None:
    expected = (int(sim.batches), len(tasks))
    for name in ("task_start", "task_end"):
        shape = tuple(np.shape(getattr(sim, name)))
        if shape != expected:
            raise ValueError(
                f"sim.{name} has shape {list(shape)}, expected [batches, tasks] = "
                f"{list(expected)}; simulate this plan (simulate_plan(plan, system, ...)) "
                "rather than another one"
            )


def _check_link_arrays(system: ChipletSystem, sim: Any) -> None:
    for name in ("link_bytes", "link_utilisation"):
        found = len(np.atleast_1d(getattr(sim, name)))
        if found != len(system.links):
            raise ValueError(
                f"sim.{name} has {found} entries, expected one per link of {system.name} "
                f"({len(system.links)}); simulate on the same system the plot is drawn for"
            )


def _cluster_positions(system: ChipletSystem) -> np.ndarray:
    """[clusters, 2] centre of each cluster, chiplet squares being unit grid cells."""
    local_cols = {c.id: 1 + max(system.clusters[k].lx for k in c.clusters) for c in system.chiplets}
    local_rows = {c.id: 1 + max(system.clusters[k].ly for k in c.clusters) for c in system.chiplets}
    inner = 1.0 - 2 * _CHIPLET_MARGIN
    positions = np.zeros((system.num_clusters, 2))
    for cluster in system.clusters:
        chiplet = system.chiplets[cluster.chiplet]
        positions[cluster.id] = (
            chiplet.x + _CHIPLET_MARGIN + inner * (cluster.lx + 0.5) / local_cols[chiplet.id],
            chiplet.y + _CHIPLET_MARGIN + inner * (cluster.ly + 0.5) / local_rows[chiplet.id],
        )
    return positions


def _grid_axes(ax, grid: tuple[int, int, int, int]) -> None:
    x0, y0, cols, rows = grid
    ax.set_xlim(x0 - 0.05, x0 + cols + 0.05)
    ax.set_ylim(y0 + rows + 0.05, y0 - 0.05)  # y grows downwards, like row numbers
    ax.set_aspect("equal")
    ax.set_xticks([x0 + i + 0.5 for i in range(cols)], [str(x0 + i) for i in range(cols)])
    ax.set_yticks([y0 + j + 0.5 for j in range(rows)], [str(y0 + j) for j in range(rows)])
    ax.set_xlabel("chiplet x")
    ax.set_ylabel("chiplet y")
    ax.tick_params(length=0)


def _draw_links(ax, system: ChipletSystem, sim: Any, grid: tuple[int, int, int, int]) -> None:
    positions = _cluster_positions(system)
    utilisation = np.asarray(sim.link_utilisation, dtype=np.float64)
    loaded = np.asarray(sim.link_bytes, dtype=np.float64) > 0
    peak = float(utilisation.max()) if utilisation.size and utilisation.max() > 0 else 1.0
    mappable = ScalarMappable(norm=Normalize(0.0, peak), cmap=_LINK_CMAP)
    for chiplet in system.chiplets:
        ax.add_patch(Rectangle(
            (chiplet.x + _CHIPLET_MARGIN / 2, chiplet.y + _CHIPLET_MARGIN / 2),
            1 - _CHIPLET_MARGIN, 1 - _CHIPLET_MARGIN, facecolor="0.95", edgecolor="0.4",
            linewidth=0.8, zorder=0,
        ))
        ax.text(chiplet.x + 0.5, chiplet.y + _CHIPLET_MARGIN / 2, chiplet.name, ha="center",
                va="bottom", fontsize=7, color="0.3")
    for link in system.links:
        busy = bool(loaded[link.id])
        nop = link.kind == "nop"
        ax.add_patch(FancyArrowPatch(
            positions[link.src], positions[link.dst],
            connectionstyle=f"arc3,rad={0.25 if nop else 0.12}",
            arrowstyle="-|>", mutation_scale=8, shrinkA=4, shrinkB=4,
            linestyle="--" if nop else "-", linewidth=(2.2 if nop else 1.4) * (1 if busy else 0.6),
            color=mappable.to_rgba(utilisation[link.id]) if busy else _IDLE_LINK_COLOR,
            zorder=2 if busy else 1,
        ))
    ax.scatter(positions[:, 0], positions[:, 1], s=18, color="black", zorder=3)
    if system.num_clusters <= _LABEL_CLUSTERS_UP_TO:
        for cluster in system.clusters:
            x, y = positions[cluster.id]
            ax.annotate(cluster.name, (x, y), xytext=(0, -7), textcoords="offset points",
                        ha="center", va="top", fontsize=6, zorder=4)
    _grid_axes(ax, grid)
    ax.legend(handles=[
        Line2D([], [], color="0.3", linestyle="-", linewidth=1.4, label="NoC link"),
        Line2D([], [], color="0.3", linestyle="--", linewidth=2.2, label="NoP link"),
        Line2D([], [], color=_IDLE_LINK_COLOR, linewidth=1.0, label="idle link"),
    ], loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=3, fontsize=8, frameon=False)
    ax.figure.colorbar(mappable, ax=ax, shrink=0.8, label="link utilisation (busy / total)")
    ax.set_title("links")


def _draw_chiplet_load(
    ax, system: ChipletSystem, sim: Any, grid: tuple[int, int, int, int]
) -> None:
    x0, y0, cols, rows = grid
    link_bytes = np.asarray(sim.link_bytes, dtype=np.float64)
    load = np.full((rows, cols), np.nan)
    for chiplet in system.chiplets:
        load[chiplet.y - y0, chiplet.x - x0] = 0.0
    for link in system.links:
        ends = {system.clusters[link.src].chiplet, system.clusters[link.dst].chiplet}
        for chiplet_id in sorted(ends):
            chiplet = system.chiplets[chiplet_id]
            load[chiplet.y - y0, chiplet.x - x0] += link_bytes[link.id]
    peak = float(np.nanmax(load)) if np.nanmax(load) > 0 else 1.0
    image = ax.imshow(
        np.ma.masked_invalid(load), cmap="viridis", vmin=0.0, vmax=peak, origin="upper",
        extent=(x0, x0 + cols, y0 + rows, y0), interpolation="nearest",
    )
    for j in range(rows):
        for i in range(cols):
            if np.isnan(load[j, i]):
                ax.add_patch(Rectangle((x0 + i, y0 + j), 1, 1, fill=False, hatch="//",
                                       edgecolor="0.6", linewidth=0.5))
                ax.text(x0 + i + 0.5, y0 + j + 0.5, "no chiplet", ha="center", va="center",
                        fontsize=7, color="0.4")
            elif cols * rows <= 64:
                value = load[j, i]
                ax.text(x0 + i + 0.5, y0 + j + 0.5, bytes_label(value), ha="center",
                        va="center", fontsize=7,
                        color="black" if value > 0.6 * peak else "white")
    _grid_axes(ax, grid)
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label="bytes over the chiplet's links")
    ax.set_title("bytes through each chiplet")


def _save(fig: Figure, path: str | os.PathLike) -> str:
    return atomic_write(
        path, lambda tmp: fig.savefig(tmp, format="png", dpi=_DPI, metadata={"Software": None})
    )

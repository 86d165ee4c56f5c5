"""Faults as a what-if: dead chiplets, clusters and links on top of a system, named or drawn.

A system file declares its own faults (``[faults]``, :mod:`.system_toml`); this module puts more
on top of any built :class:`~tvm_chiplet.targets.system.ChipletSystem` (a preset, a file, one
loaded from an artifact): the system's explicit form (:meth:`ChipletSystem.to_dict`) gets a
``[faults]`` table and is built again, so the loader's checks hold (unknown names, every DRAM
controller or cluster dead, islands) and the survivors keep their names.

Faults are given as a ``[faults]`` table (``{"chiplets": [...], "clusters": [...], "links":
[[a, b], ...]}``) or as text, the form ``tvmc --faults`` takes: comma-separated parts, each a
chiplet (``x1y1``), a cluster (``x0y0.k3``) or a link between two chiplets or clusters
(``x0y0:x1y0``, both directions)::

    >>> parse_faults("x1y1, x0y0.k3, x0y0:x1y0")
    {'chiplets': ['x1y1'], 'clusters': ['x0y0.k3'], 'links': [['x0y0', 'x1y0']]}

:func:`random_faults` draws a fault set from a seed, never one that disconnects the system.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from typing import Any

import networkx as nx

from tvm_chiplet.targets.system import ChipletSystem, SystemConfigError

FAULT_KINDS = ("chiplets", "clusters", "links")

RANDOM_ATTEMPTS = 500
"""Draws :func:`random_faults` tries before it gives up finding a connected fault set."""


def parse_faults(text: str) -> dict[str, list]:
    """A ``[faults]`` table from ``tvmc --faults`` text (see the module docstring)."""
    faults: dict[str, list] = {kind: [] for kind in FAULT_KINDS}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if ":" in item:
            ends = [end.strip() for end in item.split(":")]
            if len(ends) != 2 or not all(ends):
                raise SystemConfigError(
                    f"--faults: {item!r} is not a link; expected 'a:b' with two chiplet or "
                    f"cluster names (e.g. x0y0:x1y0)")
            faults["links"].append(ends)
        elif "." in item:
            faults["clusters"].append(item)
        else:
            faults["chiplets"].append(item)
    if not any(faults.values()):
        raise SystemConfigError(
            f"--faults: {text!r} names no part; expected comma-separated chiplets (x1y1), "
            f"clusters (x0y0.k3) or links (x0y0:x1y0)")
    return {kind: items for kind, items in faults.items() if items}


def parse_fault_counts(text: str) -> dict[str, int]:
    """``{"chiplets": 2, "links": 4}`` from ``tvmc --random-faults chiplets=2,links=4``."""
    counts: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        kind, _, value = item.partition("=")
        kind = kind.strip()
        if kind not in FAULT_KINDS or not value.strip().isdigit():
            raise SystemConfigError(
                f"--random-faults: {item!r}; expected kind=count with kind one of "
                f"{', '.join(FAULT_KINDS)} and count an integer >= 0 (e.g. chiplets=2,links=4)")
        counts[kind] = int(value)
    return counts


def fault_table(faults: Mapping[str, Any] | str) -> dict[str, list]:
    """A ``[faults]`` table from ``--faults`` text or a table: kinds checked, empty ones
    dropped."""
    if isinstance(faults, str):
        return parse_faults(faults)
    unknown = sorted(set(faults) - set(FAULT_KINDS))
    if unknown:
        raise SystemConfigError(
            f"faults: unknown kind(s) {', '.join(unknown)}; expected {', '.join(FAULT_KINDS)}")
    return {kind: list(items) for kind, items in faults.items() if items}


def with_faults(system: ChipletSystem, faults: Mapping[str, Any] | str
                ) -> tuple[ChipletSystem, list[str]]:
    """``system`` with more parts dead, and notes on what went with them.

    Parameters
    ----------
    system : ChipletSystem
        The system the names refer to (its own faults already applied).
    faults : dict or str
        A ``[faults]`` table or ``--faults`` text.

    Returns
    -------
    (ChipletSystem, list of str)
        The surviving system (renumbered, names kept; the healthy system's flow calibration,
        a bandwidth efficiency per link kind, is kept and says so) and one note per DRAM
        controller that died with its chiplet or cluster.

    Raises
    ------
    SystemConfigError
        For a name that does not exist, faults that kill every cluster or DRAM controller, or
        that split the system into islands (the message names them).
    """
    table = fault_table(faults)
    data = system.to_dict()
    data.pop("calibration", None)
    data["faults"] = table
    faulty = ChipletSystem.from_dict(data, source=f"{system.name} with faults {table}")
    if system.calibration is not None:
        calibration = dataclasses.replace(
            system.calibration, fingerprint=faulty.network_fingerprint(),
            workload=f"{system.calibration.workload}, on the healthy {system.name}")
        faulty = dataclasses.replace(faulty, calibration=calibration)
    alive = {c.name for c in faulty.clusters}
    notes = []
    for dram in system.drams:
        node = system.clusters[dram.node].name
        if node not in alive:
            notes.append(
                f"DRAM controller {dram.id} on {node} ({dram.bandwidth:g} B/cycle) is lost with "
                f"its {'chiplet' if node.split('.')[0] in table.get('chiplets', []) else 'cluster'}"
                f"; {len(faulty.drams)} of {len(system.drams)} controllers remain")
    return faulty, notes


def dead_parts(healthy: ChipletSystem, faulty: ChipletSystem) -> tuple[list[int], list[int]]:
    """Cluster ids and link ids of ``healthy`` that ``faulty`` (built from it by
    :func:`with_faults`, so the names match) no longer has."""
    alive = {c.name for c in faulty.clusters}
    links = {(faulty.clusters[lk.src].name, faulty.clusters[lk.dst].name) for lk in faulty.links}
    dead_clusters = [c.id for c in healthy.clusters if c.name not in alive]
    dead_links = [lk.id for lk in healthy.links
                  if (healthy.clusters[lk.src].name, healthy.clusters[lk.dst].name) not in links]
    return dead_clusters, dead_links


def random_faults(system: ChipletSystem, chiplets: int = 0, clusters: int = 0, links: int = 0,
                  seed: int = 0) -> dict[str, list]:
    """A ``[faults]`` table of randomly chosen dead parts that leaves the system connected.

    Chiplets and clusters are drawn among those alive, links among the die-to-die (``nop``)
    links between surviving chiplets (``noc`` links in a one-chiplet system), each a pair of
    gateways in both directions. A draw that splits the system, or kills every DRAM controller,
    is drawn again (up to :data:`RANDOM_ATTEMPTS` times). The same system, counts and seed give
    the same faults.

    Raises
    ------
    SystemConfigError
        When no draw leaves the system connected (ask for fewer faults), or a count exceeds
        what the system has.
    """
    rng = random.Random(seed)
    chiplet_names = [c.name for c in system.chiplets]
    cluster_names = [c.name for c in system.clusters]
    if chiplets >= len(chiplet_names) or clusters >= len(cluster_names):
        raise SystemConfigError(
            f"{system.name}: cannot kill {chiplets} chiplets and {clusters} clusters of "
            f"{len(chiplet_names)} chiplets / {len(cluster_names)} clusters; expected fewer")
    kind = "nop" if len(system.chiplets) > 1 else "noc"
    for _ in range(RANDOM_ATTEMPTS):
        dead_chiplets = sorted(rng.sample(chiplet_names, chiplets))
        dead = set(dead_chiplets)
        living = [n for n in cluster_names if n.split(".")[0] not in dead]
        if clusters > len(living) - 1:
            continue
        dead_clusters = sorted(rng.sample(living, clusters))
        dead.update(dead_clusters)
        pairs = sorted({tuple(sorted((system.clusters[lk.src].name, system.clusters[lk.dst].name)))
                        for lk in system.links if lk.kind == kind})
        pairs = [p for p in pairs
                 if not any(end in dead or end.split(".")[0] in dead for end in p)]
        if links > len(pairs):
            continue
        dead_links = sorted(rng.sample(pairs, links))
        if _survives(system, dead, set(dead_links)):
            table = {"chiplets": dead_chiplets, "clusters": dead_clusters,
                     "links": [list(p) for p in dead_links]}
            return {k: v for k, v in table.items() if v}
    raise SystemConfigError(
        f"{system.name}: no set of {chiplets} dead chiplets, {clusters} dead clusters and "
        f"{links} dead links found in {RANDOM_ATTEMPTS} draws (seed {seed}) leaves every cluster "
        f"connected with a DRAM controller; ask for fewer faults")


def _survives(system: ChipletSystem, dead: set[str], dead_links: set[tuple[str, str]]) -> bool:
    def alive(name: str) -> bool:
        return name not in dead and name.split(".")[0] not in dead

    graph = nx.DiGraph()
    graph.add_nodes_from(c.name for c in system.clusters if alive(c.name))
    for link in system.links:
        a, b = system.clusters[link.src].name, system.clusters[link.dst].name
        if alive(a) and alive(b) and tuple(sorted((a, b))) not in dead_links:
            graph.add_edge(a, b)
    has_dram = any(alive(system.clusters[d.node].name) for d in system.drams)
    return has_dram and graph.number_of_nodes() > 0 and nx.is_strongly_connected(graph)


__all__ = ["FAULT_KINDS", "dead_parts", "parse_fault_counts", "parse_faults", "random_faults",
           "with_faults"]


def add_random_faults(system: ChipletSystem, table: Mapping[str, list],
                      counts: Mapping[str, int] | str, seed: int
                      ) -> tuple[dict[str, list], dict[str, Any]]:
    """``table`` plus parts drawn by :func:`random_faults` (``counts`` as a mapping or
    ``--random-faults`` text) on ``system`` with ``table``'s parts already dead, and the record
    of the draw: ``{"counts", "seed", "drawn"}``."""
    counts = parse_fault_counts(counts) if isinstance(counts, str) else dict(counts)
    named = with_faults(system, table)[0] if table else system
    drawn = random_faults(named, seed=seed, **counts)
    merged = {kind: list(items) for kind, items in table.items()}
    for kind, items in drawn.items():
        merged[kind] = [*merged.get(kind, []), *items]
    return merged, {"counts": counts, "seed": seed, "drawn": drawn}

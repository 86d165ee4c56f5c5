"""Routing tables: per router, destination -> output port and virtual-channel class.

The tables are what the device's routers hold: a packet at router ``r`` for destination ``d``
that arrived on VC class ``c`` (``0`` when injected at ``r``) leaves on link ``port`` in class
``c'``. They are derived from :class:`~tvm_chiplet.targets.topology.Topology`'s routes, one
scheme per system, and are deadlock-free by construction:

``"xy"`` (intact meshes)
    Dimension order; one class (``0``): the channel-dependency graph is acyclic without VCs.
``"torus-xy"``
    Dimension order the shorter way round with a dateline: a packet moves to class ``1`` (in
    X) or ``2`` (in Y) once it takes a wrap-around link of its current dimension, and back to
    ``0`` when it turns into the next dimension (or a chiplet's local mesh). A link carries
    two classes at most (0 and its dimension's), as the device's two VCs allow.
``"up-down"`` (faulty or irregular systems)
    up*/down*: class ``0`` while the packet may still go up, ``1`` once it has taken a down
    link; a class-1 packet never takes an up link, which rules out cyclic dependencies.

A route is a function of (router, destination, class) only, so the tables reproduce every route
exactly (:meth:`RoutingTables.route`); building them checks that. The artifact stores them
(``routes.json``), ``tvmc routes`` prints them, and the device simulator routes its messages by
walking them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology


@dataclass(frozen=True)
class RoutingTables:
    """The routing tables of one system.

    Attributes
    ----------
    system_name : str
        The system they route.
    scheme : str
        The routing scheme (:data:`~tvm_chiplet.targets.topology.ROUTING_SCHEMES`).
    num_classes : int
        VC classes used (1 to 3).
    links : tuple of (src, dst)
        Every link's endpoints (cluster ids), indexed by link id.
    names : tuple of str
        Every router's (cluster's) name, indexed by id.
    entries : dict
        ``(router, destination, in_class) -> (link, out_class)``.
    """

    system_name: str
    scheme: str
    num_classes: int
    links: tuple[tuple[int, int], ...]
    names: tuple[str, ...]
    entries: dict[tuple[int, int, int], tuple[int, int]]

    def route(self, src: int, dst: int) -> list[int]:
        """Link ids from router ``src`` to router ``dst``, by walking the tables."""
        return [link for link, _ in self.route_classes(src, dst)]

    def route_classes(self, src: int, dst: int) -> list[tuple[int, int]]:
        """``(link, class)`` of every hop from ``src`` to ``dst``: the channels a packet holds,
        by walking the tables."""
        hops, node, vc = [], src, 0
        while node != dst:
            hop = self.entries.get((node, dst, vc))
            if hop is None:
                raise KeyError(
                    f"routing tables of {self.system_name!r}: router {self.names[node]!r} has no "
                    f"entry for destination {self.names[dst]!r} in VC class {vc}; rebuild the "
                    "artifact (tvmc compile)")
            link, vc = hop
            hops.append((link, vc))
            node = self.links[link][1]
            if len(hops) > len(self.links):
                raise ValueError(f"routing tables of {self.system_name!r} loop between "
                                 f"{self.names[src]!r} and {self.names[dst]!r}")
        return hops

    def router_entries(self, router: int) -> list[tuple[int, int, int, int]]:
        """``(destination, in_class, link, out_class)`` rows of one router, sorted."""
        return sorted((dst, vc, link, out) for (node, dst, vc), (link, out) in
                      self.entries.items() if node == router)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``routes.json`` in the artifact)."""
        return {
            "system": self.system_name,
            "scheme": self.scheme,
            "vc_classes": self.num_classes,
            "links": [list(link) for link in self.links],
            "routers": [{"router": r, "name": name,
                         "entries": [list(row) for row in self.router_entries(r)]}
                        for r, name in enumerate(self.names)],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoutingTables:
        """Inverse of :meth:`to_dict`."""
        entries = {(router["router"], dst, vc): (link, out)
                   for router in data["routers"] for dst, vc, link, out in router["entries"]}
        return cls(data["system"], data["scheme"], int(data["vc_classes"]),
                   tuple((int(a), int(b)) for a, b in data["links"]),
                   tuple(router["name"] for router in data["routers"]), entries)

    def format(self, router: str | None = None) -> str:
        """Readable tables: one block per router, one line per (destination, class)."""
        why = {"xy": "dimension order", "torus-xy": "dimension order with a dateline",
               "up-down": "up*/down*"}[self.scheme]
        lines = [f"routing tables of {self.system_name}: scheme {self.scheme} ({why}, "
                 f"deadlock-free), {self.num_classes} VC class(es), {len(self.names)} routers"]
        chosen = range(len(self.names))
        if router is not None:
            if router not in self.names:
                more = ", ..." if len(self.names) > 8 else ""
                raise ValueError(f"no router {router!r} in {self.system_name!r}; expected one of "
                                 f"{', '.join(self.names[:8])}{more}")
            chosen = [self.names.index(router)]
        for r in chosen:
            lines.append(f"router {self.names[r]} ({r})")
            lines.append("  destination          in  port (link -> next)           out")
            for dst, vc, link, out in self.router_entries(r):
                port = f"{link} -> {self.names[self.links[link][1]]}"
                lines.append(f"  {self.names[dst]:<18} {vc:>3}  {port:<28} {out:>4}")
        return "\n".join(lines)


def _classes(topology: Topology, route: list[int]) -> list[int]:
    """The VC class a packet holds after each link of ``route`` (see the module docstring)."""
    system = topology.system
    if topology.scheme == "xy":
        return [0] * len(route)
    if topology.scheme == "up-down":
        classes, vc = [], 0
        for link in route:
            vc = vc if topology.is_up_link(link) else 1
            classes.append(vc)
        return classes
    classes, vc, dimension = [], 0, None
    for link_id in route:
        link = system.links[link_id]
        a, b = system.chiplet_of(link.src), system.chiplet_of(link.dst)
        step = None if a.id == b.id else ("x" if a.y == b.y else "y")
        if step != dimension:
            vc, dimension = 0, step
        if step is not None and abs(a.x - b.x) + abs(a.y - b.y) > 1:
            vc = 1 if step == "x" else 2
        classes.append(vc)
    return classes


def routing_tables(system: ChipletSystem) -> RoutingTables:
    """The routing tables of ``system``, derived from its :class:`Topology`'s routes.

    Raises
    ------
    RuntimeError
        If two routes ask one router for different ports for the same destination and class
        (the routes are not destination-based; a bug in the routing scheme, not user input).
    """
    topology = system.topology
    entries: dict[tuple[int, int, int], tuple[int, int]] = {}
    for src, dst in itertools.permutations(range(system.num_clusters), 2):
        route = topology.route(src, dst)
        node, vc = src, 0
        for link, out in zip(route, _classes(topology, route), strict=True):
            hop = entries.setdefault((node, dst, vc), (link, out))
            if hop != (link, out):
                raise RuntimeError(
                    f"{system.name}: routes from {system.clusters[src].name} to "
                    f"{system.clusters[dst].name} leave router {system.clusters[node].name} by "
                    f"link {link}, another route by link {hop[0]}; routes must depend on the "
                    "destination and VC class only")
            node, vc = system.links[link].dst, out
    used = {vc for _, _, vc in entries} | {out for _, out in entries.values()}
    return RoutingTables(
        system.name, topology.scheme, len(used) or 1,
        tuple((link.src, link.dst) for link in system.links),
        tuple(c.name for c in system.clusters), entries)


__all__ = ["RoutingTables", "routing_tables"]

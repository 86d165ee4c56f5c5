"""Tests of routing tables: they reproduce the topology's routes, deadlock-free per VC class."""

import itertools

import networkx as nx
import pytest

from tvm_chiplet.targets.faults import with_faults
from tvm_chiplet.targets.routing import RoutingTables, routing_tables
from tvm_chiplet.targets.system_generators import mesh_system, torus_system
from tvm_chiplet.targets.system_toml import load_system

SYSTEMS = {
    "mesh-4x4": lambda: load_system("mesh-4x4"),
    "example-hetero": lambda: load_system("example-hetero"),
    "torus-4x3": lambda: torus_system(3, 4),
    "faulty-3x3": lambda: mesh_system(3, 3, faults={"chiplets": ["x1y1"],
                                                    "links": [["x0y0", "x1y0"]]}),
    "faulty-mesh-4x4": lambda: with_faults(load_system("mesh-4x4"), "x1y2,x2y0:x2y1,x0y3")[0],
}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_tables_reproduce_every_route_without_cyclic_channel_dependencies(name):
    system = SYSTEMS[name]()
    tables = routing_tables(system)
    channels = nx.DiGraph()
    for src, dst in itertools.permutations(range(system.num_clusters), 2):
        assert tables.route(src, dst) == system.topology.route(src, dst)
        channels.add_edges_from(itertools.pairwise(tables.route_classes(src, dst)))
    assert nx.is_directed_acyclic_graph(channels)
    classes_per_link = {}
    for link, vc in channels.nodes:
        classes_per_link.setdefault(link, set()).add(vc)
    assert max(len(c) for c in classes_per_link.values()) <= 2


def test_schemes_and_classes_follow_the_system():
    assert routing_tables(load_system("mesh-4x4")).num_classes == 1
    assert routing_tables(SYSTEMS["faulty-3x3"]()).scheme == "up-down"
    assert routing_tables(SYSTEMS["faulty-3x3"]()).num_classes == 2
    assert routing_tables(torus_system(3, 4)).scheme == "torus-xy"


def test_tables_round_trip_through_json_and_print_per_router():
    tables = routing_tables(SYSTEMS["faulty-3x3"]())
    assert RoutingTables.from_dict(tables.to_dict()) == tables
    text = tables.format("x0y0.k0")
    assert text.splitlines()[1] == "router x0y0.k0 (0)"
    assert len(text.splitlines()) == 3 + 7
    with pytest.raises(ValueError, match=r"no router 'x9y9.k0' in 'mesh-3x3'"):
        tables.format("x9y9.k0")

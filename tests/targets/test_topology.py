"""Tests of routing, orders, DRAM proximity and bisection of chiplet topologies."""

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_generators import mesh_system, torus_system
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology


def all_pairs(system):
    return itertools.product(range(system.num_clusters), repeat=2)


def channel_dependencies_acyclic(topology):
    graph = nx.DiGraph()
    for src, dst in all_pairs(topology.system):
        graph.add_edges_from(itertools.pairwise(topology.route(src, dst)))
    return nx.is_directed_acyclic_graph(graph)


def grid_system(rows, cols, clusters=1, layout="mesh", faults=None):
    data = {
        "system": {"name": "grid", "frequency_hz": 1.0e9},
        "grid": {
            "rows": rows,
            "cols": cols,
            "chiplet": {
                "layout": layout,
                "cluster": {
                    "count": clusters,
                    "macs_per_cycle": 8,
                    "sram_bytes": 64,
                    "local_bandwidth": 4.0,
                },
            },
        },
        "noc": {"bandwidth": 64.0, "latency": 1.0},
        "nop": {"bandwidth": 16.0, "latency": 5.0},
        "dram": [{"chiplet": [0, 0], "bandwidth": 8.0}],
    }
    if faults:
        data["faults"] = faults
    return ChipletSystem.from_dict(data)


SYSTEMS = {
    "mesh-4x4": lambda: load_system("mesh-4x4"),
    "quad-2x2": lambda: load_system("quad-2x2"),
    "cluster-4": lambda: load_system("cluster-4"),
    "example-hetero": lambda: load_system("example-hetero"),
    "faulty-chiplet": lambda: mesh_system(4, 4, faults={"chiplets": ["x1y1", "x2y3"]}),
    "faulty-link": lambda: grid_system(3, 3, clusters=4, faults={"links": [["x0y0", "x1y0"]]}),
    "faulty-cluster": lambda: grid_system(2, 3, clusters=4, faults={"clusters": ["x1y0.k1"]}),
    "ring": lambda: grid_system(2, 2, clusters=4, layout="ring"),
    "torus": lambda: torus_system(3, 4),
}


def test_xy_routes_on_4x4_mesh_have_manhattan_hops():
    system = mesh_system(4, 4)
    topology = Topology(system)
    assert topology.scheme == "xy"
    for src, dst in all_pairs(system):
        a, b = system.chiplet_of(src), system.chiplet_of(dst)
        assert topology.hops(src, dst) == abs(a.x - b.x) + abs(a.y - b.y)


def test_xy_route_goes_x_first_then_y():
    system = mesh_system(4, 4)
    nodes = Topology(system).route_nodes(0, 15)
    coords = [(system.chiplet_of(n).x, system.chiplet_of(n).y) for n in nodes]
    assert coords == [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (3, 2), (3, 3)]


def test_multicast_tree_branches_go_y_first_when_asked():
    system = mesh_system(6, 6)
    topology = Topology(system)
    at = {(system.chiplet_of(n).x, system.chiplet_of(n).y): n for n in range(36)}

    def coords(src, route):
        nodes = [src, *(system.links[link].dst for link in route)]
        return [(system.chiplet_of(n).x, system.chiplet_of(n).y) for n in nodes]

    src, goal = at[1, 0], at[3, 2]
    assert topology.tree_route(src, goal) == topology.route(src, goal)
    assert coords(src, topology.tree_route(src, goal)) == [
        (1, 0), (2, 0), (3, 0), (3, 1), (3, 2)]
    assert coords(src, topology.tree_route(src, goal, y_first=True)) == [
        (1, 0), (1, 1), (1, 2), (2, 2), (3, 2)]


@pytest.mark.parametrize("name", ["mesh-4x4", "cluster-4", "torus", "faulty-link"])
@pytest.mark.parametrize("y_first", [False, True])
def test_each_sources_branches_form_a_tree_that_reaches_every_cluster(name, y_first):
    topology = Topology(SYSTEMS[name]())
    system = topology.system
    for src in range(system.num_clusters):
        links = {link for dst in range(system.num_clusters)
                 for link in topology.tree_route(src, dst, y_first)}
        entered = sorted(system.links[link].dst for link in links)
        assert entered == sorted(set(range(system.num_clusters)) - {src})  # each node once
        for dst in range(system.num_clusters):
            route = topology.tree_route(src, dst, y_first)
            assert len(route) == topology.hops(src, dst)  # as short as the system's route
            if topology.scheme == "up-down":
                assert route == topology.route(src, dst)


def test_hierarchical_route_leaves_and_enters_through_gateways():
    system = load_system("quad-2x2")
    topology = Topology(system)
    src = system.find_cluster("x0y0.k3").id
    dst = system.find_cluster("x1y1.k3").id
    names = [system.clusters[n].name for n in topology.route_nodes(src, dst)]
    assert names == [
        "x0y0.k3", "x0y0.k2", "x0y0.k0", "x1y0.k0", "x1y1.k0", "x1y1.k1", "x1y1.k3",
    ]  # fmt: skip
    kinds = [system.links[i].kind for i in topology.route(src, dst)]
    assert kinds == ["noc", "noc", "nop", "nop", "noc", "noc"]


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_routes_are_contiguous_chains_from_src_to_dst(name):
    system = SYSTEMS[name]()
    topology = Topology(system)
    for src, dst in all_pairs(system):
        route = topology.route(src, dst)
        if src == dst:
            assert route == []
            continue
        assert system.links[route[0]].src == src
        assert system.links[route[-1]].dst == dst
        for a, b in itertools.pairwise(route):
            assert system.links[a].dst == system.links[b].src
        assert len(set(topology.route_nodes(src, dst))) == len(route) + 1


@pytest.mark.parametrize("name", sorted(set(SYSTEMS) - {"torus"}))
def test_routes_have_acyclic_channel_dependencies(name):
    assert channel_dependencies_acyclic(Topology(SYSTEMS[name]()))


@pytest.mark.parametrize(
    ("name", "scheme"),
    [
        ("mesh-4x4", "xy"),
        ("quad-2x2", "xy"),
        ("cluster-4", "xy"),
        ("ring", "xy"),
        ("torus", "torus-xy"),
        ("faulty-chiplet", "up-down"),
        ("faulty-link", "up-down"),
        ("faulty-cluster", "up-down"),
        ("example-hetero", "up-down"),
    ],
)
def test_scheme_is_dimension_order_only_on_intact_meshes(name, scheme):
    assert Topology(SYSTEMS[name]()).scheme == scheme


def _legal(topology, route):
    """Up*/down*: no up link after a down link."""
    ups = [topology.is_up_link(link) for link in route]
    first_down = ups.index(False) if False in ups else len(ups)
    return not any(ups[first_down:])


def test_up_down_routes_are_legal_shortest_and_deterministic():
    system = mesh_system(3, 4, faults={"chiplets": ["x1y1"]})
    first, second = Topology(system), Topology(system)
    assert first.scheme == "up-down"
    for src, dst in all_pairs(system):
        route = first.route(src, dst)
        assert route == second.route(src, dst)
        assert _legal(first, route)
        shorter = nx.all_simple_edge_paths(first.graph, src, dst, cutoff=len(route) - 1)
        for path in shorter:
            assert not _legal(first, [first.graph.edges[e]["link"] for e in path])


def test_up_down_link_directions_need_the_up_down_scheme():
    with pytest.raises(ValueError, match="routes with 'xy'"):
        Topology(mesh_system(2, 2)).is_up_link(0)


def test_routes_avoid_faulty_parts():
    system = grid_system(3, 3, faults={"links": [["x0y0", "x1y0"]], "chiplets": ["x1y1"]})
    topology = Topology(system)
    src, dst = system.find_cluster("x0y0.k0").id, system.find_cluster("x1y0.k0").id
    names = [system.clusters[n].name for n in topology.route_nodes(src, dst)]
    assert names == ["x0y0.k0", "x0y1.k0", "x0y2.k0", "x1y2.k0", "x2y2.k0", "x2y1.k0",
                     "x2y0.k0", "x1y0.k0"]  # fmt: skip


def test_torus_routes_take_the_short_way_round():
    system = torus_system(4, 4)
    topology = Topology(system)
    assert topology.hops(0, 3) == 1
    assert max(topology.hops(a, b) for a, b in all_pairs(system)) == 4


def test_route_returns_a_fresh_list_and_rejects_unknown_nodes():
    topology = Topology(mesh_system(2, 2))
    topology.route(0, 3).append(99)
    assert 99 not in topology.route(0, 3)
    with pytest.raises(ValueError, match=r"cluster id 4 is not in system 'mesh-2x2'.*0\.\.3"):
        topology.route(0, 4)
    with pytest.raises(ValueError, match=r"cluster id 'a' is not in system"):
        topology.route("a", 0)
    assert topology.route(np.int64(0), np.int32(3)) == topology.route(0, 3)


def test_route_latency_and_bandwidth_follow_the_links():
    topology = Topology(mesh_system(1, 3, bandwidth=8.0, latency=5.0))
    assert topology.route_latency(0, 2) == 10.0
    assert topology.route_bandwidth(0, 2) == 8.0
    assert topology.route_bandwidth(1, 1) == math.inf


def test_snake_order_is_boustrophedon_with_adjacent_neighbours():
    system = mesh_system(3, 4)
    order = Topology(system).snake_order()
    assert order == [0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11]
    for a, b in itertools.pairwise(order):
        ca, cb = system.chiplets[a], system.chiplets[b]
        assert abs(ca.x - cb.x) + abs(ca.y - cb.y) == 1


def test_snake_order_skips_faulty_chiplets():
    system = mesh_system(2, 3, faults={"chiplets": ["x1y0"]})
    order = Topology(system).snake_order()
    assert [system.chiplets[i].name for i in order] == ["x0y0", "x2y0", "x2y1", "x1y1", "x0y1"]


def test_cluster_order_follows_chiplet_snake():
    system = load_system("quad-2x2")
    topology = Topology(system)
    order = topology.cluster_order()
    assert sorted(order) == list(range(system.num_clusters))
    chiplets = [system.clusters[c].chiplet for c in order]
    assert chiplets == [c for c in topology.snake_order() for _ in range(4)]
    assert [system.clusters[c].name for c in order[:4]] == ["x0y0.k0", "x0y0.k1", "x0y0.k3",
                                                           "x0y0.k2"]  # fmt: skip


def test_nearest_dram_picks_fewest_hops_then_lowest_id():
    system = load_system("mesh-4x4")
    topology = Topology(system)
    at = {(system.chiplet_of(d.node).x, system.chiplet_of(d.node).y): d.id for d in system.drams}
    assert topology.nearest_dram(0).id == at[(0, 1)]
    assert topology.nearest_dram(system.clusters[15]).id == at[(3, 2)]
    # (1, 1) is 1 hop from (0, 1) and 2 from (0, 2) / (3, 1).
    assert topology.nearest_dram(5).id == at[(0, 1)]
    # (2, 0) is 2 hops from (3, 1) and 3 from (0, 1).
    assert topology.nearest_dram(2).id == at[(3, 1)]


def test_nearest_dram_tie_goes_to_lowest_id():
    system = mesh_system(1, 3, dram_at=[(2, 0), (0, 0)])
    assert Topology(system).nearest_dram(1).id == 0


@pytest.mark.parametrize(("rows", "cols"), [(4, 4), (2, 6), (3, 4), (5, 5)])
def test_bisection_bandwidth_of_mesh_is_closed_form(rows, cols):
    bandwidth = 12.5
    topology = Topology(mesh_system(rows, cols, bandwidth=bandwidth))
    # Cutting across the longer dimension crosses min(rows, cols) links in each direction.
    assert topology.bisection_bandwidth() == min(rows, cols) * bandwidth


def test_bisection_bandwidth_of_4x4_mesh_is_four_links():
    assert Topology(load_system("mesh-4x4")).bisection_bandwidth() == 4 * 32.0


def test_bisection_of_single_chiplet_cuts_its_local_mesh():
    assert Topology(load_system("cluster-4")).bisection_bandwidth() == 2 * 64.0
    assert Topology(mesh_system(1, 1)).bisection_bandwidth() == math.inf


def test_bisection_counts_only_surviving_links():
    intact = Topology(mesh_system(4, 4, bandwidth=1.0)).bisection_bandwidth()
    faulty = Topology(
        mesh_system(4, 4, bandwidth=1.0, faults={"links": [["x1y0", "x2y0"]]})
    ).bisection_bandwidth()
    assert (intact, faulty) == (4.0, 3.0)


def test_graph_carries_link_attributes():
    system = load_system("quad-2x2")
    graph = Topology(system).graph
    assert graph.number_of_nodes() == system.num_clusters
    assert graph.number_of_edges() == len(system.links)
    for link in system.links:
        edge = graph.edges[link.src, link.dst]
        assert (edge["link"], edge["kind"], edge["bandwidth"]) == (
            link.id,
            link.kind,
            link.bandwidth,
        )


def test_system_topology_is_cached_per_system():
    system = mesh_system(2, 2)
    assert system.topology is system.topology
    assert system.topology.route(0, 3) == Topology(system).route(0, 3)


def test_cluster_order_steps_between_neighbours_around_a_dead_chiplet_and_link():
    # The snake order jumped 7 links here (x0y0 -> x1y0 once x0y0-x1y0 and x1y1 are dead).
    system = mesh_system(3, 3, faults={"chiplets": ["x1y1"], "links": [["x0y0", "x1y0"]]})
    topology = Topology(system)
    order = topology.cluster_order()
    assert sorted(order) == list(range(system.num_clusters))
    assert [topology.hops(a, b) for a, b in itertools.pairwise(order)] == [1] * 7


def test_cluster_order_keeps_the_snake_on_intact_meshes():
    topology = Topology(load_system("mesh-4x4"))
    assert topology.cluster_order() == topology._snake_cluster_order()


@pytest.mark.parametrize("seed", range(3))
def test_cluster_order_on_random_faults_of_simba_takes_short_steps(seed):
    from tvm_chiplet.targets.faults import random_faults, with_faults

    healthy = load_system("simba-6x6")
    system, _ = with_faults(healthy, random_faults(healthy, chiplets=4, links=8, seed=seed))
    topology = Topology(system)
    order = topology.cluster_order()
    assert sorted(order) == list(range(system.num_clusters))
    assert max(topology.hops(a, b) for a, b in itertools.pairwise(order)) <= 2

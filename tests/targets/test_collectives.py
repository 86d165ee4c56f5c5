"""How a group all-gathers: a ring of neighbours where it loads the busiest link less than
sending every part directly (as multicast trees where links multicast)."""

from collections import Counter

import pytest

from tvm_chiplet.targets.collectives import (
    direct_load,
    gather_ring,
    reduce_ring,
    ring_load,
    ring_order,
    y_first_sources,
)
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology


def busiest(loads):
    return max(loads.values())


def hops(topology, order):
    return [len(topology.route(a, b)) for a, b in zip(order, [*order[1:], order[0]], strict=True)]


@pytest.mark.parametrize(("rows", "cols"), [(4, 4), (6, 6), (2, 8), (8, 8)])
def test_an_even_grid_gets_a_ring_of_neighbours(rows, cols):
    topology = Topology(mesh_system(rows, cols))
    order = ring_order(topology, range(rows * cols))
    assert sorted(order) == list(range(rows * cols))
    assert hops(topology, order) == [1] * (rows * cols)


def test_an_odd_grid_has_no_ring_so_one_hop_is_longer():
    topology = Topology(mesh_system(5, 5))
    order = ring_order(topology, range(25))
    assert sorted(order) == list(range(25))
    assert sorted(hops(topology, order))[:-1] == [1] * 24  # a 5x5 grid has no Hamiltonian cycle


def test_a_sub_group_rings_its_own_members():
    topology = Topology(mesh_system(4, 4))
    group = [1, 2, 5, 6, 9, 10]  # a 3x2 block
    order = ring_order(topology, group)
    assert sorted(order) == group and hops(topology, order) == [1] * 6


def test_the_ring_halves_the_busiest_link_of_a_direct_gather_on_a_mesh():
    topology = Topology(load_system("mesh-4x4"))
    members = range(16)
    assert busiest(direct_load(topology, members)) == 16
    assert busiest(ring_load(topology, ring_order(topology, members))) == 8
    assert gather_ring(topology, members) is not None


def test_multicast_trees_are_counted_once_per_link_and_tie_with_the_ring_on_simba():
    topology = Topology(load_system("simba-6x6"))
    unicast = Topology(mesh_system(6, 6))
    members = range(36)
    assert busiest(direct_load(topology, members)) < busiest(direct_load(unicast, members))
    # Trees alternating X-first and Y-first put 18 parts on the busiest link: what a corner's
    # two links must carry of the 35 it receives. X-first trees alone put 30 on a corner's
    # vertical link. The ring also carries 18, so the trees (no relaying) are taken.
    assert busiest(direct_load(topology, members)) == 18
    assert busiest(ring_load(topology, ring_order(topology, members))) == 18
    assert gather_ring(topology, members) is None


@pytest.mark.parametrize(("rows", "cols", "y_first", "busiest_link"),
                         [(6, 6, 18, 18), (4, 6, 12, 13), (2, 4, 0, 4), (2, 6, 0, 6)])
def test_all_gather_trees_take_the_orders_that_load_the_busiest_link_least(
        rows, cols, y_first, busiest_link):
    # X-first trees alone: 30 on 6x6 and 18 on 4x6. Alternating by colour: 5 on 2x4 and 8 on
    # 2x6, so 2-wide groups keep X first (along their long side).
    topology = Topology(mesh_system(rows, cols, multicast=True))
    members = range(rows * cols)
    chosen = y_first_sources(topology, members)
    assert len(chosen) == y_first
    assert all((topology.system.chiplet_of(c).x + topology.system.chiplet_of(c).y) % 2
               for c in chosen)
    assert busiest(direct_load(topology, members)) == busiest_link


@pytest.mark.parametrize(("orders", "y_first", "tree_load", "ring"), [
    (["xy"], 0, 30, True), (["yx"], 36, 30, True), (["xy", "yx"], 18, 18, False)])
def test_routers_that_build_trees_in_one_order_only_take_it(orders, y_first, tree_load, ring):
    # [system] multicast_orders: X-first (or Y-first) trees alone load a 6x6 all-gather's
    # busiest link with 30 parts, so it goes around the ring (18) instead.
    data = load_system("simba-6x6").to_dict()
    del data["calibration"]  # measured with both orders: another network for one order
    data["system"]["multicast_orders"] = orders
    topology = Topology(ChipletSystem.from_dict(data))
    members = range(36)
    assert len(y_first_sources(topology, members)) == y_first
    assert busiest(direct_load(topology, members)) == tree_load
    assert (gather_ring(topology, members) is not None) == ring


def test_small_groups_and_ties_gather_directly():
    topology = Topology(load_system("mesh-4x4"))
    assert gather_ring(topology, [0, 1]) is None
    assert gather_ring(topology, [0, 1, 5, 4]) is None  # a 2x2 block: no busier link directly


def test_a_reduce_scatter_rings_where_sending_every_slice_directly_loads_links_more():
    # On multicast links an all-gather's direct sends are trees, as cheap as the ring on a
    # 2x4 block; a reduce-scatter's slices are distinct, so directly they load the busiest
    # link twice as much as around the ring.
    topology = Topology(mesh_system(2, 4, multicast=True))
    group = list(range(8))
    ring = busiest(ring_load(topology, ring_order(topology, group)))
    assert busiest(direct_load(topology, group)) <= ring
    assert busiest(direct_load(topology, group, multicast=False)) >= 2 * ring
    assert gather_ring(topology, group) is None
    assert sorted(reduce_ring(topology, group)) == group
    # Too few members for a ring.
    assert reduce_ring(topology, [0, 1]) is None


def test_a_caller_changing_its_direct_loads_does_not_change_the_next_callers():
    topology = Topology(load_system("simba-6x6"))
    members = range(12)
    first = direct_load(topology, members)
    first.clear()  # a caller's own copy: what it does to it does not reach the next caller
    again = direct_load(topology, members)
    assert again and again == direct_load(Topology(load_system("simba-6x6")), members)


def test_without_multicast_routers_a_direct_gather_sends_a_message_to_each_member():
    topology = Topology(mesh_system(4, 4))
    members = [0, 1, 2, 5]
    by_route = Counter(link for src in members for dst in members if src != dst
                       for link in topology.route(src, dst))
    assert direct_load(topology, members) == by_route
    assert y_first_sources(topology, members) == frozenset()

"""Closed-form checks of the shared cost model."""

import math

import pytest

from tvm_chiplet.targets import cost_model
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology


def line_system():
    """Three one-cluster chiplets a - b - c with different links; DRAM on a."""
    cluster = {"macs_per_cycle": 100, "sram_bytes": 1024, "local_bandwidth": 10.0}
    return ChipletSystem.from_dict(
        {
            "system": {"name": "line", "frequency_hz": 2.0e9},
            "chiplet": [
                {"name": name, "x": x, "y": 0, "cluster": dict(cluster)}
                for x, name in enumerate("abc")
            ],
            "link": [
                {"src": "a", "dst": "b", "bandwidth": 10.0, "latency": 3.0},
                {"src": "b", "dst": "c", "bandwidth": 5.0, "latency": 7.0},
            ],
            "dram": [{"chiplet": "a", "bandwidth": 8.0}],
        }
    )


def test_compute_bound_op_costs_flops_over_two_macs():
    system = line_system()
    cluster = system.clusters[0]
    assert cost_model.op_cycles(2 * 100 * 50, 10.0, 0.0, cluster, system) == 50.0


def test_memory_bound_op_costs_bytes_over_local_bandwidth():
    system = line_system()
    cluster = system.clusters[0]
    assert cost_model.op_cycles(200.0, 10.0 * 70, 0.0, cluster, system) == 70.0


def test_resident_weights_cost_nothing_extra():
    system = line_system()
    cluster = system.clusters[2]
    resident = cost_model.op_cycles(2000.0, 100.0, 4000.0, cluster, system)
    assert resident == cost_model.compute_cycles(2000.0, 100.0, cluster) == 10.0


def test_weights_from_attached_dram_cost_bytes_over_controller_bandwidth():
    system = line_system()
    cluster = system.clusters[0]
    cycles = cost_model.op_cycles(2000.0, 100.0, 400.0, cluster, system, weights_resident=False)
    assert cycles == 10.0 + 400.0 / 8.0


def test_weights_from_far_dram_are_bounded_by_narrowest_link_and_pay_latency():
    system = line_system()
    cluster = system.clusters[2]
    cycles = cost_model.op_cycles(2000.0, 100.0, 400.0, cluster, system, weights_resident=False)
    # Route a -> b -> c: min(8, 10, 5) = 5 bytes/cycle, 3 + 7 cycles of latency.
    assert cycles == 10.0 + 400.0 / 5.0 + 10.0


def test_fetch_is_interleaved_over_controllers_and_waits_for_the_farthest():
    system = mesh_system(1, 4, bandwidth=100.0, latency=4.0, dram_bandwidth=20.0,
                         dram_at=[(0, 0), (3, 0)])  # fmt: skip
    cluster = system.clusters[2]
    # Half the bytes from each controller; the one at x=0 is two hops away.
    assert cost_model.dram_fetch_cycles(200.0, cluster, system) == 100.0 / 20.0 + 2 * 4.0


def test_zero_weight_bytes_need_no_fetch():
    system = line_system()
    cluster = system.clusters[2]
    assert cost_model.op_cycles(0.0, 0.0, 0.0, cluster, system, weights_resident=False) == 0.0


def test_transfer_cycles_are_latency_plus_serialisation_at_narrowest_link():
    system = line_system()
    route = Topology(system).route(0, 2)
    assert cost_model.transfer_cycles(100, route, system) == 3.0 + 7.0 + 100 / 5.0
    assert cost_model.transfer_cycles(100, route[:1], system) == 3.0 + 100 / 10.0


def test_transfer_over_empty_route_is_free():
    assert cost_model.transfer_cycles(10**6, [], line_system()) == 0.0


def test_transfer_on_4x4_mesh_matches_hop_count():
    system = load_system("mesh-4x4")
    route = system.topology.route(0, 15)
    assert cost_model.transfer_cycles(320, route, system) == 6 * 10.0 + 320 / 32.0


def test_invalid_inputs_are_refused():
    system = line_system()
    cluster = system.clusters[0]
    with pytest.raises(ValueError, match="flops must be a number >= 0, found -1"):
        cost_model.op_cycles(-1.0, 0.0, 0.0, cluster, system)
    with pytest.raises(ValueError, match="bytes_moved must be a number >= 0, found nan"):
        cost_model.op_cycles(1.0, math.nan, 0.0, cluster, system)
    with pytest.raises(ValueError, match=r"names link 9, which system 'line' does not have"):
        cost_model.transfer_cycles(1, [0, 9], system)
    with pytest.raises(ValueError, match="nbytes must be a number >= 0"):
        cost_model.transfer_cycles(-5, [0], system)


def test_cycles_to_seconds_uses_system_clock():
    assert cost_model.cycles_to_seconds(4.0e9, line_system()) == 2.0

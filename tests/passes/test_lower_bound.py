"""Tests of the physical lower bound: closed forms on hand-built graphs, soundness on real plans."""

from __future__ import annotations

import json
import math

import networkx as nx
import pytest

import tvm_chiplet
from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.analysis.lower_bound import (
    LowerBound,
    lower_bound,
    model_input_bytes,
    model_output_bytes,
)
from tvm_chiplet.passes.analysis.op_graph import OpGraph, OpNode
from tvm_chiplet.runtime.device import simulate_plan
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model


def make_graph(
    ops: list[tuple[float, int, int, int]],
    edges: tuple[tuple[int, int, int], ...] = (),
    input_uses: tuple[tuple[int, ...], ...] = (),
    output_ops: tuple[int, ...] = (),
) -> OpGraph:
    """An OpGraph of compute ops given as ``(flops, input_bytes, output_bytes, weight_bytes)``."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(ops)))
    for u, v, nbytes in edges:
        graph.add_edge(u, v, nbytes=nbytes)
    return OpGraph(
        ops=[OpNode(i, f"op{i}", "call_tir", *op) for i, op in enumerate(ops)],
        graph=graph,
        input_names=[f"x{i}" for i in range(len(input_uses))],
        input_uses=[list(uses) for uses in input_uses],
        output_ops=list(output_ops),
    )


def two_clusters() -> ChipletSystem:
    """P = 400 FLOPs/cycle, L = 100 bytes/cycle, 2000 bytes of SRAM, 10 bytes/cycle of DRAM."""
    return mesh_system(
        1, 2, macs_per_cycle=100, local_bandwidth=50.0, sram_bytes=1000, dram_bandwidth=10.0
    )


def test_compute_term_is_total_flops_over_total_peak_times_batches():
    graph = make_graph([(4000.0, 0, 0, 0), (2000.0, 0, 0, 0)])
    bound = lower_bound(graph, two_clusters(), batches=4)
    assert bound.compute_cycles == pytest.approx(60.0)
    assert bound.critical_path_cycles == pytest.approx(10.0)
    assert bound.pipeline_cycles == pytest.approx(10.0 + 3 * 15.0)
    assert bound.binding == "compute"
    assert bound.bound_cycles == pytest.approx(60.0)


def test_critical_path_of_a_chain_is_the_sum_of_its_ops():
    chain = make_graph([(400.0, 0, 0, 0)] * 3, edges=((0, 1, 0), (1, 2, 0)))
    assert lower_bound(chain, two_clusters()).critical_path_cycles == pytest.approx(3.0)


def test_critical_path_of_a_diamond_takes_the_longer_branch_only():
    diamond = make_graph(
        [(400.0, 0, 0, 0), (800.0, 0, 0, 0), (400.0, 0, 0, 0), (400.0, 0, 0, 0)],
        edges=((0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)),
    )
    bound = lower_bound(diamond, two_clusters())
    assert bound.critical_path_cycles == pytest.approx(1.0 + 2.0 + 1.0)
    assert bound.compute_cycles == pytest.approx(5.0)


def test_memory_bound_op_takes_its_bytes_over_all_local_bandwidth():
    graph = make_graph([(0.0, 300, 200, 0)])
    assert lower_bound(graph, two_clusters()).critical_path_cycles == pytest.approx(5.0)


def test_plumbing_ops_take_no_time():
    graph = make_graph([(400.0, 0, 0, 0)])
    graph.ops.append(OpNode(1, "tuple", "tuple", 0.0, 10_000, 10_000, 0))
    graph.graph.add_edge(0, 1, nbytes=0)
    assert lower_bound(graph, two_clusters()).critical_path_cycles == pytest.approx(1.0)


def test_pipeline_term_adds_the_steady_bound_per_extra_batch():
    chain = make_graph([(400.0, 0, 0, 0)] * 3, edges=((0, 1, 0), (1, 2, 0)))
    system = two_clusters()
    one, five = lower_bound(chain, system, 1), lower_bound(chain, system, 5)
    assert one.pipeline_cycles == pytest.approx(3.0)
    assert five.steady_cycles == pytest.approx(3.0)
    assert five.pipeline_cycles == pytest.approx(3.0 + 4 * 3.0)
    assert five.compute_cycles == pytest.approx(5 * one.compute_cycles)
    assert five.binding == "compute"


def test_dram_term_loads_fitting_weights_once():
    graph = make_graph([(0.0, 100, 60, 1500)], input_uses=((0,),), output_ops=(0,))
    bound = lower_bound(graph, two_clusters(), batches=3)
    assert bound.dram_bytes == 1500 + 3 * (100 + 60)
    assert bound.dram_cycles == pytest.approx(198.0)
    assert bound.binding == "dram"


def test_dram_term_loads_weights_beyond_sram_once_not_every_batch():
    # Batches may share one load of each weight (batching), so only the inputs and outputs
    # recur: 3 batches pay 2500 + 3 * 160 bytes, not 2500 + 2 * 500 + 3 * 160.
    graph = make_graph([(0.0, 100, 60, 2500)], input_uses=((0,),), output_ops=(0,))
    bound = lower_bound(graph, two_clusters(), batches=3)
    assert bound.dram_bytes == 2500 + 3 * 160
    assert bound.steady_cycles == pytest.approx((2500 + 3 * 160) / 3 / 10.0)
    assert bound.binding == "dram"


def test_steady_bound_reads_weights_once_for_all_batches():
    # Bandwidth-bound by its weights: one batch moves 20 + 1000 B (10.2 cycles), but four
    # batches may share one read of the weights (a microbatch): 20 + 1000 / 4 B each.
    graph = make_graph([(0.0, 10, 10, 1000)])
    bound = lower_bound(graph, two_clusters(), batches=4, weights_preloaded=True)
    assert bound.critical_path_cycles == pytest.approx(10.2)
    assert bound.steady_cycles == pytest.approx(2.7)
    assert bound.pipeline_cycles == pytest.approx(2.7 + 3 * 2.7)
    assert bound.bound_cycles == pytest.approx(10.8)


def test_preloaded_weights_leave_only_overflow_and_io():
    fits = make_graph([(0.0, 100, 60, 1500)], input_uses=((0,),), output_ops=(0,))
    spills = make_graph([(0.0, 100, 60, 2500)], input_uses=((0,),), output_ops=(0,))
    system = two_clusters()
    assert lower_bound(fits, system, 3, weights_preloaded=True).dram_bytes == 3 * 160
    assert lower_bound(spills, system, 3, weights_preloaded=True).dram_bytes == 500 + 3 * 160


def test_heterogeneous_clusters_keep_the_pipeline_term_sound():
    system = ChipletSystem.from_dict(
        {
            "system": {"name": "split", "frequency_hz": 1.0e9},
            "chiplet": [
                {
                    "name": "flops",
                    "x": 0,
                    "y": 0,
                    "cluster": {"macs_per_cycle": 1000, "sram_bytes": 1024, "local_bandwidth": 1.0},
                },
                {
                    "name": "bytes",
                    "x": 1,
                    "y": 0,
                    "cluster": {"macs_per_cycle": 1, "sram_bytes": 1024, "local_bandwidth": 1000.0},
                },
            ],
            "nop": {"bandwidth": 8.0, "latency": 1.0},
            "dram": [{"chiplet": "flops", "bandwidth": 8.0}],
        }
    )
    chain = make_graph(
        [(2002.0, 0, 0, 0), (0.0, 2002, 0, 0), (2002.0, 0, 0, 0)], edges=((0, 1, 0), (1, 2, 0))
    )
    bound = lower_bound(chain, system, batches=3)
    steady = 4.0 / (2000 / 1001)
    assert bound.critical_path_cycles == pytest.approx(4.0)
    assert bound.steady_cycles == pytest.approx(steady)
    assert bound.pipeline_cycles == pytest.approx(3 * steady)
    assert bound.binding == "critical_path"


def test_bisection_term_is_zero_and_never_binds_alone():
    graph = make_graph([(400.0, 0, 0, 0)])
    bound = lower_bound(graph, mesh_system(2, 2), batches=2)
    assert bound.bisection_cycles == 0.0
    assert bound.binding != "bisection"


def test_model_io_bytes_count_each_input_and_output_once():
    graph = make_graph(
        [(0.0, 100, 8, 0), (0.0, 100, 8, 0), (0.0, 300 + 8, 4, 0)],
        edges=((0, 2, 8),),
        input_uses=((0, 1, 2), (2,)),
        output_ops=(2, 2, 1),
    )
    assert model_input_bytes(graph) == 300
    assert model_output_bytes(graph) == 4 + 8


def test_seconds_ratio_and_dict():
    graph = make_graph([(4000.0, 0, 0, 0)])
    bound = lower_bound(graph, two_clusters(), batches=2)
    assert bound.latency_bound_s == pytest.approx(10.0 / 1.0e9)
    assert bound.throughput_bound_per_s == pytest.approx(2 * 1.0e9 / 20.0)
    assert bound.ratio(30.0) == pytest.approx(1.5)
    data = json.loads(json.dumps(bound.to_dict()))
    assert data["binding"] == "compute"
    assert data["bound_cycles"] == pytest.approx(20.0)


def test_empty_graph_has_a_zero_bound():
    bound = lower_bound(make_graph([]), two_clusters())
    assert bound.bound_cycles == 0.0
    assert math.isinf(bound.throughput_bound_per_s)
    assert bound.ratio(0.0) == 1.0


def test_bad_arguments_are_refused():
    graph = make_graph([(400.0, 0, 0, 0)] * 2, edges=((0, 1, 0), (1, 0, 0)))
    with pytest.raises(ValueError, match="batches must be an integer >= 1"):
        lower_bound(make_graph([]), two_clusters(), batches=0)
    with pytest.raises(ValueError, match="has a cycle"):
        lower_bound(graph, two_clusters())
    with pytest.raises(ValueError, match="finite number >= 0"):
        lower_bound(make_graph([]), two_clusters()).ratio(-1.0)


@pytest.mark.parametrize("model_name", ["small-cnn", "transformer-block"])
@pytest.mark.parametrize("preset", ["cluster-4", "mesh-4x4", "simba-6x6"])
def test_simulated_plans_never_beat_the_bound(model_name, preset):
    model = models.get_model(model_name)
    lib = tvm_chiplet.build(model, target=f"chiplet/{preset}")
    graph = extract_op_graph(ReduceGraph()(load_model(model)), lib.system.device_dtype)
    for batches in (1, 8):
        sim = simulate_plan(lib.plan, lib.system, batches=batches)
        # The simulator starts with resident weights already in SRAM and models no host I/O.
        bound = lower_bound(graph, lib.system, batches, weights_preloaded=True,
                            io_in_dram=False)
        assert isinstance(bound, LowerBound)
        assert bound.bound_cycles > 0
        assert bound.ratio(sim.total_cycles) >= 1.0 - 1e-9, (preset, batches, bound.to_dict())


def test_io_can_be_left_out_of_the_dram_term():
    spills = make_graph([(0.0, 100, 60, 2500)], input_uses=((0,),), output_ops=(0,))
    bound = lower_bound(spills, two_clusters(), 3, weights_preloaded=True, io_in_dram=False)
    assert bound.dram_bytes == 500


def test_energy_term_is_every_mac_and_the_forced_dram_bytes_at_the_cheapest_rates():
    from tests.runtime.test_device_energy import energy_system

    system = energy_system(mac=0.5, dram=10.0)
    graph = make_graph([(4000.0, 0, 0, 3000), (2000.0, 0, 0, 0)])
    bound = lower_bound(graph, system, batches=4, weights_preloaded=True, io_in_dram=False)
    overflow = 3000 - system.total_sram_bytes
    assert bound.dram_bytes == overflow
    assert bound.energy_pj == pytest.approx(4 * 6000 / 2 * 0.5 + 8 * overflow * 10.0)
    assert bound.energy_per_inference_pj == pytest.approx(bound.energy_pj / 4)


def test_energy_term_is_zero_without_coefficients():
    assert lower_bound(make_graph([(4000.0, 0, 0, 0)]), two_clusters()).energy_pj == 0.0


def test_simulated_energy_never_beats_the_energy_bound():
    from tests.runtime.test_device_energy import energy_system, run

    system = energy_system()
    sim = run(system, batches=3, weight_bytes=3000.0)
    graph = make_graph([(2000.0, 0, 64, 0), (4000.0, 64, 0, 3000)], edges=((0, 1, 64),))
    bound = lower_bound(graph, system, batches=3, weights_preloaded=True, io_in_dram=False)
    assert 0 < bound.energy_per_inference_pj <= sim.energy.total_pj

"""Input-level data parallelism: copies of a pipeline on congruent tiles of the chiplet grid."""

import numpy as np
import pytest

from tests.passes.test_ilp_planner import make_graph
from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.dram import fastest_dram
from tvm_chiplet.passes.planners.evaluate import placement_items, simulate_placement
from tvm_chiplet.passes.planners.microbatch import fastest_microbatch
from tvm_chiplet.passes.planners.pipeline_planner import PipelinePlanner
from tvm_chiplet.passes.planners.placement import Placement, PlanningError
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import (
    WorkItem,
    build_workload,
    replicate_items,
    replicate_loans,
)

# Two ops whose activations are so large that crossing a link costs more than computing.
HEAVY_ACTIVATIONS = make_graph([(2e6, 4_000_000, 1000), (2e6, 64, 1000)], [(0, 1)])


def problem_on(graph, rows=2, cols=2, sram_bytes=2 * 2**20):
    system = mesh_system(rows, cols, sram_bytes=sram_bytes)
    return PlanningProblem(graph, system, Topology(system), simulator=simulate_workload)


def test_tilings_cut_the_grid_into_congruent_tiles_squarest_first():
    topology = Topology(load_system("mesh-4x4"))
    halves, *_ = topology.tilings(2)
    assert halves == [[0, 1, 2, 3, 7, 6, 5, 4], [8, 9, 10, 11, 15, 14, 13, 12]]
    quadrants = topology.tilings(4)[0]
    assert quadrants[0] == [0, 1, 5, 4] and quadrants[3] == [10, 11, 15, 14]
    assert topology.tilings(3) == [] and topology.tilings(1) == []


def test_a_single_chiplet_is_tiled_along_its_local_mesh_of_clusters():
    topology = Topology(load_system("cluster-4"))  # one die, clusters k0 k1 / k2 k3
    assert topology.tilings(2)[0] == [[0, 1], [2, 3]]
    assert topology.tilings(4)[0] == [[0], [1], [2], [3]]


def test_a_grid_with_a_missing_chiplet_has_no_tilings():
    system = mesh_system(2, 2, faults={"chiplets": ["x1y1"]})
    assert Topology(system).tilings(2) == []


def test_replicate_items_copies_work_onto_mapped_clusters():
    items = [WorkItem("a", 0, 10.0, 8.0, 0.0), WorkItem("b", 1, 10.0, 8.0, 0.0, [(0, 4)])]
    copies = replicate_items(items, [{0: 2, 1: 3}])
    assert [(i.name, i.cluster, list(i.deps)) for i in copies] == [
        ("a", 0, []), ("b", 1, [(0, 4)]), ("a@1", 2, []), ("b@1", 3, [(2, 4)])]


def test_every_copy_borrows_from_its_own_lender():
    # Op 0 streams on cluster 0 and borrows cluster 1's SRAM; the copy runs on 2 and 3.
    graph = make_graph([(2e6, 64, 3 * 2**20)], [])
    problem = problem_on(graph, sram_bytes=2**20)
    placement = Placement("pipeline", (0,), (0,), (0,), sram_loans=((0, 1, 2**19),),
                          replicas=(((0, 2), (1, 3)),))
    assert replicate_loans(placement.sram_loans, [{0: 2, 1: 3}]) == [(0, 1, 2**19),
                                                                      (2, 3, 2**19)]
    items = placement_items(problem, placement)
    _, _, _, fetches = build_workload(items, problem.system, problem.topology,
                                      sram_loans=replicate_loans(placement.sram_loans,
                                                                 [{0: 2, 1: 3}]))
    assert {(f["cluster"], f["lender"]) for f in fetches if f["lender"] is not None} == {
        (0, 1), (2, 3)}
    sim = simulate_placement(problem, placement, batches=4)
    alone = simulate_placement(problem, Placement("pipeline", (0,), (0,), (0,),
                                                  sram_loans=((0, 1, 2**19),)), batches=2)
    assert sim.inputs == 4
    assert sim.dram_bytes.sum() == pytest.approx(2 * alone.dram_bytes.sum())


def test_two_copies_run_twice_the_inputs_in_the_time_of_one():
    system = mesh_system(2, 2)
    items = [WorkItem("a", 0, 2e6, 64.0, 0.0), WorkItem("b", 1, 2e6, 64.0, 0.0, [(0, 4096)])]
    tasks, messages, _, fetches = build_workload(items, system)
    one = simulate_workload(tasks, messages, system, batches=4, fetches=fetches)
    tasks, messages, _, fetches = build_workload(replicate_items(items, [{0: 2, 1: 3}]), system)
    two = simulate_workload(tasks, messages, system, batches=8, fetches=fetches, copies=2)
    assert two.inputs == 8 and two.batches == 4
    assert two.total_cycles == pytest.approx(one.total_cycles)
    assert two.throughput_per_cycle == pytest.approx(2 * one.throughput_per_cycle)


def test_placement_refuses_copies_that_overlap():
    with pytest.raises(PlanningError, match="replica 1 must map each used cluster"):
        Placement("pipeline", (0, 1), (0, 1), (0, 1), replicas=(((0, 1), (1, 2)),))
    with pytest.raises(PlanningError, match="replica 2"):
        Placement("pipeline", (0,), (0,), (0,), replicas=(((0, 1),), ((0, 1),)))


def test_placement_with_copies_round_trips_through_a_dict():
    placement = Placement("pipeline", (0, 1), (0, 1), (0, 1), replicas=(((0, 2), (1, 3)),))
    assert Placement.from_dict(placement.to_dict()) == placement
    assert placement.copies == 2


def test_a_model_too_costly_to_split_runs_whole_on_every_cluster():
    problem = problem_on(HEAVY_ACTIVATIONS)
    single = PipelinePlanner(batches=8, replicate=False).plan(problem)
    assert single.copies == 1 and len(set(single.op_cluster)) == 1
    chosen = PipelinePlanner(batches=8).plan(problem)
    assert chosen.copies == 4
    used = {i.cluster for i in placement_items(problem, chosen)}
    assert used == {0, 1, 2, 3}
    ratio = (simulate_placement(problem, single, 8).total_cycles
             / simulate_placement(problem, chosen, 8).total_cycles)
    assert ratio == pytest.approx(4.0, rel=0.01)


def test_copies_are_tried_only_where_a_tile_holds_every_weight():
    graph = make_graph([(2e6, 4_000_000, 1_500_000), (2e6, 64, 1_500_000)], [(0, 1)])
    chosen = PipelinePlanner(batches=8).plan(problem_on(graph))
    # 3 MB of weights: a half of the 2x2 grid holds 4 MiB, a single cluster 2 MiB.
    assert set(chosen.notes["copies_tried"]) == {1, 2}


def test_planning_on_a_subset_uses_only_those_clusters():
    problem = problem_on(make_graph([(2e6, 64, 0)] * 4, [(0, 1), (1, 2), (2, 3)]))
    placement = PipelinePlanner(batches=8, clusters=[2, 3]).plan(problem)
    assert set(placement.op_cluster) <= {2, 3} and placement.copies == 1
    with pytest.raises(PlanningError, match=r"clusters \[7\] are not clusters"):
        PipelinePlanner(clusters=[7]).plan(problem)


def test_max_stages_turns_copies_off():
    problem = problem_on(HEAVY_ACTIVATIONS)
    assert PipelinePlanner(batches=8, max_stages=2).plan(problem).copies == 1
    assert np.isfinite(simulate_placement(problem, PipelinePlanner(batches=8).plan(problem),
                                          1).total_cycles)


def test_copies_that_borrow_sram_try_microbatches_and_dram_placements_without_their_lenders():
    # Each copy streams its op's weights and borrows from a neighbour: copy 0 runs on cluster
    # 0 and borrows from 1, its copy runs on 2 and borrows from 3. Without the loans the
    # lenders drop out of the copies.
    problem = problem_on(make_graph([(2e6, 64, 100_000)], []), sram_bytes=8192)
    placement = Placement("pipeline", (0,), (0,), (0,), replicas=(((0, 2), (1, 3)),),
                          sram_loans=((0, 1, 4096),))
    bare = placement.without_loans()
    assert bare.sram_loans == () and bare.replicas == (((0, 2),),) and bare.copies == 2
    assert bare.without_loans() is bare
    chosen, _ = fastest_microbatch(problem, placement, 4, lambda sim: sim.total_cycles)
    assert set(chosen.notes["microbatch_simulated_cycles"]) == {1, 2}
    assert chosen.microbatch == 1 or chosen.sram_loans == ()
    placed, _ = fastest_dram(problem, placement, 4)
    assert placed.copies == 2

"""Planners that split ops: tensor-parallel, layer-sequential; and how splits are simulated."""

import dataclasses
from itertools import pairwise

import pytest

from tests.passes.test_ilp_planner import make_graph
from tvm_chiplet.passes.planners import (
    LayerSequentialPlanner,
    PlanningError,
    PlanningProblem,
    TensorParallelPlanner,
    get_planner,
    tensor_parallel,
)
from tvm_chiplet.passes.planners.evaluate import placement_items, simulate_placement
from tvm_chiplet.passes.planners.layouts import FOLLOW, LayoutCosts, row_order
from tvm_chiplet.passes.planners.placement import OpSplit, Placement
from tvm_chiplet.passes.planners.tensor_parallel import collective_messages, snake_tiles
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import batched, reuses_weights

# A chain of three heavy ops (conv-like) and one light op.
CHAIN = make_graph(
    [(4e9, 40_000, 400_000), (8e9, 40_000, 800_000), (4e9, 40_000, 400_000), (1e5, 4000, 0)],
    [(0, 1), (1, 2), (2, 3)],
)
DIMS = {0: {"out_channels": 64, "rows": 56}, 1: {"out_channels": 128, "in_channels": 64},
        2: {"cols": 3, "reduction": 512}}


def problem(clusters=4, dims=DIMS):
    system = mesh_system(2, clusters // 2, bandwidth=64.0)
    return PlanningProblem(CHAIN, system, Topology(system), dims, simulator=simulate_workload)


def test_heavy_ops_are_split_and_light_ones_are_not():
    placement = TensorParallelPlanner().plan(problem())
    split = {s.op_id: s for s in placement.splits}
    assert set(split) == {0, 1, 2}
    assert all(s.parts >= 2 for s in split.values())
    assert split[2].dim in ("cols", "reduction") and split[2].parts <= 4
    assert len(set(placement.op_cluster)) == 1  # every combine runs on the hub


def test_tensor_parallel_beats_one_cluster():
    p = problem()
    single = get_planner("single").plan(p)
    tp = TensorParallelPlanner().plan(p)
    assert (simulate_placement(p, tp).total_cycles
            < 0.6 * simulate_placement(p, single).total_cycles)


def test_max_parts_limits_every_split():
    placement = TensorParallelPlanner(max_parts=2).plan(problem())
    assert placement.splits and all(s.parts == 2 for s in placement.splits)


def test_layer_sequential_splits_every_op_over_all_clusters_along_weights():
    placement = LayerSequentialPlanner().plan(problem())
    split = {s.op_id: s for s in placement.splits}
    assert (split[0].dim, split[0].parts) == ("out_channels", 4)
    assert (split[1].dim, split[1].parts) == ("out_channels", 4)
    assert (split[2].dim, split[2].parts) == ("cols", 3)  # only 3 columns
    assert 3 not in split


def test_split_strategies_without_split_dims_say_why():
    for planner in (TensorParallelPlanner(), LayerSequentialPlanner()):
        with pytest.raises(PlanningError, match=r"which ops can be split.*pipeline"):
            planner.plan(problem(dims={}))


def test_a_split_becomes_parts_and_a_combine_in_the_workload():
    p = problem()
    placement = Placement("manual", (0, 0, 0, 0), (0, 0, 0, 0), (0,),
                          splits=(OpSplit(1, "out_channels", (0, 1, 2)),
                                  OpSplit(2, "reduction", (1, 3))))
    items = placement_items(p, placement)
    names = [item.name for item in items]
    assert names == ["op0", "op1#0", "op1#1", "op1#2", "op1#combine", "op2#0", "op2#1",
                     "op2#combine", "op3"]
    parts = items[1:4]
    assert [item.cluster for item in parts] == [0, 1, 2]
    assert all(item.weight_bytes == pytest.approx(800_000 / 3) for item in parts)
    assert all(item.deps == [(0, 40_000)] for item in parts)  # whole input to every part
    assert items[4].deps == [(i, pytest.approx(40_000 / 3)) for i in (1, 2, 3)]  # gather
    reduction = items[5:7]
    assert all(item.deps == [(4, 20_000)] for item in reduction)  # half the input each
    assert items[7].deps == [(5, 40_000), (6, 40_000)]  # whole-size partial sums
    assert items[7].flops == pytest.approx(40_000 / 4)  # one add per output element


def channel_heavy(dims=None):
    """Eight 1x1-conv-like layers whose activations (2 MB) outweigh their weights (256 kB),
    on a 4x4 mesh; ``dims``: each op's split dimensions (default: input and output
    channels)."""
    graph = make_graph([(2e8, 2_000_000, 262_144)] * 8, list(pairwise(range(8))))
    dims = dims or {"out_channels": 512, "in_channels": 512}
    system = mesh_system(4, 4, bandwidth=32.0)
    return PlanningProblem(graph, system, Topology(system), {op: dims for op in range(8)},
                           simulator=simulate_workload)


def test_for_one_input_channel_heavy_layers_take_blocks_splits(monkeypatch):
    # An output-channel split reads every input whole on each cluster, an input-channel split
    # reduce-scatters whole outputs; a blocks split reads a quarter and sums a quarter.
    p = channel_heavy()
    placement = TensorParallelPlanner().plan(p)
    assert sum(s.dim.startswith("blocks/") for s in placement.splits) >= 2
    monkeypatch.setattr(tensor_parallel, "block_dims", lambda dims: None)
    flat = TensorParallelPlanner().plan(p)
    assert not any(s.dim.startswith("blocks/") for s in flat.splits)
    assert placement.objective_cycles < 0.85 * flat.objective_cycles


def test_bad_split_is_refused():
    with pytest.raises(PlanningError, match="unknown split dim"):
        OpSplit(0, "diagonal", (0, 1))
    with pytest.raises(PlanningError, match="needs >= 2 parts"):
        OpSplit(0, "rows", (0,))
    with pytest.raises(PlanningError, match=r"blocks/4 split of op 0 over 6 clusters.*multiple"):
        OpSplit(0, "blocks/4", tuple(range(6)))
    with pytest.raises(PlanningError, match=r"blocks/4 split of op 0 over 4 clusters.*twice"):
        OpSplit(0, "blocks/4", tuple(range(4)))
    with pytest.raises(PlanningError, match="max_parts must be >= 1"):
        TensorParallelPlanner(max_parts=0)


def test_placement_with_splits_round_trips_through_a_dict():
    placement = Placement("manual", (0, 1), (0, 1), (0, 1),
                          splits=(OpSplit(1, "cols", (1, 2)),), dram_policy="balanced",
                          dram_shares=((1, 0, 0.5), (1, 1, 0.5)))
    assert Placement.from_dict(placement.to_dict()) == placement


def test_for_many_inputs_on_a_large_grid_copies_of_a_tile_plan_win():
    system = mesh_system(4, 4, bandwidth=16.0)
    p = PlanningProblem(CHAIN, system, Topology(system), DIMS)
    one = TensorParallelPlanner(batches=1).plan(p)
    many = TensorParallelPlanner(batches=64).plan(p)
    assert one.copies == 1
    assert many.copies > 1
    # Every copy maps each cluster of the tile plan to a cluster of its own tile.
    used = set(many.clusters_used())
    assert len(used) * many.copies <= system.num_clusters
    for mapping in many.replicas:
        assert {src for src, _ in mapping} == used
        assert not {dst for _, dst in mapping} & used
    estimates = many.notes["estimated_cycles"]
    assert estimates[str(many.copies)] == min(estimates.values())
    # The tile plan's splits stay inside the tile.
    assert all(set(s.clusters) <= used for s in many.splits)


def test_for_one_input_a_plan_without_2d_splits_is_searched_only_when_an_op_has_them():
    p = problem(dims={**DIMS, 0: {"out_channels": 64}})  # no op has rows and out channels
    assert "1 untiled" not in TensorParallelPlanner(batches=1).plan(p).notes["layouts_started"]
    dims = {**DIMS, 1: {"rows": 56, "out_channels": 128, "in_channels": 64}}
    started = TensorParallelPlanner(batches=1).plan(problem(dims=dims)).notes["layouts_started"]
    assert {"1", "1 untiled"} <= set(started)


def test_the_plan_without_2d_splits_is_judged_beside_the_best_layouts_not_in_their_place(
        monkeypatch):
    # With every layout close, the two best estimates other than "1 untiled" are simulated,
    # and "1 untiled" beside "1" (BERT-base batch 1 on simba-6x6 lost its 2-stage plan, 7 %
    # faster as built, when "1 untiled" took the second place).
    monkeypatch.setattr(tensor_parallel, "JUDGED_WITHIN", float("inf"))
    monkeypatch.setattr(tensor_parallel, "JUDGED_ACROSS", float("inf"))
    monkeypatch.setattr(tensor_parallel, "JUDGED_MESSAGES", 10**9)
    dims = {**DIMS, 1: {"rows": 56, "out_channels": 128, "in_channels": 64}}
    base = problem(8, dims=dims)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    notes = TensorParallelPlanner(batches=1).plan(p).notes
    beside = {"1 untiled", "whole", "1 on a tile of 2"}  # judged beside the best two
    others = sorted((key for key in notes["estimated_cycles"] if key not in beside),
                    key=notes["estimated_cycles"].get)
    assert set(notes["simulated_cycles"]) == {*others[:2], *beside}
    assert "1" in others[:2]


@pytest.mark.parametrize("bandwidth, kept", [(0.05, "1 on a tile of 2"), (0.01, "whole")])
def test_for_one_input_the_model_whole_and_on_a_tile_are_judged_beside_the_grids_plan(
        monkeypatch, bandwidth, kept):
    # Links so slow that the grid's splits simulate slower than the model whole on one
    # cluster, and an estimate that takes every redistribution as free (as it underrates
    # small messages): the judge keeps the best plan on a quarter of the grid (2 of 8
    # clusters), or at slower links still the model whole.
    monkeypatch.setattr(LayoutCosts, "move", lambda self, src, want, nbytes: 0.0)
    system = mesh_system(2, 4, bandwidth=bandwidth)
    base = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    placement = TensorParallelPlanner(batches=1).plan(p)
    estimated, simulated = (placement.notes[k] for k in ("estimated_cycles", "simulated_cycles"))
    assert {"1", "whole", "1 on a tile of 2"} <= set(simulated)
    assert estimated["1"] < min(estimated["whole"], estimated["1 on a tile of 2"])
    assert min(simulated, key=simulated.get) == kept
    assert {c for s in placement.splits for c in s.clusters} == ({0, 1} if kept != "whole"
                                                                  else set())
    # For many inputs, copies of the model run whole: neither is judged.
    many = TensorParallelPlanner(batches=8).plan(p).notes
    assert not {"whole", "1 on a tile of 2"} & set(many["estimated_cycles"])


def test_a_plan_on_a_tile_is_kept_only_if_the_grids_plan_finished_is_not_faster(monkeypatch):
    # The grid's best plan, judged in Z order with its weights interleaved, is finished too
    # (judged in the grid's rows, its weights placed as simulates fastest) before a plan on a
    # tile judged faster than it is kept: here the finished grid's plan simulates in 1 cycle.
    monkeypatch.setattr(LayoutCosts, "move", lambda self, src, want, nbytes: 0.0)
    grid = set(range(8))

    def fastest_dram(problem, placement, batches, as_built=False, nearest=False):
        on_grid = any(set(s.clusters) == grid for s in placement.splits)
        return placement, 1.0 if on_grid else 9e9

    monkeypatch.setattr(tensor_parallel, "fastest_dram", fastest_dram)
    system = mesh_system(2, 4, bandwidth=0.05)
    base = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    placement = TensorParallelPlanner(batches=1).plan(p)
    simulated = placement.notes["simulated_cycles"]
    assert min(simulated, key=simulated.get) == "1 on a tile of 2"
    assert {c for s in placement.splits for c in s.clusters} == grid


@pytest.mark.parametrize("sram_bytes", [300_000, 2 * 2**20])
def test_where_the_device_pools_the_grids_replicas_a_plan_so_estimated_is_judged_beside_it(
        sram_bytes):
    # 1.6 MB of weights over four clusters: with 300 kB each the grid's plan streams, so the
    # device pools its replicated weights (row parts'), and the plan estimated that way is
    # simulated beside it; with 2 MB each nothing streams and it is not searched.
    system = mesh_system(2, 2, bandwidth=64.0, sram_bytes=sram_bytes)
    dims = {**DIMS, 0: {"rows": 56}}  # op 0 splits by rows only: four replicas of 400 kB
    base = PlanningProblem(CHAIN, system, Topology(system), dims, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    notes = TensorParallelPlanner(batches=1).plan(p).notes
    streams = sram_bytes < 1_000_000
    assert ("1 replicas pooled" in notes["estimated_cycles"]) == streams
    assert ("1 replicas pooled" in notes.get("simulated_cycles", {})) == streams


def test_splits_over_the_whole_grid_are_judged_in_z_order_and_in_rows(monkeypatch):
    # A 2x4 grid: Z order takes 2x2 squares, rows the grid's rows. The plan's splits over all
    # 8 clusters are simulated in both orders and the faster kept.
    base = problem(8)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    plan = TensorParallelPlanner(batches=1).plan(p)
    whole = [split for split in plan.splits if len(split.clusters) == 8]
    assert whole
    cycles = plan.notes["grid_order_simulated_cycles"]
    kept = plan.notes["grid_order"]
    assert cycles[kept] == min(cycles.values())
    rows = tuple(row_order(p.topology))
    assert all((split.clusters == rows) == (kept != "z") for split in whole)
    # A plan realising to more messages than the budget is kept as planned.
    monkeypatch.setattr(tensor_parallel, "ROWS_JUDGED_MESSAGES", 0)
    again = TensorParallelPlanner(batches=1).plan(
        dataclasses.replace(base, realise=lambda placement: (base.graph, placement)))
    assert "grid_order" not in again.notes
    assert all(split.clusters != rows for split in again.splits if len(split.clusters) == 8)


def test_a_2d_split_over_a_group_that_is_no_rectangle_is_judged_over_the_grid_in_rows():
    # A 3x3 grid: Z order's first 8 clusters are no rectangle. Op 0's 2-D split over them is
    # also judged over all 9 in rows, a band per grid row (3 output-channel slices each).
    system = mesh_system(3, 3, bandwidth=64.0)
    base = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    eight = LayoutCosts(p).groups[-2].members
    assert len(eight) == 8 and row_order(p.topology, eight) is None
    placement = Placement("manual", (0,) * 4, (0,) * 4, (0,),
                          splits=(OpSplit(0, "tiles/2", eight),))
    kept = TensorParallelPlanner(batches=1)._in_rows(p, placement)
    cycles = kept.notes["grid_order_simulated_cycles"]
    assert set(cycles) == {"z", "rows, 2-D splits in grid rows"}  # none over the whole grid
    assert cycles[kept.notes["grid_order"]] == min(cycles.values())
    rebanded = OpSplit(0, "tiles/3", tuple(row_order(p.topology)))
    assert kept.splits == ((rebanded,) if kept.notes["grid_order"] != "z" else placement.splits)
    # An op with fewer rows than the grid has rows keeps its split, and so does a stage of a
    # pipeline (its splits keep to its tile).
    few = dataclasses.replace(p, split_dims={**DIMS, 0: {"out_channels": 64, "rows": 2}})
    assert "grid_order" not in TensorParallelPlanner(batches=1)._in_rows(few, placement).notes
    staged = dataclasses.replace(placement, op_stage=(0, 0, 1, 1), stage_clusters=(0, 8))
    assert TensorParallelPlanner(batches=1)._in_rows(p, staged) is staged


def test_2d_splits_over_the_whole_grid_are_judged_with_their_bands_on_sub_meshes():
    # A 4x4 grid: a 2-D split into 4 bands of 4 is judged with a band per grid row and with
    # its bands on the grid's 2x2 squares, each square's members row by row (the members
    # holding one output-channel slice at the same place in every square).
    system = mesh_system(4, 4, bandwidth=64.0)
    base = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    rows = tuple(row_order(p.topology))
    placement = Placement("manual", (0,) * 4, (0,) * 4, (0,),
                          splits=(OpSplit(0, "tiles/4", rows),))
    kept = TensorParallelPlanner(batches=1)._in_rows(p, placement)
    cycles = kept.notes["grid_order_simulated_cycles"]
    assert set(cycles) == {"z", "rows, 2-D splits in sub-meshes"}  # z: already in rows
    assert cycles[kept.notes["grid_order"]] == min(cycles.values())
    squares = tuple(rows[i] for corner in (0, 2, 8, 10) for i in (corner, corner + 1,
                                                                   corner + 4, corner + 5))
    assert kept.splits[0].clusters == (squares if "sub-meshes" in kept.notes["grid_order"]
                                       else rows)
    # 2 bands of 8: the squarest rectangles are two grid rows each, the order it has.
    halves = dataclasses.replace(placement, splits=(OpSplit(0, "tiles/8", rows),))
    assert "grid_order" not in TensorParallelPlanner(batches=1)._in_rows(p, halves).notes


@pytest.mark.parametrize("even_faster", [True, False])
def test_a_batch_1_plan_is_judged_with_its_row_bands_centred_and_even(even_faster, monkeypatch):
    # The realiser bounds row bands as the placement says (Placement.even_rows); here the
    # plan realised one way runs op 1 at twice its work. The faster way is kept.
    slower = make_graph([(4e9, 40_000, 400_000), (16e9, 40_000, 800_000),
                         (4e9, 40_000, 400_000), (1e5, 4000, 0)], [(0, 1), (1, 2), (2, 3)])
    base = problem(8)

    def realise(placement):
        return (base.graph if placement.even_rows == even_faster else slower), placement

    p = dataclasses.replace(base, realise=realise)
    planner = TensorParallelPlanner(batches=1)
    rows = Placement("manual", (0,) * 4, (0,) * 4, (0,),
                     splits=(OpSplit(0, "rows", tuple(range(8))),))
    cycles = simulate_placement(p, rows, 1, as_built=True).total_cycles
    kept, fastest = planner._with_row_bounds(p, rows, cycles)
    bounds = kept.notes["row_bounds_simulated_cycles"]
    assert fastest == min(bounds.values())
    assert (bounds["even"] < bounds["centred"]) == even_faster
    assert kept.even_rows == even_faster
    assert Placement.from_dict(kept.to_dict()).even_rows == even_faster
    # Without a conv split by rows (op 1 by output channels) both realise alike: not judged.
    channels = dataclasses.replace(rows, splits=(OpSplit(1, "out_channels", tuple(range(8))),))
    assert planner._with_row_bounds(p, channels, cycles) == (channels, cycles)
    # The planner judges its batch-1 plan so; a plan for many inputs keeps centred bounds.
    assert "row_bounds_simulated_cycles" not in TensorParallelPlanner(batches=4).plan(p).notes
    # A plan that realises to more collective messages than are judged is kept as it is.
    monkeypatch.setattr(tensor_parallel, "ROWS_JUDGED_MESSAGES", collective_messages(rows) - 1)
    assert planner._with_row_bounds(p, rows, cycles) == (rows, cycles)


@pytest.mark.parametrize("bands_faster", [True, False])
def test_attention_projections_in_few_bands_are_judged_in_more(bands_faster):
    # op 0 projects (rows by columns), op 1 reshapes to 2 heads, op 2 is attention's scores
    # (a matmul of activations). In 2 bands of 8 slices attention would run on 2 x 2 of the
    # 16 clusters: the plan is also simulated in 4 bands of 4 and 8 bands of 2. Here it
    # realises op 2 at 8 times its work unless the projection has more bands (or, the other
    # way round, unless it keeps its 2), and the faster is kept.
    graph = make_graph([(4e9, 40_000, 400_000), (0, 40_000, 0), (8e9, 40_000, 0),
                        (1e5, 4000, 0)], [(0, 1), (1, 2), (2, 3)])
    slower = make_graph([(4e9, 40_000, 400_000), (0, 40_000, 0), (64e9, 40_000, 0),
                         (1e5, 4000, 0)], [(0, 1), (1, 2), (2, 3)])
    system = mesh_system(4, 4, bandwidth=64.0)
    base = PlanningProblem(graph, system, Topology(system),
                           {0: {"rows": 64, "cols": 64}, 2: {"rows": 64, "cols": 64}},
                           simulator=simulate_workload, follow_ops={2: 2})

    def realise(placement):
        more = placement.splits[0].dim != "tiles/8"
        return (base.graph if more == bands_faster else slower), placement

    p = dataclasses.replace(base, realise=realise)
    few = Placement("manual", (0,) * 4, (0,) * 4, (0,),
                    splits=(OpSplit(0, "tiles/8", tuple(range(16))),))
    cycles = simulate_placement(p, few, 1, as_built=True).total_cycles
    kept, kept_cycles = TensorParallelPlanner(batches=1)._with_attention_bands(p, few, cycles)
    tried = kept.notes["attention_bands_simulated_cycles"]
    assert set(tried) == {"tiles/8", "tiles/4", "tiles/2"}
    assert kept_cycles == min(tried.values())
    assert tried["tiles/8"] == cycles
    assert kept.splits[0].dim == min(tried, key=tried.get)
    assert (kept.splits[0].dim != "tiles/8") == bands_faster
    # In 8 bands of 2 slices attention runs on all 16: not judged.
    many = dataclasses.replace(few, splits=(OpSplit(0, "tiles/2", tuple(range(16))),))
    assert TensorParallelPlanner(batches=1)._with_attention_bands(p, many, cycles)[0] is many


@pytest.mark.parametrize("stationary_faster", [True, False])
def test_2d_splits_of_pooled_weights_are_judged_along_their_channels(stationary_faster):
    # Op 0's 12 MB of weights in 4 bands of 4 slices: each slice (3 MB) is held by 4 clusters
    # of 2 MB SRAM, which pool it. The plan is also simulated with op 0 split along its output
    # channels alone over the same clusters; here it realises op 1 at 8 times its work unless
    # op 0 is (or, the other way round, unless it keeps its 2-D split), and the faster is kept.
    graph = make_graph([(4e9, 40_000, 12_000_000), (8e9, 40_000, 0), (1e5, 4000, 0)],
                       [(0, 1), (1, 2)])
    slower = make_graph([(4e9, 40_000, 12_000_000), (64e9, 40_000, 0), (1e5, 4000, 0)],
                        [(0, 1), (1, 2)])
    system = mesh_system(4, 4, bandwidth=64.0)
    base = PlanningProblem(graph, system, Topology(system),
                           {0: {"out_channels": 64, "in_channels": 64, "rows": 64}},
                           simulator=simulate_workload)

    def realise(placement):
        stationary = placement.splits[0].dim == "out_channels"
        return (base.graph if stationary == stationary_faster else slower), placement

    p = dataclasses.replace(base, realise=realise)
    tiled = Placement("manual", (0,) * 3, (0,) * 3, (0,),
                      splits=(OpSplit(0, "tiles/4", tuple(range(16))),))
    cycles = simulate_placement(p, tiled, 1, as_built=True).total_cycles
    kept = TensorParallelPlanner(batches=1)._with_stationary_weights(p, tiled, cycles)
    tried = kept.notes["stationary_weights_simulated_cycles"]
    assert list(tried) == ["as planned", "op0 (op 0) tiles/4 -> out_channels"]
    assert tried["as planned"] == cycles
    assert (kept.splits[0].dim == "out_channels") == stationary_faster
    assert kept.splits[0].clusters == tiled.splits[0].clusters
    # Weights that fit each cluster are not pooled: nothing is judged.
    light = dataclasses.replace(p, graph=make_graph(
        [(4e9, 40_000, 400_000), (8e9, 40_000, 0), (1e5, 4000, 0)], [(0, 1), (1, 2)]))
    assert TensorParallelPlanner(batches=1)._with_stationary_weights(light, tiled, cycles) is tiled


def test_1d_splits_are_judged_with_their_clusters_in_snake_order():
    # A 3x3 grid: Z order's first 8 clusters run 0, 1, 3, 4, 2, 5, 6, 7, so a row split over
    # them has parts 1 and 3, 4 and 2 two hops apart. The plan is also judged with the split's
    # clusters in snake order (0, 1, 2, 5, 4, 3, 6, 7), consecutive parts neighbours.
    system = mesh_system(3, 3, bandwidth=64.0)
    base = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    eight = LayoutCosts(p).groups[-2].members
    snake = [c for c in p.topology.cluster_order() if c in eight]
    assert list(eight) != snake
    placement = Placement("manual", (0,) * 4, (0,) * 4, (0,),
                          splits=(OpSplit(0, "rows", eight),))
    kept = TensorParallelPlanner(batches=1)._in_rows(p, placement)
    cycles = kept.notes["grid_order_simulated_cycles"]
    assert set(cycles) == {"z", "z, 1-D splits in snake order"}
    assert cycles[kept.notes["grid_order"]] == min(cycles.values())
    assert kept.splits[0].clusters == (tuple(snake) if "snake" in kept.notes["grid_order"]
                                       else eight)
    # A 2-D split keeps its order: nothing else to judge.
    tiled = dataclasses.replace(placement, splits=(OpSplit(0, "tiles/2", eight),))
    assert "snake" not in " ".join(
        TensorParallelPlanner(batches=1)._in_rows(p, tiled).notes["grid_order_simulated_cycles"])


def test_a_plan_with_blocks_splits_is_judged_beside_the_best_plan_without_them():
    base = channel_heavy()
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    notes = TensorParallelPlanner().plan(p).notes
    assert {"1", "1 unblocked"} <= set(notes["simulated_cycles"])
    assert notes["estimated_cycles"]["1"] < notes["estimated_cycles"]["1 unblocked"]
    # A plan without them searches no other.
    flat = dataclasses.replace(p, split_dims={op: {"out_channels": 512} for op in range(8)})
    assert "1 unblocked" not in TensorParallelPlanner().plan(flat).notes["estimated_cycles"]


@pytest.mark.parametrize("sram_bytes, policies", [(4 * 2**20, {"interleave"}),
                                                   (300_000, {"interleave", "nearest"})])
def test_the_dram_policies_are_judged_only_when_weights_stream_as_built(sram_bytes, policies):
    system = mesh_system(2, 2, bandwidth=64.0, sram_bytes=sram_bytes)
    p = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload,
                        realise=lambda placement: (CHAIN, dataclasses.replace(
                            placement, splits=())))  # a stand-in: each op whole on its hub
    placement = Placement("manual", (0, 0, 0, 0), (0, 0, 0, 0), (0,),
                          splits=(OpSplit(1, "out_channels", (0, 1, 2, 3)),))
    TensorParallelPlanner(batches=1)._judge(p, placement)
    judged = {key[1][4] for key in p.memo if key[0] == "simulate" and key[4]}
    assert judged == policies


def test_copies_are_planned_with_and_without_a_weight_pool_and_each_family_is_judged():
    # 1.6 MB of weights, 16 clusters of 256 kB: every copy of a tile plan streams its weights.
    system = mesh_system(4, 4, bandwidth=16.0, sram_bytes=256_000)
    base = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    plan = TensorParallelPlanner(batches=64).plan(p)
    started = plan.notes["layouts_started"]
    copied = [key for key in started if key not in ("1",) and "stages" not in key
              and "pooled" not in key]
    assert copied and all(f"{key} pooled" in started for key in copied)
    # 64 inputs on R copies: an even number each, so each pooled layout also has a microbatch.
    assert all(f"{key} pooled microbatch 2" in started for key in copied)
    judged = plan.notes["simulated_cycles"]
    assert {"pooled" in key for key in judged} == {True, False}
    # The kept plan's pool is that of its layout, or of its DRAM placement.
    assert plan.weight_pool == plan.notes["dram_placement"].startswith("pooled")
    assert simulate_placement(p, plan, 64).total_cycles == pytest.approx(
        plan.notes["dram_placement_simulated_cycles"][plan.notes["dram_placement"]])


def test_a_family_estimated_far_behind_the_best_estimate_is_not_judged(monkeypatch):
    # The case above judges both families; with no slack across them, only the family of the
    # best estimate is.
    monkeypatch.setattr(tensor_parallel, "JUDGED_ACROSS", 1.0)
    system = mesh_system(4, 4, bandwidth=16.0, sram_bytes=256_000)
    base = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    plan = TensorParallelPlanner(batches=64).plan(p)
    estimates = plan.notes["estimated_cycles"]
    judged = plan.notes["simulated_cycles"]
    assert judged and all(estimates[key] == min(estimates.values()) for key in judged)
    assert len({"pooled" in key for key in judged}) == 1


def test_layouts_can_be_limited_to_some_kinds_and_unknown_kinds_are_refused():
    planner = TensorParallelPlanner(batches=64, layouts=("stages",))
    keys = [layout[0] for layout in planner._layouts(problem(16))]
    assert keys and all(key.endswith(" stages") and " x " not in key for key in keys)
    with pytest.raises(PlanningError, match="layouts must name some of grid, stages, copies, "
                                            "pooled; found rings"):
        TensorParallelPlanner(layouts=("rings",))


def reusing(p, placement):
    """Whether each item of ``placement`` that reuses its weights runs its microbatch on one
    read of them."""
    items = placement_items(p, placement)
    flags = batched(items, p.system, placement.microbatch)
    return [once for item, once in zip(items, flags, strict=True) if reuses_weights(item)]


def test_a_pooled_layout_with_a_microbatch_batches_its_ops_where_their_activations_fit():
    system = mesh_system(4, 4, bandwidth=16.0, sram_bytes=256_000)
    base = PlanningProblem(CHAIN, system, Topology(system), DIMS, simulator=simulate_workload)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    planner = TensorParallelPlanner(batches=64)
    layout = next(lay for lay in planner._layouts(p) if lay[0] == "8 pooled microbatch 2")
    space = planner._space(p, *layout)
    plan = planner._search(p, space)
    assert plan.microbatch == 2 and plan.weight_pool and plan.copies == 8
    # 40 kB of activations per op and input: a microbatch of 2 fits 256 kB clusters...
    judged, cycles = planner._judge(p, plan)
    assert judged.microbatch >= 2
    assert cycles == pytest.approx(simulate_placement(p, judged, 64).total_cycles)
    assert reusing(p, judged) and all(reusing(p, judged))
    # ... but not 16 kB ones: there every op runs the microbatch's inputs one by one.
    small = mesh_system(4, 4, bandwidth=16.0, sram_bytes=16_000)
    q = dataclasses.replace(p, system=small, topology=Topology(small))
    judged, cycles = planner._judge(q, plan)
    assert reusing(q, judged) and not any(reusing(q, judged))
    assert cycles == pytest.approx(simulate_placement(q, judged, 64).total_cycles)


def test_a_plan_estimated_above_the_cutoff_is_neither_realised_nor_simulated():
    calls = []

    def simulator(*args, **kwargs):
        calls.append(1)
        return simulate_workload(*args, **kwargs)

    base = problem(8)  # realised as planned
    p = dataclasses.replace(base, simulator=simulator,
                            realise=lambda placement: (base.graph, placement))
    free = TensorParallelPlanner(batches=4).plan(p)
    assert calls and "above_cutoff" not in free.notes
    calls.clear()
    best = min(free.notes["estimated_cycles"].values())
    cut = TensorParallelPlanner(batches=4, cutoff=0.5 * best).plan(p)
    assert calls == [] and cut.notes["above_cutoff"] == 0.5 * best
    assert cut.objective_cycles == best
    # A cutoff above the best estimate changes nothing.
    assert TensorParallelPlanner(batches=4, cutoff=2 * best).plan(p).splits == free.splits


@pytest.mark.parametrize("budget", [0, 48])
def test_only_plans_realising_to_no_more_messages_than_the_best_estimate_or_the_budget_are_judged(
        monkeypatch, budget):
    monkeypatch.setattr(tensor_parallel, "JUDGED_MESSAGES", budget)
    monkeypatch.setattr(tensor_parallel, "JUDGED", 99)
    monkeypatch.setattr(tensor_parallel, "JUDGED_WITHIN", float("inf"))
    monkeypatch.setattr(tensor_parallel, "JUDGED_ACROSS", float("inf"))
    base = problem(8)
    p = dataclasses.replace(base, realise=lambda placement: (base.graph, placement))
    found = {}
    search = TensorParallelPlanner._search
    monkeypatch.setattr(TensorParallelPlanner, "_search", lambda self, problem, space: found.
                        setdefault(space.key, search(self, problem, space)))
    plan = TensorParallelPlanner(batches=4).plan(p)
    estimates = plan.notes["estimated_cycles"]
    first = min(estimates, key=estimates.get)
    limit = max(collective_messages(found[first]), budget)
    assert set(plan.notes["simulated_cycles"]) == {
        key for key, placement in found.items() if collective_messages(placement) <= limit}
    assert len(found) > len(plan.notes["simulated_cycles"]) >= 1
    # Under the budget, a plan of more messages than the best estimate's is judged too.
    larger = [key for key in plan.notes["simulated_cycles"]
              if collective_messages(found[key]) > collective_messages(found[first])]
    assert bool(larger) == (budget > collective_messages(found[first]))
    split = Placement("manual", (0,) * 4, (0,) * 4, (0,),
                      splits=(OpSplit(0, "out_channels", (0, 1, 2)), OpSplit(1, "rows", (0, 1))))
    assert collective_messages(split) == 9 + 4


def test_batches_must_be_positive():
    with pytest.raises(PlanningError, match="batches must be >= 1"):
        TensorParallelPlanner(batches=0)


# Eight heavy layers with large activations on a mesh of slow links: 16-way collectives cost
# more than they save, and a quarter of the grid cannot hold all the weights.
LAYERS = make_graph([(2e9, 400_000, 2_500_000)] * 8, [(i, i + 1) for i in range(7)])
LAYER_DIMS = {i: {"out_channels": 64, "in_channels": 64} for i in range(8)}


def test_for_many_inputs_a_pipeline_over_2d_regions_splits_each_stage_inside_its_tile():
    system = mesh_system(4, 4, bandwidth=4.0)
    p = PlanningProblem(LAYERS, system, Topology(system), LAYER_DIMS,
                        simulator=simulate_workload)
    # Copies are left out (with a weight pool they win here): stages beat the whole grid.
    staged = TensorParallelPlanner(batches=64, layouts=("grid", "stages")).plan(p)
    stages = staged.notes["stages"]
    assert stages > 1 and staged.copies == 1
    estimates = staged.notes["estimated_cycles"]
    assert estimates[f"{stages} stages"] == min(estimates.values())
    # Stages follow the op order, one region (tile) each, neighbours in a snake.
    assert list(staged.op_stage) == sorted(staged.op_stage)
    assert set(staged.op_stage) == set(range(stages))
    tiles = snake_tiles(p, p.topology.tilings(stages)[0])
    for split in staged.splits:
        assert set(split.clusters) <= set(tiles[staged.op_stage[split.op_id]])
    links = {(link.src, link.dst) for link in system.links}
    for a, b in pairwise(tiles):
        assert any((x, y) in links for x in a for y in b)
    # The simulator agrees: the pipeline beats the best single plan over all 16 clusters.
    planner = TensorParallelPlanner(batches=64)
    single = planner._search(p, planner._space(p, "1", [None], None))
    assert (simulate_placement(p, staged, 64).total_cycles
            < simulate_placement(p, single, 64).total_cycles)
    # One input runs best on every cluster at once.
    assert "stages" not in TensorParallelPlanner(batches=1).plan(p).notes


def test_an_activation_matmul_follows_its_split_input_and_is_not_split_itself():
    # op 1 has no weights (attention's scores): it may follow op 0's parts; op 0 and 2 may not.
    graph = make_graph([(4e9, 400_000, 400_000), (8e9, 400_000, 0), (4e9, 400_000, 400_000)],
                       [(0, 1), (1, 2)])
    dims = {0: {"out_channels": 64}, 1: {"rows": 64, "batch": 12}, 2: {"in_channels": 64}}
    system = mesh_system(4, 4, bandwidth=32.0)
    p = PlanningProblem(graph, system, Topology(system), dims)
    planner = TensorParallelPlanner()
    space = planner._space(p, "1", [None], None)
    assert FOLLOW in space.options[1]
    assert FOLLOW not in space.options[0] and FOLLOW not in space.options[2]
    placement = planner.plan(p)
    assert {s.op_id for s in placement.splits} == {0, 2}
    # A matmul of two activations whose fused op holds a scalar constant may follow too.
    scaled = make_graph([(4e9, 400_000, 400_000), (8e9, 400_000, 1), (4e9, 400_000, 400_000)],
                        [(0, 1), (1, 2)])
    for follow_ops, offered in (({}, False), ({1: 12}, True)):
        p = PlanningProblem(scaled, system, Topology(system), dims, follow_ops=follow_ops)
        space = planner._space(p, "1", [None], None)
        assert (FOLLOW in space.options[1]) == offered


def test_a_stage_of_a_pipeline_over_regions_keeps_its_weights_on_its_first_cluster():
    # Op 0 cannot be split: it runs whole on its tile's first cluster, which also holds a part
    # of every split op. Two stages of 8 clusters, 1 MiB each (0.75 MiB for weights).
    mib = 2**20
    graph = make_graph([(1e6, 4000, mib // 2)] + [(4e9, 4000, 2 * mib)] * 4,
                       [(0, 1), (1, 2), (2, 3), (3, 4)])
    dims = {i: {"out_channels": 64} for i in range(1, 5)}
    system = mesh_system(4, 4, bandwidth=32.0, sram_bytes=mib, dram_bandwidth=1.0)
    p = PlanningProblem(graph, system, Topology(system), dims)
    tiles = snake_tiles(p, p.topology.tilings(2)[0])
    costs = LayoutCosts(p, tiles=tiles)
    stage_of = tensor_parallel.stage_ops(p, costs, max_parts=8)
    # The tiles' SRAM (6 MiB for weights each) would hold ops 0-2 (4.5 MiB), but their first
    # cluster would not (0.5 + 2 x 0.25 MiB): the first stage stops after op 1.
    assert stage_of == [0, 0, 1, 1, 1]
    for stage in (0, 1):
        share = sum(graph.ops[i].weight_bytes / (8 if i in dims else 1)
                    for i in range(5) if stage_of[i] == stage)
        assert share <= 0.75 * mib

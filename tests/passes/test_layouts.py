"""Layouts of distributed values on the planner's side: groups, collectives, the plan cost."""

import dataclasses
from itertools import pairwise

import pytest

from tests.passes.test_ilp_planner import make_graph
from tvm_chiplet.passes.analysis.op_graph import OpGraph
from tvm_chiplet.passes.planners import PlanningProblem
from tvm_chiplet.passes.planners.layouts import (
    FOLLOW,
    HOME,
    CostWalk,
    Layout,
    LayoutCosts,
    allocation_groups,
    check_groups,
    connected_order,
    grid_order,
    group_islands,
    plan_cost,
    pool_stream_rate,
    renamed_axis,
    row_order,
    tile_costs,
)
from tvm_chiplet.passes.planners.placement import OpSplit, PlanningError
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.topology import Topology

# Three conv-like ops in a chain, then a light one.
CHAIN = make_graph(
    [(4e9, 400_000, 40_000), (8e9, 400_000, 80_000), (4e9, 400_000, 40_000), (1e5, 4000, 0)],
    [(0, 1), (1, 2), (2, 3)],
)
DIMS = {0: {"out_channels": 64, "rows": 56}, 1: {"out_channels": 64, "in_channels": 64},
        2: {"out_channels": 64, "in_channels": 64}}


def costs(rows=4, cols=4):
    system = mesh_system(rows, cols, bandwidth=32.0)
    return LayoutCosts(PlanningProblem(CHAIN, system, Topology(system), DIMS))


def corners(system, group):
    spots = {(system.chiplets[system.clusters[c].chiplet].x,
              system.chiplets[system.clusters[c].chiplet].y) for c in group}
    xs, ys = {x for x, _ in spots}, {y for _, y in spots}
    return len(xs), len(ys), len(spots)


def test_allocation_groups_are_nested_rectangles_of_the_grid():
    system = mesh_system(4, 4)
    groups = allocation_groups(Topology(system))
    assert [len(g) for g in groups] == [1, 2, 4, 8, 16]
    for small, big in pairwise(groups):
        assert big[: len(small)] == small
    # 2 clusters side by side, a 2x2 square, a 2x4 rectangle: width x height == count.
    for group in groups:
        width, height, count = corners(system, group)
        assert width * height == count == len(group)


def test_groups_of_a_grid_that_is_not_a_power_of_two_cover_it():
    groups = allocation_groups(Topology(mesh_system(3, 3)))
    assert [len(g) for g in groups] == [1, 2, 4, 8, 9]
    assert sorted(groups[-1]) == list(range(9))


def test_row_order_lists_a_whole_grid_row_by_row_and_nothing_around_a_hole():
    system = mesh_system(2, 3)  # 2 rows of 3 chiplets
    spot = {c.id: (system.chiplets[c.chiplet].y, system.chiplets[c.chiplet].x)
            for c in system.clusters}
    order = row_order(Topology(system))
    assert [spot[c] for c in order] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert order != grid_order(Topology(system))  # Z order takes a 2x2 square first
    # A sub-mesh of it, and a grid with a dead chiplet (its clusters no longer fill it).
    assert [spot[c] for c in row_order(Topology(system), order[1:3] + order[4:])] == [
        (0, 1), (0, 2), (1, 1), (1, 2)]
    assert row_order(Topology(mesh_system(3, 3, faults={"chiplets": ["x1y1"]}))) is None


def test_a_matching_layout_moves_nothing_and_an_all_to_all_less_than_an_all_gather():
    c = costs()
    sharded = Layout("sharded", 4, "channels")
    assert c.move(sharded, sharded, 1e6) == 0.0
    gather = c.move(sharded, Layout("replicated", 4), 1e6)
    to_home = c.move(sharded, HOME, 1e6)
    all_to_all = c.move(sharded, Layout("sharded", 4, "rows"), 1e6)
    # Every cluster receives 15/16 of the value in an all-gather, 15/256 in an all-to-all;
    # gathering it on one corner cluster funnels 15/16 through that cluster's two links.
    assert gather > all_to_all > 0 and to_home > all_to_all
    # Twice the bytes, about twice the time (plus the same latency).
    assert c.move(sharded, Layout("replicated", 4), 2e6) == pytest.approx(2 * gather, rel=0.01)


def test_a_2d_split_reads_its_band_gathered_among_the_band_not_the_whole_value():
    c = costs()  # group 4: all 16 clusters
    tiled, banded = Layout("tiled", 4, "tiles", 4), Layout("banded", 4, "rows", 4)
    band = c.move(tiled, banded, 1e6)
    gather = c.move(Layout("sharded", 4, "channels"), Layout("replicated", 4), 1e6)
    # Four bands of four clusters: each cluster receives 3/16 of the value from its band's
    # 2x2 square, against 15/16 from the whole grid in an all-gather.
    assert 0 < band < gather / 3
    assert c.move(banded, banded, 1e6) == 0.0
    # From another layout, a band is a quarter of what each cluster needs replicated.
    assert c.move(HOME, banded, 1e6) < c.move(HOME, Layout("replicated", 4), 1e6)
    # The output of a 2-D split gathered whole costs as a sharded value's does.
    assert c.move(tiled, Layout("replicated", 4), 1e6) == pytest.approx(gather)
    split = {0: ("tiles/4", 4), 1: ("tiles/4", 4), 2: ("tiles/4", 4)}
    flat = {0: ("rows", 4), 1: ("out_channels", 4), 2: ("out_channels", 4)}
    assert plan_cost(c, split) < plan_cost(c, flat)


def test_a_blocks_split_gathers_its_input_channel_group_and_reduces_its_slice_only():
    c = costs()  # group 4: all 16 clusters
    choice = {op: ("blocks/4", 4) for op in (1, 2)}
    walk = CostWalk(c, choice)
    state = walk.start()
    walk.advance(state, choice, stop=2)
    out, _, parts, _, moves = walk.step(2, choice[2], state.layout)
    assert (out, parts) == (Layout("sharded", 4, "channels"), 16)
    (_, src, want, nbytes), (value, partial, reduced, out_bytes) = sorted(
        moves, key=lambda m: m[0])
    # Op 1's output, sharded along the channels over the grid, is read by 4 groups of 4
    # clusters, each gathering its channels (3/16 of the value per cluster), against 15/16
    # for an output-channel split's replicated input.
    assert (src, want) == (Layout("sharded", 4, "channels"), Layout("banded", 4, "channels", 4))
    gather = c.move(src, Layout("replicated", 4), nbytes)
    assert 0 < c.move(src, want, nbytes) < gather / 3
    # Each slice's 4 partial sums are reduce-scattered among its own clusters: 3/16 of the
    # output into each, where a plain input-channel split over 16 sums 15/16.
    assert (value, partial, reduced) == (2, Layout("partial", 4, "channels", 4), out)
    assert 0 < c.move(partial, reduced, out_bytes) < c.move(
        Layout("partial", 4), reduced, out_bytes) / 3
    # Replicated, the input needs no move; whole, a quarter of what replicating it costs
    # (and the same latency).
    assert c.move(Layout("replicated", 4), want, nbytes) == 0.0
    assert c.move(HOME, want, nbytes) < c.move(HOME, Layout("replicated", 4), nbytes) / 3
    flat = {1: ("out_channels", 4), 2: ("out_channels", 4)}
    assert plan_cost(c, choice) < plan_cost(c, flat)


def test_a_depthwise_conv_split_in_2d_reads_its_own_tile_not_its_band_gathered():
    plain = {"out_channels": 64, "in_channels": 64, "rows": 56}
    depthwise = {"out_channels": 64, "rows": 56}
    choice = {op: ("tiles/4", 4) for op in range(3)}
    system = mesh_system(4, 4, bandwidth=32.0)

    def moves_into(dims, op_id):
        costs = LayoutCosts(PlanningProblem(CHAIN, system, Topology(system), dims))
        walk = CostWalk(costs, choice)
        state = walk.start()
        walk.advance(state, choice, stop=op_id)
        _, _, _, _, moves = walk.step(op_id, choice[op_id], state.layout)
        return sum(costs.move(src, want, nbytes) for _, src, want, nbytes in moves)

    assert moves_into({0: plain, 1: depthwise, 2: plain}, 1) == 0.0
    assert moves_into({0: plain, 1: plain, 2: plain}, 1) > 0.0
    # The plain conv after it gathers each band, as after any 2-D split.
    assert moves_into({0: plain, 1: depthwise, 2: plain}, 2) > 0.0
    # A light op (a depthwise conv's few MACs per byte) is bound by its bytes: a depthwise
    # tile reads a sixteenth of the input, a plain one a quarter (its band).
    light = make_graph([(1e5, 400_000, 0), (1e5, 400_000, 0)], [(0, 1)])
    cycles = [LayoutCosts(PlanningProblem(light, system, Topology(system), {1: dims})).part(
        light.ops[1], 4, 16, "tiles/4")[0] for dims in (depthwise, plain)]
    assert cycles[0] < cycles[1]


def test_a_row_split_reads_its_halo_and_a_depthwise_channel_split_its_own_channels():
    system = mesh_system(4, 4, bandwidth=32.0)
    plain = {"out_channels": 64, "in_channels": 64, "rows": 56}
    depthwise = {"out_channels": 64, "rows": 56}

    def moves_into(choice, dims=None, halos=None):
        problem = PlanningProblem(CHAIN, system, Topology(system),
                                  dims or {0: plain, 1: plain, 2: plain}, halos=halos or {})
        costs = LayoutCosts(problem)
        walk = CostWalk(costs, choice)
        state = walk.start()
        walk.advance(state, choice, stop=1)
        _, _, _, _, moves = walk.step(1, choice[1], state.layout)
        return sum(costs.move(src, want, nbytes) for _, src, want, nbytes in moves)

    # Scattered from one cluster, each band takes its halo along: the more, the wider the
    # window.
    scattered = {0: None, 1: ("rows", 4)}
    narrow, wide = (moves_into(scattered, halos={1: (halo, 56)}) for halo in (2, 6))
    assert moves_into(scattered) < narrow < wide
    # Its input already in the same row bands, the halo's exchange is left out.
    rows = {0: ("rows", 4), 1: ("rows", 4)}
    assert moves_into(rows, halos={1: (6, 56)}) == moves_into(rows) == 0.0
    # An output-channel split reads its input replicated, but a depthwise conv's part reads
    # only its own channels: after an output-channel split over the same group, nothing moves.
    channels = {0: ("out_channels", 4), 1: ("out_channels", 4)}
    assert moves_into(channels) > 0.0
    assert moves_into(channels, {0: plain, 1: depthwise, 2: plain}) == 0.0
    # A transposed conv or a conv3d (output channels and batch, no rows) reads every channel.
    assert moves_into(channels, {0: plain, 1: {"out_channels": 64, "batch": 1}, 2: plain}) > 0.0


def test_parts_holding_one_slice_of_the_weights_pool_it_when_asked():
    # With pool_replicas, each of the parts that hold the same weights (a row band each)
    # holds a stripe of them and fetches the others' over its links before it computes.
    system = mesh_system(4, 4, bandwidth=32.0)
    problem = PlanningProblem(CHAIN, system, Topology(system), DIMS)
    whole, pooled = LayoutCosts(problem), LayoutCosts(problem, pool_replicas=True)
    op, grid = CHAIN.ops[0], len(whole.groups) - 1
    assert whole.groups[grid].size == 16
    ingress = sum(link.bandwidth for link in system.links
                  if link.dst == whole.groups[grid].slowest.id)
    cycles, _, held, _, _ = whole.part(op, grid, 16, "rows")
    pooled_cycles, _, stripe, _, _ = pooled.part(op, grid, 16, "rows")
    assert held == op.weight_bytes and stripe == op.weight_bytes / 16
    assert pooled_cycles == pytest.approx(cycles + op.weight_bytes * 15 / 16 / ingress)
    # tiles/4: 4 bands hold each quarter of the weights, a sixteenth each.
    assert pooled.part(op, grid, 16, "tiles/4")[2] == op.weight_bytes / 16
    assert whole.part(op, grid, 16, "tiles/4")[2] == op.weight_bytes / 4
    # An output-channel split has no replicas.
    assert pooled.part(op, grid, 16, "out_channels")[:3] == whole.part(
        op, grid, 16, "out_channels")[:3]


def test_a_layer_norm_after_a_matmuls_2d_split_runs_on_each_bands_rows():
    # matmul (2-D split) -> layer norm -> matmul (2-D split), a transformer's residual stream:
    # the norm reads every column of its rows, so the tiles are re-cut along the rows inside
    # each band (each cluster trading 3/4 of its tile with its band), not gathered whole on
    # one cluster; the next 2-D split gathers its band from those rows.
    graph = make_graph([(4e9, 400_000, 40_000), (1e5, 400_000, 0), (4e9, 400_000, 40_000)],
                       [(0, 1), (1, 2)])
    graph.ops[1] = dataclasses.replace(graph.ops[1], name="layer_norm", input_bytes=400_000)
    matmul = {"cols": 64, "reduction": 64, "rows": 128}
    system = mesh_system(4, 4, bandwidth=32.0)
    c = LayoutCosts(PlanningProblem(graph, system, Topology(system), {0: matmul, 2: matmul}))
    choice = {0: ("tiles/4", 4), 2: ("tiles/4", 4)}
    walk = CostWalk(c, choice)
    state = walk.start()
    walk.advance(state, choice)
    rows = Layout("sharded", 4, "rows")
    assert state.layout[1] == rows
    tiled = Layout("tiled", 4, "tiles", 4)
    assert 0 < c.move(tiled, rows, 1e6) < c.move(tiled, HOME, 1e6) / 4
    assert c.move(rows, tiled, 1e6) == c.move(tiled, rows, 1e6)


@pytest.mark.parametrize("first", ["rows", "tiles/4", "out_channels"])
@pytest.mark.parametrize("name", ["fused_conv2d_transpose_add1", "fused_conv3d_add_relu"])
def test_a_conv_that_no_strategy_splits_runs_whole_after_a_split_op(first, name):
    # conv (split) -> transposed conv or conv3d (no split dims: the planner leaves it out of
    # its choice) -> conv (split), a U-Net's upsampling: DistributeTensors gathers the
    # unsplit conv's input and runs it on one cluster, and so does the estimate, charging all
    # its cycles, not a share of them as for an op following its input's layout.
    graph = make_graph([(4e9, 400_000, 40_000), (4e9, 400_000, 40_000), (4e9, 400_000, 40_000)],
                       [(0, 1), (1, 2)])
    graph.ops[1] = dataclasses.replace(graph.ops[1], name=name)
    system = mesh_system(4, 4, bandwidth=32.0)
    dims = {0: DIMS[0], 2: DIMS[2]}
    c = LayoutCosts(PlanningProblem(graph, system, Topology(system), dims))
    choice = {0: (first, 4), 2: (first, 4)}
    walk = CostWalk(c, choice)
    state = walk.start()
    walk.advance(state, choice)
    assert state.layout[1] == HOME
    assert plan_cost(c, choice) > plan_cost(c, {**choice, 1: None}) - 1e-6
    assert plan_cost(c, choice) >= c.problem.op_cycles[1, 0]


@pytest.mark.parametrize("dim", ["rows", "out_channels"])
def test_a_residual_added_in_a_convs_epilogue_is_read_part_by_part_not_as_its_input(dim):
    # conv 0 -> conv 1 -> conv 2 + conv 0's value (a residual added in conv 2's fused op, as
    # FuseOps fuses torchvision's bottleneck once its batch norms are folded). Conv 2 reads
    # conv 1's value as its input (its data_bytes tell, though the residual is larger) and the
    # residual part by part along its output's split, as DistributeTensors runs the add: split
    # alike along the rows, nothing moves into conv 2. Without
    # data_bytes, the larger residual is taken for its input and conv 1's value is replicated
    # (moved).
    graph = make_graph([(4e9, 400_000, 40_000), (4e9, 100_000, 40_000), (4e9, 400_000, 40_000)],
                       [(0, 1), (1, 2), (0, 2)])
    system = mesh_system(4, 4, bandwidth=32.0)
    conv = {"out_channels": 64, "rows": 56}
    choice = {op: (dim, 4) for op in range(3)}

    def into_conv2(data_bytes):
        problem = PlanningProblem(graph, system, Topology(system), {op: conv for op in range(3)},
                                  data_bytes=data_bytes)
        walk = CostWalk(LayoutCosts(problem), choice)
        state = walk.start()
        walk.advance(state, choice, stop=2)
        moves = walk.step(2, choice[2], state.layout)[4]
        return walk.data[2], sum(walk.costs.move(src, want, n) for _, src, want, n in moves)

    data, moved = into_conv2({2: 100_000})
    assert data == 1
    assert moved == 0.0 or dim == "out_channels"  # its input all-gathered, the residual not
    assert moved < into_conv2({})[1]
    assert into_conv2({})[0] == 0


@pytest.mark.parametrize("name, follows", [
    ("max_pool2d", True), ("avg_pool2d1", True), ("adaptive_avg_pool2d", False),
    ("fused_conv2d_transpose", False)])
def test_a_sliding_window_pool_between_2d_splits_follows_the_tiles(name, follows):
    # conv (2-D split) -> op ``name`` -> conv (2-D split): a max or average pool (Inception's
    # pool branch) pools each tile where it lies, as DistributeTensors does; a global pool
    # (not a global reduction here: it writes as much as it reads) and an unsplit conv read
    # the value whole.
    graph = make_graph([(4e9, 400_000, 40_000), (1e5, 400_000, 0), (4e9, 400_000, 40_000)],
                       [(0, 1), (1, 2)])
    graph.ops[1] = dataclasses.replace(graph.ops[1], name=name)
    system = mesh_system(4, 4, bandwidth=32.0)
    c = LayoutCosts(PlanningProblem(graph, system, Topology(system), {0: DIMS[0], 2: DIMS[0]}))
    choice = {0: ("tiles/4", 4), 2: ("tiles/4", 4)}
    walk = CostWalk(c, choice)
    state = walk.start()
    walk.advance(state, choice)
    assert (state.layout[1] == Layout("tiled", 4, "tiles", 4)) == follows
    assert (state.layout[1] == HOME) != follows


def pooled_head(pooled_bytes):
    """A conv (2-D split), a global pool ``mean`` writing ``pooled_bytes``, a classifier."""
    graph = make_graph([(4e9, 400_000, 40_000), (1e5, pooled_bytes, 0), (1e6, 1000, 8000)],
                       [(0, 1), (1, 2)])
    graph.ops[1] = dataclasses.replace(graph.ops[1], name="mean", input_bytes=400_000)
    system = mesh_system(4, 4, bandwidth=32.0)
    return LayoutCosts(PlanningProblem(graph, system, Topology(system), DIMS))


def test_a_global_pool_of_a_2d_split_reduces_each_tile_where_it_lies():
    choice = {0: ("tiles/4", 4), 2: ("reduction", FOUR)}

    def walk_to(costs, stop):
        walk = CostWalk(costs, choice)
        state = walk.start()
        walk.advance(state, choice, stop=stop)
        return state

    pooled, unpooled = pooled_head(4000), pooled_head(400_000)
    # Sharded along the channels over the first band's four clusters, as the classifier's
    # reduction split over the first four reads it.
    assert walk_to(pooled, 2).layout[1] == Layout("sharded", FOUR, "channels")
    # A mean that is not a global pool (it writes as much as it reads) reads the conv's output
    # gathered whole on one cluster: 400 kB, not 16 pooled tiles of 250 bytes.
    assert walk_to(unpooled, 2).layout[1] == HOME
    pool, gather = (walk_to(c, 2).sum - walk_to(c, 1).sum for c in (pooled, unpooled))
    assert 0 < 20 * pool < gather


def test_out_then_in_channels_over_one_group_costs_less_than_changing_groups():
    c = costs()
    matched = {0: ("out_channels", 4), 1: ("in_channels", 4), 2: ("out_channels", 4)}
    mismatched = {0: ("out_channels", 4), 1: ("in_channels", 3), 2: ("out_channels", 4)}
    assert plan_cost(c, matched) < plan_cost(c, mismatched)


def test_splitting_over_more_clusters_is_faster_for_heavy_ops():
    c = costs()
    whole = {0: None, 1: None, 2: None}
    split = {0: ("out_channels", 4), 1: ("in_channels", 4), 2: ("out_channels", 4)}
    assert plan_cost(c, split) < 0.3 * plan_cost(c, whole)


def test_an_op_without_weights_may_follow_its_input_instead_of_being_split_or_gathered():
    # op 1 multiplies two activations (no weights), like attention's scores.
    graph = make_graph([(4e9, 400_000, 40_000), (8e9, 400_000, 0), (4e9, 400_000, 40_000)],
                       [(0, 1), (1, 2)])
    system = mesh_system(4, 4, bandwidth=32.0)
    c = LayoutCosts(PlanningProblem(graph, system, Topology(system), DIMS))
    split = {0: ("out_channels", 4), 2: ("out_channels", 4)}
    follow = plan_cost(c, {**split, 1: FOLLOW})
    # Following keeps op 1 on op 0's 16 parts: no gather, a sixteenth of the work each.
    assert follow < plan_cost(c, {**split, 1: None})
    assert follow < plan_cost(c, {**split, 1: ("rows", 4)})
    assert follow == pytest.approx(plan_cost(c, split))


def test_a_rearrangement_of_a_model_input_is_free_to_read_where_a_split_needs_it():
    # op 0 only reshapes the model input (torch's sequence-first [T, 1, E] to a matmul's rows),
    # op 1 is a column split reading it on 4 clusters.
    plain = make_graph([(0, 400_000, 0), (4e9, 400_000, 40_000)], [(0, 1)])
    names = ["fused_transpose_reshape", "fused_matmul_add"]
    ops = [dataclasses.replace(op, name=name) for op, name in zip(plain.ops, names, strict=True)]
    system = mesh_system(4, 4, bandwidth=32.0)

    def walk(graph):
        c = LayoutCosts(PlanningProblem(graph, system, Topology(system), {1: {"cols": 64}}))
        walk = CostWalk(c, {1: ("cols", FOUR)})
        state = walk.start()
        walk.advance(state, {1: ("cols", FOUR)}, stop=2)
        return state

    free = walk(OpGraph(ops, plain.graph, output_ops=plain.output_ops))
    assert free.layout[0].kind == "free"
    # As an op of arithmetic (a scale), its value lies on one cluster and is broadcast.
    scaled = dataclasses.replace(ops[0], name="fused_transpose_reshape_multiply", flops=1e5)
    sent = walk(OpGraph([scaled, ops[1]], plain.graph, output_ops=plain.output_ops))
    assert sent.layout[0].kind == "whole"
    assert free.sum < sent.sum


def test_attention_reshapes_turn_channels_into_heads_and_back():
    assert renamed_axis("fused_reshape_transpose", "channels") == "heads"
    assert renamed_axis("fused_reshape1_permute_dims", "channels") == "heads"
    assert renamed_axis("fused_transpose2_reshape1", "heads") == "channels"
    assert renamed_axis("fused_transpose2_reshape1", "uneven heads") == "uneven channels"
    # Other ops, and other orders, keep the axis.
    assert renamed_axis("softmax", "heads") == "heads"
    assert renamed_axis("fused_transpose_reshape", "channels") == "channels"
    assert renamed_axis("fused_reshape", "channels") == "channels"
    assert renamed_axis("fused_reshape_transpose", "rows") == "rows"


def attention(heads):
    """Query and value projections, attention's scores, softmax and context over ``heads``
    heads, and the output projection, named as FuseOps names them; LayoutCosts on mesh-4x4."""
    names = ["fused_matmul_add", "fused_reshape_transpose", "fused_matmul_add",
             "fused_reshape_transpose1", "fused_matmul1_multiply", "softmax", "matmul2",
             "fused_transpose2_reshape1", "fused_matmul_add_add"]
    # The scores' matmul holds a scalar constant (1 byte), not weights.
    plain = make_graph([(4e9, 400_000, 400_000), (0, 400_000, 0), (4e9, 400_000, 400_000),
                        (0, 400_000, 0), (1e9, 800_000, 1), (1e6, 800_000, 0),
                        (1e9, 400_000, 0), (0, 400_000, 0), (4e9, 400_000, 400_000)],
                       [(0, 1), (2, 3), (1, 4), (4, 5), (5, 6), (3, 6), (6, 7), (7, 8)])
    ops = [dataclasses.replace(op, name=name) for op, name in zip(plain.ops, names, strict=True)]
    graph = OpGraph(ops, plain.graph, output_ops=plain.output_ops)
    dims = {0: {"cols": 64}, 2: {"cols": 64}, 4: {"rows": 64}, 6: {"rows": 64},
            8: {"reduction": 64}}
    system = mesh_system(4, 4, bandwidth=32.0)
    return LayoutCosts(PlanningProblem(graph, system, Topology(system), dims,
                                       follow_ops={4: heads, 6: heads}))


FOUR = 2  # the group of 4 clusters
ATTENTION_CHOICE = {0: ("cols", FOUR), 2: ("cols", FOUR), 4: FOLLOW, 6: FOLLOW,
                    8: ("reduction", FOUR)}


def walked(costs, stop=None):
    """The walk of :data:`ATTENTION_CHOICE` up to ``stop`` (default: every op)."""
    walk = CostWalk(costs, ATTENTION_CHOICE)
    state = walk.start()
    walk.advance(state, ATTENTION_CHOICE, stop=stop)
    return state


def charged(costs, op_id):
    """Cycles the walk charges for ``op_id``: its inputs' moves and its compute."""
    return walked(costs, op_id + 1).sum - walked(costs, op_id).sum


def test_attention_follows_its_heads_from_the_projections_to_the_output_projection():
    choice = ATTENTION_CHOICE
    even = attention(heads=8)
    state = walked(even)
    # Softmax runs on its heads in place, and the merged heads are the channels the output
    # projection reads: no collective between the projections.
    assert state.layout[5] == Layout("sharded", FOUR, "heads")
    assert state.layout[7] == Layout("sharded", FOUR, "channels")
    assert plan_cost(even, choice) < plan_cost(even, {**choice, 4: ("rows", FOUR)})
    assert plan_cost(even, choice) < plan_cost(even, {**choice, 4: None})
    # 6 heads over 4 parts: re-cut at whole heads (2, 2, 1, 1), the largest part 2 heads, and
    # the merged channels no longer line up with the output projection's split.
    uneven = attention(heads=6)
    state = walked(uneven)
    assert state.layout[5] == Layout("sharded", FOUR, "uneven heads")
    assert state.layout[7] == Layout("sharded", FOUR, "uneven channels")
    assert plan_cost(uneven, choice) > plan_cost(even, choice)
    # The re-cut is charged where the heads are split; the scores take as long as their
    # largest part, 2 of 6 heads instead of 2 of 8.
    assert charged(even, 1) < charged(uneven, 1)
    assert charged(uneven, 4) == pytest.approx(charged(even, 4) * 4 / 3)


def halves():
    """LayoutCosts over the two 8-cluster halves of mesh-4x4, and its topology."""
    system = mesh_system(4, 4, bandwidth=32.0)
    topology = Topology(system)
    tiles = topology.tilings(2)[0]
    return LayoutCosts(PlanningProblem(CHAIN, system, topology, DIMS), tiles=tiles), topology


def test_each_tile_has_its_own_nested_groups():
    c, topology = halves()
    tiles = topology.tilings(2)[0]
    for t, tile in enumerate(tiles):
        groups = [c.groups[g].members for g in c.tile_groups(t)]
        assert [len(g) for g in groups] == [1, 2, 4, 8]
        assert set(groups[-1]) == set(tile)
        assert all(set(a) <= set(b) for a, b in pairwise(groups))
    assert c.home(1) == Layout("whole", c.first[1])


def test_a_value_moving_between_tiles_is_costed_on_the_routes_between_their_members():
    c, topology = halves()
    a, b = c.groups[0].members[0], c.groups[c.first[1]].members[0]
    # Whole to whole: one message on the route between the two first clusters.
    assert c.move(c.home(0), c.home(1), 32_000) == pytest.approx(
        1000 + topology.route_latency(a, b))
    big0, big1 = c.first[1] - 1, c.first[2] - 1
    sharded0 = Layout("sharded", big0, "channels")
    # Slices that line up go part to part, spread over many routes; a replica needs all of them
    # on every reader; funnelling the whole value through one cluster is the slowest.
    aligned = c.move(sharded0, Layout("sharded", big1, "channels"), 1e6)
    replicated = c.move(sharded0, Layout("replicated", big1), 1e6)
    assert 0 < aligned < replicated
    assert aligned < c.move(c.home(0), Layout("sharded", big1, "channels"), 1e6)
    # Partial sums cost a reader its share of every part.
    assert c.move(Layout("partial", big0), Layout("sharded", big1, "rows"), 1e6) > aligned


def test_tile_costs_charge_each_op_to_the_tile_it_runs_on():
    c, _ = halves()
    big0, big1 = c.first[1] - 1, c.first[2] - 1
    choice = {0: ("out_channels", big0), 1: ("in_channels", big0), 2: ("out_channels", big1)}
    first, second = tile_costs(c, choice, stage_of=[0, 0, 1, 1])
    assert first > 0 and second > 0
    # Moving op 2 to the first tile moves its compute there.
    moved = tile_costs(c, {**choice, 2: ("out_channels", big0)}, stage_of=[0, 0, 0, 0])
    assert moved[1] == 0 and moved[0] > first
    # One tile: the sum is the plan cost.
    single = costs()
    plain = {0: ("out_channels", 4), 1: ("in_channels", 4), 2: ("out_channels", 4)}
    assert tile_costs(single, plain).sum() == pytest.approx(plan_cost(single, plain))


def test_a_walk_resumed_from_an_op_costs_what_the_whole_walk_costs_and_stops_past_a_limit():
    c = costs()
    plain = {0: ("out_channels", 4), 1: ("in_channels", 4), 2: ("out_channels", 4)}
    changed = {**plain, 2: ("rows", 3)}
    walk = CostWalk(c, plain)
    before = walk.start()
    walk.advance(before, plain, stop=2)  # ops 0 and 1, as every option of op 2 starts
    for choice in (plain, changed):
        state = before.copy()
        assert walk.advance(state, choice)
        assert state.total == pytest.approx(list(tile_costs(c, choice)))
    # Every step adds cycles: a walk stops once it exceeds the limit, a walk under it does not.
    whole = plan_cost(c, changed)
    assert not walk.advance(before.copy(), changed, limit=0.5 * whole)
    assert walk.advance(before.copy(), changed, limit=1.01 * whole)
    # The weighted limit counts the busiest tile again for every further input.
    assert not walk.advance(walk.start(), changed, limit=1.5 * whole, weight=1.0)


def test_groups_on_a_faulty_grid_stay_connected_and_full_grids_keep_the_z_order():
    full = Topology(mesh_system(4, 4))
    assert connected_order(full, grid_order(full)) == grid_order(full)
    # x1y0 dead: the first 4 in Z order (x0y0, x0y1, x1y1, x2y0) are not joined; x2y0 hangs
    # off the dead chiplet.
    faulty = Topology(mesh_system(4, 4, faults={"chiplets": ["x1y0"]}))
    links = {(link.src, link.dst) for link in faulty.system.links}

    def joined(group):  # the links between the group's own clusters connect it
        reached, todo = {group[0]}, [group[0]]
        while todo:
            here = todo.pop()
            for other in group:
                if other not in reached and (here, other) in links:
                    reached.add(other)
                    todo.append(other)
        return len(reached) == len(group)

    assert not joined(grid_order(faulty)[:4])
    prefixes = allocation_groups(faulty)
    assert [len(g) for g in prefixes] == [1, 2, 4, 8, 15]
    for group in prefixes:
        assert joined(group), group


def test_a_split_over_a_group_its_live_links_do_not_join_names_its_islands():
    faulty = mesh_system(4, 4, faults={"links": [["x0y0", "x1y0"]]})
    topology = Topology(faulty)
    ids = {c.name: c.id for c in faulty.clusters}
    pair = (ids["x0y0.k0"], ids["x1y0.k0"])
    with pytest.raises(PlanningError, match=r"op 3 .*disconnected group.*2 islands "
                                            r"\{x0y0\.k0\}; \{x1y0\.k0\}"):
        check_groups(topology, [OpSplit(3, "out_channels", pair)])
    # Diagonal clusters are joined through their sub-mesh (the 2x2 around them).
    healthy = Topology(mesh_system(4, 4))
    assert group_islands(healthy, [0, 5]) == [[0, 5]]
    check_groups(healthy, [OpSplit(3, "rows", (0, 5))])
    with pytest.raises(PlanningError, match=r"lists clusters \[1\] more than once"):
        check_groups(healthy, [OpSplit(3, "rows", (0, 1, 1))])


def test_a_weight_pool_streams_every_op_at_its_share_of_the_pools_rate():
    # CHAIN's 160 kB of weights on a 2x2 mesh of 16 kB clusters: the pool (4 x 15 kB, all but
    # the stream buffers) holds 37.5 % of them, which the links deliver; DRAM the rest, both at
    # once.
    system = mesh_system(2, 2, bandwidth=32.0, sram_bytes=16_000, dram_bandwidth=64.0)
    problem = PlanningProblem(CHAIN, system, Topology(system), DIMS)
    held = 4 * 15_000 / 160_000
    links = 8 * 32.0 / (4 / 3)  # eight links, routes of 4/3 hops on average
    rate = 1.0 / max(held / links, (1 - held) / 64.0)
    assert pool_stream_rate(problem, 1.0) == pytest.approx(rate)
    assert pool_stream_rate(problem, 0.25) == pytest.approx(rate / 4)
    # Four copies share each fetch: the DRAM part streams at four times the share, and a
    # stripe multicast to the others crosses each link once (no mean route).
    assert pool_stream_rate(problem, 0.25, copies=4) == pytest.approx(
        1.0 / max(held / (8 * 32.0 / 4), (1 - held) / 64.0))
    pooled = LayoutCosts(problem, dram_share=0.25, pooled=True)
    plain = LayoutCosts(problem, dram_share=0.25)
    # The estimates keep a quarter of SRAM free of resident weights (PLANNED_HEADROOM).
    assert pooled.budget(0) == 0 and plain.budget(0) == 12_000
    assert pooled.dram_rate == pytest.approx(rate / 4) and plain.dram_rate == pytest.approx(16.0)



def test_in_a_weight_pool_even_weights_that_fit_stream_from_the_other_members():
    # 64 kB clusters: op 0's 40 kB fit the first cluster's budget, but its SRAM holds a stripe.
    system = mesh_system(2, 2, bandwidth=32.0, sram_bytes=64_000, dram_bandwidth=64.0)
    problem = PlanningProblem(CHAIN, system, Topology(system), DIMS)
    assert pool_stream_rate(problem, 1.0) == pytest.approx(8 * 32.0 / (4 / 3))  # all held
    first = {0: None}
    assert plan_cost(LayoutCosts(problem, pooled=True), first) > plan_cost(
        LayoutCosts(problem), first)


def test_partial_sums_move_at_the_accumulators_width_whatever_the_device_dtype():
    # A value of n bytes at int8 is 4n at fp32. Its partial sums are 4-byte accumulators at
    # both, so reduce-scattering them costs the same; all-gathering the int8 value itself
    # costs a quarter of what the fp32 one does.
    system = mesh_system(4, 4, bandwidth=32.0, macs_per_cycle={"fp32": 256, "int8": 1024})
    by_dtype = {dtype: LayoutCosts(PlanningProblem(CHAIN, s, Topology(s), DIMS))
                for dtype in ("int8", "fp32") for s in [system.with_device_dtype(dtype)]}
    partial, sharded = Layout("partial", 4), Layout("sharded", 4, "channels")
    assert by_dtype["int8"].move(partial, sharded, 1e6) == pytest.approx(
        by_dtype["fp32"].move(partial, sharded, 4e6))
    replicated = Layout("replicated", 4)
    assert by_dtype["int8"].move(sharded, replicated, 1e6) == pytest.approx(
        by_dtype["fp32"].move(sharded, replicated, 1e6))
    assert by_dtype["int8"].move(sharded, replicated, 1e6) < by_dtype["fp32"].move(
        sharded, replicated, 4e6) / 3
    # Accumulators of 2 bytes ([system] accumulator_bytes): half what 4 bytes cost.
    narrow = dataclasses.replace(system.with_device_dtype("int8"), accumulator_bytes=(("int8", 2),))
    assert LayoutCosts(PlanningProblem(CHAIN, narrow, Topology(narrow), DIMS)).move(
        partial, sharded, 1e6) == pytest.approx(by_dtype["fp32"].move(partial, sharded, 2e6))

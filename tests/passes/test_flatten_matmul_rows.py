"""FlattenMatmulRows: torch's sequence-first projections (one-row matrices) become matmuls of many
rows, with the same numerics, so that their 2-D splits keep attention on every cluster."""

import json

import numpy as np
import pytest
from tvm import relax

from tests.passes.test_distribute_tensors import const, crossings, module, run
from tests.passes.test_plan_split_placement import SplitFirstAnchor
from tvm_chiplet.passes import FlattenMatmulRows, ReduceGraph
from tvm_chiplet.passes.distribute_tensors import DistributedSplit, distribute_and_reduce
from tvm_chiplet.passes.pipeline import prepare_splits
from tvm_chiplet.passes.plan_split_placement import PlanSplitPlacement, plan_splits, split_problem
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.placement import PlanningError
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_toml import load_system

RNG = np.random.default_rng(0)
TOKENS, WIDTH, HEADS = 16, 32, 2
SYSTEM = load_system("mesh-4x4")


def matmul_shapes(mod):
    return [[int(d) for d in b.value.args[0].ty.shape] for block in mod["main"].body.blocks
            for b in block.bindings
            if isinstance(b.value, relax.Call) and b.value.op.name == "relax.matmul"]


def sequence_first_attention(bb, x):
    """nn.MultiheadAttention (batch_first=False) at batch 1 on ``x: [T, 1, E]``: each
    projection ``b + x @ w`` ([T, 1, E]), reshaped to [T, H, E / H] and permuted to
    [H, T, E / H]; scores, softmax, context; the context permuted to [T, 1, H, E / H],
    reshaped to [T, E] and projected out."""
    heads = []
    for _ in range(3):
        y = bb.emit(relax.op.add(const(WIDTH), relax.op.matmul(x, const(WIDTH, WIDTH))))
        r = bb.emit(relax.op.reshape(y, (TOKENS, HEADS, WIDTH // HEADS)))
        heads.append(bb.emit(relax.op.permute_dims(r, [1, 0, 2])))
    q, k, v = heads
    keys = bb.emit(relax.op.permute_dims(k, [0, 2, 1]))
    scores = bb.emit(relax.op.nn.softmax(bb.emit(relax.op.matmul(q, keys))))
    context = bb.emit(relax.op.expand_dims(bb.emit(relax.op.matmul(scores, v)), 0))
    merged = bb.emit(relax.op.permute_dims(context, [2, 0, 1, 3]))
    return relax.op.matmul(bb.emit(relax.op.reshape(merged, (TOKENS, WIDTH))),
                           const(WIDTH, WIDTH))


def test_one_row_projections_become_one_matmul_of_every_row_with_the_same_result():
    mod = module(sequence_first_attention, (TOKENS, 1, WIDTH))
    flat = FlattenMatmulRows()(mod)
    shapes = matmul_shapes(flat)
    assert shapes.count([TOKENS, WIDTH]) == 4  # three projections and the output projection
    assert [TOKENS, 1, WIDTH] not in shapes
    x = RNG.normal(size=(TOKENS, 1, WIDTH)).astype("float32")
    np.testing.assert_allclose(run(flat, [x]), run(mod, [x]), rtol=1e-5, atol=1e-5)
    # Each projection's bias is added to its flat product, which the reshape to heads reads.
    adds = [b.value for block in flat["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and b.value.op.name == "relax.add"]
    assert [[int(d) for d in a.ty.shape] for a in adds] == [[TOKENS, WIDTH]] * 3
    # The models' pipeline plans this form beside the module as prepared (plan_splits).
    assert [TOKENS, 1, WIDTH] in matmul_shapes(prepare_splits()(mod))


def test_matmuls_of_many_rows_or_by_activations_are_left_as_they_are():
    def block(bb, x):  # [1, T, E]: rows already; [T, 1, E] by [T, E, 1]: not by weights
        y = bb.emit(relax.op.matmul(x, const(WIDTH, WIDTH)))
        t = bb.emit(relax.op.permute_dims(y, [1, 0, 2]))
        return relax.op.matmul(t, relax.op.permute_dims(t, [0, 2, 1]))

    mod = module(block, (1, TOKENS, WIDTH))
    assert FlattenMatmulRows()(mod).same_as(mod)


def test_flat_projections_split_in_2d_run_sequence_first_attention_by_query_bands_and_heads():
    # Two row bands (8 tokens) by two column slices (one head each) of every projection and of
    # the output projection: the reshapes and permutes to heads keep every tile where it lies,
    # so attention runs on all four clusters, and its context's tiles are merged back from
    # [T, 1, H, E / H] to [T, E] where they lie too.
    mod = FlattenMatmulRows()(module(sequence_first_attention, (TOKENS, 1, WIDTH)))
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(op, "tiles/2", group) for op in (0, 1, 2, 5)]  # not attention
    reduced, clusters = distribute_and_reduce(mod, splits, home=0)
    x = RNG.normal(size=(TOKENS, 1, WIDTH)).astype("float32")
    np.testing.assert_allclose(run(reduced, [x]), run(mod, [x]), rtol=1e-4, atol=1e-4)
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    softmax = sorted(c for b, c in zip(bindings, clusters, strict=True)
                     if "softmax" in str(b.value.args[0]))
    assert softmax == list(group)
    # What crosses: each tile's keys and values of its head from the other band (8 x 16
    # floats); each output-projection tile the other slice of its band's context (8 x 16), not
    # the whole context re-cut by heads; and the output's three other tiles (8 x 16) for
    # cluster 0. (The model input is flattened where each tile reads it.)
    tile = 8 * 16 * 4
    heads = [(tile, a, b) for a, b in ((0, 2), (2, 0), (1, 3), (3, 1))] * 2
    context = [(tile, a, b) for a, b in ((0, 1), (1, 0), (2, 3), (3, 2))]
    assert sorted(crossings(reduced, clusters)) == sorted(
        heads + context + [(tile, c, 0) for c in (1, 2, 3)])


def test_sequence_first_attention_is_planned_flattened_and_not_and_the_faster_kept():
    mod = module(sequence_first_attention, (TOKENS, 1, WIDTH))
    flat = FlattenMatmulRows()(mod)
    plan = plan_splits(mod, ReduceGraph()(mod), SYSTEM, SplitFirstAnchor(None), simulate_workload)
    cycles = plan.placement.notes["flatten_matmul_rows_simulated"]
    assert set(cycles) == {"flattened", "as given"}
    # Each form's plan, simulated as built alone, takes the cycles noted for it.
    for name, form in (("as given", mod), ("flattened", flat)):
        problem, _ = split_problem(form, ReduceGraph()(form), SYSTEM, simulate_workload)
        placement = SplitFirstAnchor(None).plan(problem)
        assert simulate_placement(problem, placement, 1, as_built=True).total_cycles == (
            pytest.approx(cycles[name]))
    kept = min(cycles, key=cycles.get)
    assert matmul_shapes(plan.module) == matmul_shapes(flat if kept == "flattened" else mod)
    assert plan.problem.graph.ops == split_problem(plan.module, plan.reduced, SYSTEM)[0].graph.ops
    # Without a simulator nothing is judged: the flattened form is planned alone.
    alone = plan_splits(mod, ReduceGraph()(mod), SYSTEM, SplitFirstAnchor(None))
    assert matmul_shapes(alone.module) == matmul_shapes(flat)
    assert "flatten_matmul_rows_simulated" not in alone.placement.notes


class PrefersSlower(SplitFirstAnchor):
    """SplitFirstAnchor with an objective (as ``auto`` has) that prefers the slower run."""

    def cost(self, sim):
        return -sim.total_cycles


def test_the_forms_are_judged_by_the_planners_own_objective_where_it_has_one():
    mod = module(sequence_first_attention, (TOKENS, 1, WIDTH))
    reduced = ReduceGraph()(mod)
    timed = plan_splits(mod, reduced, SYSTEM, SplitFirstAnchor(None), simulate_workload)
    cycles = timed.placement.notes["flatten_matmul_rows_simulated"]
    slower = max(cycles, key=cycles.get)
    plan = plan_splits(mod, reduced, SYSTEM, PrefersSlower(None), simulate_workload)
    costs = plan.placement.notes["flatten_matmul_rows_simulated"]
    assert costs == {name: -c for name, c in cycles.items()}
    flat = FlattenMatmulRows()(mod)
    assert matmul_shapes(plan.module) == matmul_shapes(flat if slower == "flattened" else mod)


class RefusesGraphsOf:
    """A planner that cannot plan graphs of ``ops`` ops, and splits the first anchor of others."""

    name = "refuses"

    def __init__(self, *ops):
        self.ops = ops

    def plan(self, problem):
        if len(problem.graph.ops) in self.ops:
            raise PlanningError(f"cannot plan {len(problem.graph.ops)} ops")
        return SplitFirstAnchor(None).plan(problem)


def test_a_form_that_cannot_be_planned_leaves_the_other_and_both_failing_name_the_models():
    mod = module(sequence_first_attention, (TOKENS, 1, WIDTH))
    reduced = ReduceGraph()(mod)
    given = len(split_problem(mod, reduced, SYSTEM)[0].graph.ops)
    flat = FlattenMatmulRows()(mod)
    flattened = len(split_problem(flat, ReduceGraph()(flat), SYSTEM)[0].graph.ops)
    assert given != flattened
    plan = plan_splits(mod, reduced, SYSTEM, RefusesGraphsOf(flattened), simulate_workload)
    assert plan.module.same_as(mod) and plan.placement.splits
    assert "flatten_matmul_rows_simulated" not in plan.placement.notes
    with pytest.raises(PlanningError, match=f"cannot plan {given} ops"):
        plan_splits(mod, reduced, SYSTEM, RefusesGraphsOf(given, flattened), simulate_workload)


def test_a_module_flattening_leaves_alone_is_planned_once():
    def block(bb, x):
        return relax.op.nn.relu(relax.op.matmul(x, const(WIDTH, WIDTH)))

    mod = module(block, (1, TOKENS, WIDTH))
    reduced = ReduceGraph()(mod)
    plan = plan_splits(mod, reduced, SYSTEM, SplitFirstAnchor(None), simulate_workload)
    assert plan.module.same_as(mod) and plan.reduced.same_as(reduced)
    assert "flatten_matmul_rows_simulated" not in plan.placement.notes


def test_the_kept_form_of_sequence_first_attention_computes_what_the_model_does():
    mod = module(sequence_first_attention, (TOKENS, 1, WIDTH))
    after = PlanSplitPlacement(SYSTEM, "tensor-parallel", simulator=simulate_workload)(mod)
    x = RNG.normal(size=(TOKENS, 1, WIDTH)).astype("float32")
    np.testing.assert_allclose(run(after, [x]), run(mod, [x]), rtol=1e-4, atol=1e-4)
    notes = json.loads(str(after.attrs["chiplet.placement"]))["notes"]
    assert set(notes["flatten_matmul_rows_simulated"]) == {"flattened", "as given"}

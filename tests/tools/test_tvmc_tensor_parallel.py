"""Strategies that split ops (tensor-parallel, layer-sequential, pipeline regions, modular) end
to end against onnxruntime."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tvm_chiplet
from tests.passes.test_distribute_tensors import module
from tests.passes.test_unpack_projections import TOKENS, WIDTH, packed_attention
from tests.tools.e2e import compile_run_and_compare
from tvm_chiplet.build import planned_graph
from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.analysis.lower_bound import lower_bound
from tvm_chiplet.passes.pipeline import prepare_splits
from tvm_chiplet.passes.planners import TensorParallelPlanner
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.placement import OpSplit, Placement
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.target import parse_target
from tvm_chiplet.tools import models
from tvm_chiplet.tools.bench.heldout_models import main as export
from tvm_chiplet.tools.frontends import load_model
from tvm_chiplet.tools.tvmc import main


@pytest.mark.parametrize(
    "name, preset, strategy",
    [("small-cnn", "mesh-4x4", "tensor-parallel"), ("small-cnn", "cluster-4", "layer-sequential"),
     ("transformer-block", "cluster-4", "tensor-parallel"),
     ("transformer-block", "mesh-4x4", "layer-sequential")],
)
def test_split_strategies_match_onnxruntime(tmp_path, capsys, name, preset, strategy):
    plan = compile_run_and_compare(tmp_path, models.get_model(name), f"chiplet/{preset}",
                                   strategy)
    assert f"strategy {strategy}" in capsys.readouterr().out
    assert plan["placement"]["notes"]["splits"] >= 1
    assert len(plan["clusters_used"]) >= 2
    # The models have no concat of their own: each is an all-gather's or halo exchange's
    # assembly, whose pieces the device writes in place (no bytes moved on its cluster).
    assembled = [t for t in plan["tasks"] if t["name"].startswith("concatenate")]
    assert assembled and all(t["bytes_moved"] == 0 for t in assembled)
    # The estimate's bound is the model's as planned, not that of the split parts (smaller ops
    # whose critical path is no bound for the model).
    system = load_system(preset)
    graph = extract_op_graph(ReduceGraph()(prepare_splits()(load_model(models.get_model(name)))),
                             system.device_dtype)
    bound = lower_bound(graph, system, 1, weights_preloaded=True, io_in_dram=False)
    assert plan["estimate"][0]["bound_cycles"] == pytest.approx(bound.bound_cycles)



def test_the_compile_summary_says_how_busy_the_run_kept_clusters_and_links(tmp_path, capsys):
    # What held a plan back from the bound: the clusters' compute is the cycles of their
    # tasks over the run, the links' share of it they carried data; both per input simulated.
    plan = compile_run_and_compare(tmp_path, models.get_model("small-cnn"), "chiplet/mesh-4x4",
                                   "tensor-parallel")
    printed = capsys.readouterr().out
    system = load_system("mesh-4x4")
    for row in plan["estimate"]:
        computed = row["inputs_simulated"] * sum(task["cycles"] for task in plan["tasks"])
        assert row["clusters_busy"] == pytest.approx(
            computed / (system.num_clusters * row["simulated_cycles"]))
        assert 0 < row["links_busy"] < row["busiest_link"] <= 1
        assert (f"clusters busy {100 * row['clusters_busy']:.0f}% and links "
                f"{100 * row['links_busy']:.0f}% of the run on average (the busiest link "
                f"{100 * row['busiest_link']:.0f}%)") in printed


def test_tvmc_compile_reports_the_steps_of_a_tensor_parallel_plan(tmp_path, capsys):
    # A plan of minutes on a large grid says what it is doing: each layout searched, each plan
    # judged as built, where the streamed weights went; every figure is the plan's own.
    plan = compile_run_and_compare(tmp_path, models.get_model("small-cnn"), "chiplet/mesh-4x4",
                                   "tensor-parallel")
    lines = [line.removeprefix("[compile] ") for line in capsys.readouterr().err.splitlines()
             if line.startswith("[compile] tensor-parallel: ")]
    notes = plan["placement"]["notes"]
    estimated, judged = notes["estimated_cycles"], notes["simulated_cycles"]
    assert lines[0] == (f"tensor-parallel: {len(notes['layouts_started'])} layouts estimated, "
                        f"{len([k for k in notes['layouts_started'] if k in estimated])} searched")
    for key, cycles in estimated.items():
        if key != "whole":  # the grid's plan without splits: estimated, not searched
            assert any(line.startswith(f"tensor-parallel: layout {key!r} searched in ")
                       and line.endswith(f"estimated {cycles:,.0f} cycles") for line in lines)
    assert f"tensor-parallel: {len(judged)} plans to judge as built (realised and simulated)" \
        in lines
    for key, cycles in judged.items():
        assert any(line.startswith(f"tensor-parallel: layout {key!r} simulates {cycles:,.0f} "
                                   "cycles as built (judged in ") for line in lines)
    assert any(line.startswith("tensor-parallel: streamed weights placed (") for line in lines)


def test_a_split_plan_is_bounded_on_the_graph_it_was_planned_on():
    # torch's packed Q/K/V projection: one op on the imported graph's critical path, three
    # parallel ones once unpacked for planning, which is what runs: the bound is that graph's.
    mod = module(packed_attention, (TOKENS, 1, WIDTH))
    target = parse_target("chiplet/mesh-4x4")
    planned = planned_graph(mod, target)
    assert len(planned.ops) == len(extract_op_graph(ReduceGraph()(prepare_splits()(mod))).ops)

    def bound(graph):
        return lower_bound(graph, target.system, 1, weights_preloaded=True,
                           io_in_dram=False).bound_cycles

    assert bound(planned) < bound(extract_op_graph(ReduceGraph()(mod)))


MESH_8X8 = Path(__file__).parents[2] / "tools" / "bench" / "systems" / "mesh-8x8.toml"


@pytest.mark.parametrize("model, target, kinds, beaten", [
    (models.resnet18, f"chiplet -config={MESH_8X8}", {"tiles", "blocks"}, "1 unblocked"),
    (models.mobilenet_v2, "chiplet/mesh-4x4", {"tiles"}, "1 untiled")])
def test_convolutions_split_in_2d_beat_other_splits_and_match_onnxruntime(
        tmp_path, model, target, kinds, beaten):
    # ResNet-18 on an 8x8 mesh and MobileNetV2 (depthwise convolutions) on mesh-4x4, 32x32
    # images, batch 1: some convolutions are cut into row bands by output-channel slices (and,
    # in ResNet-18, others into input-channel groups by output-channel slices), and that plan
    # simulates faster, as built, than the best one without blocks splits (ResNet-18: 5 881
    # against 7 301 cycles) or with 1-D splits only (MobileNetV2), both judged by the planner.
    # MobileNetV2's plan with blocks splits simulated slower than the one without.
    plan = compile_run_and_compare(tmp_path, model(image=32), target, "tensor-parallel")
    notes = plan["placement"]["notes"]
    assert {dim.split("/")[0] for dim in notes["dims"] if "/" in dim} == kinds
    simulated = notes["simulated_cycles"]
    assert min(simulated.values()) < simulated[beaten]
    # The artifact (its segments) simulates as the planner judged the realised module, partial
    # sums at the accumulators' width in both: the best judged plan, or its splits in the order
    # of the grid that simulated fastest (ResNet-18: 5 427 cycles in rows).
    kept = notes.get("grid_order_simulated_cycles", {}).get(notes.get("grid_order"))
    assert kept is None or kept <= min(simulated.values())
    assert plan["estimate"][0]["simulated_cycles"] == pytest.approx(
        min(simulated.values()) if kept is None else kept, rel=1e-9)


def test_matmuls_split_in_2d_beat_1d_splits_and_match_onnxruntime(tmp_path):
    # A transformer block (64 tokens, 128 wide) at batch 1 on an 8x8 mesh: some matmuls with
    # weights are cut into row bands (tokens) by column slices, their layer norms run on each
    # band's rows, the plan simulates faster as built than the best with 1-D splits only, and
    # the outputs stay those of onnxruntime.
    model = models.transformer_block(seq=64, hidden=128, heads=4, ffn=512)
    plan = compile_run_and_compare(tmp_path, model, f"chiplet -config={MESH_8X8}",
                                   "tensor-parallel")
    notes = plan["placement"]["notes"]
    assert any(dim.startswith("tiles/") for dim in notes["dims"])
    assert notes["simulated_cycles"]["1"] < notes["simulated_cycles"]["1 untiled"]


TINY_SRAM = """
[system]
name = "tiny-sram-2x2"
frequency_hz = 1.0e9
[grid]
rows = 2
cols = 2
[grid.chiplet]
[grid.chiplet.cluster]
macs_per_cycle = 256
sram_bytes = 4096
local_bandwidth = 64.0
[nop]
bandwidth = 16.0
latency = 4.0
[[dram]]
chiplet = [0, 0]
bandwidth = 8.0
[[dram]]
chiplet = [1, 1]
bandwidth = 8.0
"""


def test_pipeline_streams_weights_that_overflow_sram_and_matches_onnxruntime(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_SRAM)
    plan = compile_run_and_compare(tmp_path, models.get_model("small-cnn"),
                                   f"chiplet -config={config}", "pipeline")
    assert plan["dram_fetches"]  # weights stream from DRAM
    assert plan["placement"]["notes"]["candidates"] > 1
    assert plan["dram_policy"] in ("interleave", "nearest", "balanced")


def test_spare_sram_holds_streamed_weights_end_to_end(tmp_path, capsys):
    # small-cnn's first conv fills half its cluster's SRAM; the pipeline lends the rest to a
    # streaming cluster (checked against onnxruntime, then simulated from plan.json), as DRAM
    # is slow enough (1 B/cycle per controller) for the loans to pay.
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_SRAM.replace("bandwidth = 8.0", "bandwidth = 1.0"))
    plan = compile_run_and_compare(tmp_path, models.get_model("small-cnn"),
                                   f"chiplet -config={config}", "pipeline")
    loans = plan["sram_loans"]
    assert loans and plan["placement"]["sram_loans"] == loans
    lent = [f for f in plan["dram_fetches"] if f["lender"] is not None]
    assert {f["lender"] for f in lent} == {lender for _, lender, _ in loans}
    assert all(f["dram"] is None and f["route"] for f in lent)
    compiled = capsys.readouterr().out
    assert "from DRAM, " in compiled and "from other clusters' SRAM (loans)" in compiled
    assert main(["run", str(tmp_path / "m.tar"), "--print-time", "--batches", "4"]) == 0
    assert "sram loans: " in capsys.readouterr().out


def test_modular_matches_onnxruntime(tmp_path):
    plan = compile_run_and_compare(tmp_path, models.get_model("small-cnn"), "chiplet/mesh-4x4",
                                   "modular")
    assert plan["strategy"] == "modular"


def test_auto_keeps_the_fastest_candidate_and_prints_the_comparison(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_SRAM)
    plan = compile_run_and_compare(tmp_path, models.get_model("small-cnn"),
                                   f"chiplet -config={config}", "auto")
    out = capsys.readouterr().out
    rows = plan["placement"]["notes"]["auto"]["candidates"]
    assert len(rows) >= 3
    fastest = min((row for row in rows if "cycles" in row), key=lambda row: row["cycles"])
    assert plan["strategy"] == f"auto:{fastest['strategy']}"
    for row in rows:
        reason = next((key for key in ("skipped", "pruned") if key in row), None)
        shown = (f"{reason} ({row[reason]})" if reason
                 else f"{row['cycles']:.0f} cycles for 64 input(s)")
        assert f"candidate {row['strategy']}: {shown}" in out


def test_tensor_parallel_for_many_inputs_picks_copies_or_stages_and_matches_onnxruntime(
        tmp_path, capsys):
    # ResNet-18 at 64x64 on mesh-4x4 for 64 inputs: copies of a tile plan (with or without a
    # weight pool), or a pipeline whose stages split their ops over 2-D regions, whichever
    # simulates fastest.
    plan = compile_run_and_compare(tmp_path, models.get_model("resnet18", image=64),
                                   "chiplet/mesh-4x4", "tensor-parallel",
                                   extra=("--objective", "time"))
    notes = plan["placement"]["notes"]
    simulated = notes["simulated_cycles"]
    # The kept plan is the layout judged fastest (its key: "R", "S stages", "R pooled", ...).
    chosen = min(simulated, key=simulated.get)
    if "stages" in notes and plan["copies"] == 1:
        assert chosen == f"{notes['stages']} stages"
        assert notes["stages"] > 1 and notes["splits"] >= 1  # the stages split their ops
    else:
        assert chosen.split()[0] == str(plan["copies"]) and plan["copies"] > 1
        assert plan["weight_pool"] == ("pooled" in chosen)


SLOW_DRAM = """
[system]
name = "slow-dram-4x2"
frequency_hz = 1.0e9
[grid]
rows = 2
cols = 4
[grid.chiplet]
[grid.chiplet.cluster]
macs_per_cycle = 256
sram_bytes = 65536
local_bandwidth = 64.0
[nop]
bandwidth = 8.0
latency = 4.0
[[dram]]
chiplet = [0, 0]
bandwidth = 8.0
"""


def test_tensor_parallel_pools_copies_weights_in_microbatches_and_matches_onnxruntime(tmp_path):
    # The transformer block's weights overflow a cluster but not the grid, and DRAM is slow:
    # copies that keep one set of weights in a pool, each fetch serving two inputs, win.
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_DRAM)
    plan = compile_run_and_compare(tmp_path, models.get_model("transformer-block"),
                                   f"chiplet -config={config}", "tensor-parallel",
                                   extra=("--objective", "time"))
    assert plan["copies"] > 1 and plan["weight_pool"] and plan["microbatch"] >= 2
    simulated = plan["placement"]["notes"]["simulated_cycles"]
    assert min(simulated, key=simulated.get).endswith("pooled")
    shared = [f for f in plan["dram_fetches"] if f["shared"] is not None]
    assert shared and all(f["lender"] is not None or f["dram"] is not None for f in shared)


class _RowsEverywhere:
    """Every op with enough rows split by rows over every cluster (each part holds all its
    op's weights); keeps what the planner's judge simulates of the realised module."""

    name = "rows-everywhere"

    def plan(self, problem):
        ops, every = len(problem.graph.ops), tuple(range(problem.system.num_clusters))
        splits = tuple(OpSplit(op, "rows", every) for op, dims in sorted(problem.split_dims.items())
                       if dims.get("rows", 0) >= len(every))
        placement = Placement(self.name, (0,) * ops, (0,) * ops, (0,), splits=splits)
        self.judged = simulate_placement(problem, placement, as_built=True).total_cycles
        return placement


def test_row_parts_pool_their_weights_and_the_artifact_runs_as_judged(tmp_path):
    # small-cnn's convs cut into row bands over the 8 clusters of a 4x2 multicast mesh whose
    # 4 kB of SRAM each cannot hold the replicas: parts keep a stripe of their conv's weights
    # and fetch the other stripes from the other parts, each stripe sent once to all of them.
    config = tmp_path / "short.toml"
    config.write_text(SLOW_DRAM.replace("65536", "4096").replace(
        "latency = 4.0", "latency = 4.0\nmulticast = true"))
    model, planner = models.get_model("small-cnn"), _RowsEverywhere()
    lib = tvm_chiplet.build(model, target=f"chiplet -config={config}", strategy=planner)
    inputs = models.example_inputs(model, seed=3)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    np.testing.assert_allclose(lib.run(inputs).outputs[0], reference, rtol=1e-4, atol=1e-5)
    keys = {}
    for task in lib.plan["tasks"]:
        if task["weight_key"]:
            keys.setdefault(task["weight_key"], set()).add(task["cluster"])
    assert any(len(clusters) == 8 for clusters in keys.values())  # a conv's 8 replicas
    lent = [f for f in lib.plan["dram_fetches"] if f["lender"] is not None]
    assert lent and all(f["dram"] is None and f["shared"] is not None for f in lent)
    assert lib.plan["estimate"][0]["simulated_cycles"] == pytest.approx(planner.judged, rel=1e-9)


def test_tensor_parallel_pipeline_over_2d_regions_matches_onnxruntime(tmp_path):
    # Without copies, stages on 2-D regions, each splitting its ops, beat the whole grid.
    model = models.get_model("transformer-block")
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_DRAM)
    planner = TensorParallelPlanner(batches=64, layouts=("grid", "stages"))
    lib = tvm_chiplet.build(model, target=f"chiplet -config={config}", strategy=planner)
    inputs = models.example_inputs(model, seed=3)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    ours = lib.run(inputs).outputs[0]
    assert float(np.abs(ours - reference).max()) / float(np.abs(reference).max()) <= 1e-4
    notes = lib.plan["placement"]["notes"]
    stages = notes["stages"]
    assert stages > 1 and lib.plan["copies"] == 1 and notes["splits"] >= stages
    assert notes["simulated_cycles"][f"{stages} stages"] == min(
        notes["simulated_cycles"].values())
    assert len(lib.plan["clusters_used"]) > stages  # the stages split their ops


def test_max_parts_caps_the_clusters_of_every_split_op_end_to_end(tmp_path, capsys):
    # On mesh-4x4 tensor-parallel splits small-cnn's ops over groups of up to 16 clusters;
    # --max-parts 2 keeps every split on at most 2, and the numerics still match onnxruntime.
    model = models.get_model("small-cnn")
    free = compile_run_and_compare(tmp_path, model, "chiplet/mesh-4x4", "tensor-parallel")
    assert max(free["placement"]["notes"]["groups"]) > 2
    capped = compile_run_and_compare(tmp_path, model, "chiplet/mesh-4x4", "tensor-parallel",
                                     extra=("--max-parts", "2"))
    assert capped["placement"]["notes"]["groups"] == [2]
    capsys.readouterr()
    # Bad input: not a positive count, or a strategy it does not apply to.
    path = tmp_path / "m.onnx"
    for strategy, parts, says in (("tensor-parallel", "0", "must be a positive integer"),
                                  ("pipeline", "4", "applies to strategy 'tensor-parallel'")):
        assert main(["compile", str(path), "--target", "chiplet/mesh-4x4",
                     "--target-chiplet-strategy", strategy, "--max-parts", parts,
                     "-o", str(tmp_path / "bad.tar")]) == 2
        err = capsys.readouterr().err
        assert "max-parts" in err and says in err
        assert not (tmp_path / "bad.tar").exists()


def fire_and_gate(image: int = 32):
    """A CNN of none of the bundled models' blocks: a conv, a ceil-mode max pool, a Fire module
    (1x1 and 3x3 branches concatenated along the channels, as SqueezeNet's), a
    squeeze-and-excitation gate over the concat (EfficientNet's) and a classifier."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def weight(name, *shape):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        inits.append(helper.make_tensor(name, TensorProto.FLOAT, shape, (
            rng.normal(size=shape) * np.sqrt(2.0 / fan_in)).astype("float32").ravel()))
        return name

    def conv(x, name, cin, cout, kernel, relu=True):
        pad = kernel // 2
        nodes.append(helper.make_node("Conv", [x, weight(f"{name}.w", cout, cin, kernel, kernel),
                                               weight(f"{name}.b", cout)], [f"{name}.c"],
                                      pads=[pad] * 4))
        if not relu:
            return f"{name}.c"
        nodes.append(helper.make_node("Relu", [f"{name}.c"], [name]))
        return name

    x = conv("x", "stem", 8, 16, 3)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2],
                                  ceil_mode=1))
    squeeze = conv("pool", "squeeze", 16, 8, 1)
    nodes.append(helper.make_node("Concat", [conv(squeeze, "e1", 8, 16, 1),
                                             conv(squeeze, "e3", 8, 16, 3)], ["fire"], axis=1))
    nodes.append(helper.make_node("GlobalAveragePool", ["fire"], ["pooled"]))
    gate = conv(conv("pooled", "se1", 32, 8, 1), "se2", 8, 32, 1, relu=False)
    nodes += [helper.make_node("Sigmoid", [gate], ["sig"]),
              helper.make_node("Mul", ["fire", "sig"], ["gated"])]
    head = conv("gated", "head", 32, 16, 1)
    nodes += [helper.make_node("GlobalAveragePool", [head], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", weight("fc.w", 10, 16), weight("fc.b", 10)],
                               ["output"], transB=1)]
    graph = helper.make_graph(
        nodes, "fire_and_gate",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, image, image])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", models.OPSET)],
                             ir_version=models.IR_VERSION)


def test_a_concat_of_branches_and_a_gate_over_it_split_and_match_onnxruntime(tmp_path):
    # The concat and the gate's multiply follow the layouts of the ops around them (unit tests
    # in tests/passes: test_distribute_tensors, test_reduce_graph); end to end, the plan splits
    # ops over several clusters, the gate's multiply is an op of its own (not the gate conv's
    # epilogue), and the outputs match onnxruntime.
    model = fire_and_gate()
    plan = compile_run_and_compare(tmp_path, model, "chiplet/mesh-4x4", "tensor-parallel",
                                   extra=("--objective", "latency"))
    assert plan["placement"]["notes"]["splits"] >= 1
    assert len(plan["clusters_used"]) >= 4
    ops = extract_op_graph(ReduceGraph()(load_model(model)), "int8").ops
    assert [op.name for op in ops if "multiply" in op.name] == ["multiply"]


def test_sequence_first_torch_encoders_are_planned_in_both_forms_and_match_onnxruntime(
        tmp_path, capsys):
    # torch's nn.TransformerEncoder at batch 1 projects one-row matrices: tvmc plans them
    # flattened and as given, keeps the plan that simulates faster, and says so.
    assert export(["--models", "encoder-64", "--out", str(tmp_path)]) == 0
    model = onnx.load(tmp_path / "encoder-64.onnx")
    plan = compile_run_and_compare(tmp_path, model, "chiplet/mesh-4x4", "tensor-parallel",
                                   extra=("--objective", "latency"))
    forms = plan["placement"]["notes"]["flatten_matmul_rows_simulated"]
    assert set(forms) == {"flattened", "as given"}
    kept = min(forms, key=forms.get)
    out = capsys.readouterr().out
    assert "one-row projections planned flattened and as given" in out
    assert f"): kept {kept}" in out
    assert plan["estimate"][0]["simulated_cycles"] == pytest.approx(forms[kept])

"""The Python face: build / export_library / load_module, and passes in a user's Sequential."""

import numpy as np
import tvm
from tvm import relax

import tvm_chiplet
from tvm_chiplet.passes import PartitionByCluster, PlanPlacement, ReduceGraph
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model


def test_build_export_load_run_equals_main(tmp_path):
    model = models.get_model("small-cnn")
    inputs = models.example_inputs(model)
    lib = tvm_chiplet.build(model, target="chiplet/mesh-4x4")
    path = lib.export_library(tmp_path / "m.tar")
    loaded = tvm_chiplet.load_module(path)
    result = loaded.run(inputs)
    main_out = loaded.vm()["main"](tvm.runtime.tensor(inputs["x"])).numpy()
    np.testing.assert_array_equal(result.outputs[0], main_out)
    assert loaded.plan == lib.plan
    assert loaded.system.name == "mesh-4x4"
    assert [s.name for s in loaded.input_specs] == ["x"]


def test_build_accepts_an_irmodule_and_a_strategy_object():
    model = models.get_model("small-cnn")
    mod = load_model(model)
    planner = tvm_chiplet.passes.planners.PipelinePlanner(max_stages=2)
    lib = tvm_chiplet.build(mod, target="chiplet/cluster-4", strategy=planner)
    assert 1 <= len(lib.plan["clusters_used"]) <= 2


def test_passes_drop_into_a_users_sequential():
    model = models.get_model("small-cnn")
    mod = load_model(model)
    system = tvm_chiplet.load_system("cluster-4")
    seq = tvm.transform.Sequential(
        [ReduceGraph(), PlanPlacement(system, "pipeline", simulate_workload),
         PartitionByCluster()]
    )
    partitioned = seq(mod)
    segments = [gv.name_hint for gv in partitioned.get_global_vars()
                if gv.name_hint.startswith("seg")]
    assert segments
    x = models.example_inputs(model)["x"]
    outs = []
    for m in (mod, partitioned):
        vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
        outs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)


def test_same_inputs_give_the_same_plan():
    model = models.get_model("transformer-block")
    first = tvm_chiplet.build(model, target="chiplet/simba-6x6").plan
    second = tvm_chiplet.build(model, target="chiplet/simba-6x6").plan
    first.pop("compile_seconds")
    second.pop("compile_seconds")
    assert first == second


def test_build_reports_each_chiplet_pass_and_the_tvm_compile():
    lines = []
    tvm_chiplet.build(models.get_model("small-cnn"), target="chiplet/cluster-4",
                      progress=lines.append)
    assert lines[0] == "PlanSplitPlacement ..."
    assert "  ReduceGraph ..." in lines and "PartitionByCluster ..." in lines
    assert lines[-2] == "tvm.compile ..." and lines[-1].startswith("tvm.compile done in ")
    starts = [line.strip()[:-4] for line in lines if line.endswith(" ...")]
    ends = [line.strip().split(" done in ")[0] for line in lines if " done in " in line]
    assert sorted(starts) == sorted(ends)

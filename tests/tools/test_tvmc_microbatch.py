"""Weights that stream from DRAM serve a microbatch of inputs per fetch, end to end."""

import json

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.tools.e2e import compile_run_and_compare
from tvm_chiplet.tools.tvmc import main

SYSTEM = """
[system]
name = "small-sram-2x2"
frequency_hz = 1.0e9
dtype = "int8"

[grid]
rows = 2
cols = 2

[grid.chiplet.cluster]
macs_per_cycle = 1024
sram_bytes = 262144
local_bandwidth = 256.0

[nop]
bandwidth = 32.0
latency = 10.0

[[dram]]
chiplet = [0, 0]
bandwidth = 16.0
"""


def gemv_chain(layers: int = 4, width: int = 1024):
    """Matrix-vector layers of ``width`` x ``width`` fp32 weights (at 1024: 1 MB each at int8,
    4 MB at fp32), one ``width`` vector of activations."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(
        (rng.normal(size=(width, width)) / 32).astype("float32"), f"w{i}") for i in range(layers)]
    nodes, name = [], "x"
    for i in range(layers):
        nodes += [helper.make_node("MatMul", [name, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Relu", [f"m{i}"], [f"h{i}"])]
        name = f"h{i}"
    graph = helper.make_graph(
        nodes, "gemv_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, width])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_auto_streams_weights_once_per_microbatch_and_matches_onnxruntime(tmp_path, capsys):
    # 4 MB of weights on 1 MB of SRAM: every input would stream about 3 MB at 16 B/cycle.
    config = tmp_path / "small.toml"
    config.write_text(SYSTEM)
    plan = compile_run_and_compare(tmp_path, gemv_chain(), f"chiplet -config={config}", "auto")
    microbatch = plan["microbatch"]
    assert microbatch > 1 and plan["placement"]["microbatch"] == microbatch
    out = capsys.readouterr().out
    assert f"each fetch serves a microbatch of {microbatch} inputs" in out
    tried = plan["placement"]["notes"]["microbatch_simulated_cycles"]
    assert tried[str(microbatch)] < 0.5 * tried["1"]
    batched = next(row for row in plan["estimate"] if row["batches"] == 64)
    assert batched["inputs_simulated"] == 64 and batched["ratio_to_bound"] >= 1.0
    assert main(["run", str(tmp_path / "m.tar"), "--batches", "64", "--print-time",
                 "--profile-json", str(tmp_path / "p.json")]) == 0
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["inputs"] == 64 and report["microbatch"] == microbatch
    rounds = 64 // microbatch
    assert (f"64 inputs ({rounds} round{'s' if rounds > 1 else ''} of microbatch {microbatch})"
            in capsys.readouterr().out)

"""Held-out models of blocks the bundled ones lack, compiled and run end to end."""

import onnx
import pytest

from tests.tools.e2e import compile_run_and_compare
from tvm_chiplet.tools.bench.heldout_models import main as export

BLOCKS = {
    "mobilenetv2": {"Clip"},  # ReLU6 around depthwise convs
    "gpt-decoder": {"Where", "Tanh"},  # the causal mask, tanh GELU
    "resnext-fpn": {"Resize", "Concat", "Sigmoid"},  # upsampled and concatenated, a gate
    "tcn": {"LeakyRelu", "ReduceMax"},  # dilated 1-D convs, a max over time
    # split keys and values, repeated for grouped-query attention; the NaN guard of torch's
    # scaled_dot_product_attention
    "llama-decoder": {"Split", "Expand", "IsNaN"},
    # resized aligning the corners; group norms as torch writes them (instance norms of a
    # reshape to the groups)
    "unet-upsample": {"InstanceNormalization", "Resize"},
}


@pytest.mark.parametrize("name", sorted(BLOCKS))
@pytest.mark.parametrize("target, strategy", [("chiplet/simba-6x6", "tensor-parallel"),
                                              ("chiplet/mesh-4x4", "auto")])
def test_heldout_blocks_compile_run_and_match_onnxruntime(tmp_path, name, target, strategy):
    assert export(["--models", name, "--out", str(tmp_path)]) == 0
    model = onnx.load(tmp_path / f"{name}.onnx")
    assert BLOCKS[name] <= {node.op_type for node in model.graph.node}
    plan = compile_run_and_compare(tmp_path, model, target, strategy)
    assert plan["strategy"].startswith(strategy)
    assert len({task["cluster"] for task in plan["tasks"]}) > 1  # the work is spread

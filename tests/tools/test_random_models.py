"""Random models (tests/tools/random_models.py) through the strategies that split ops, end to
end against onnxruntime: the shapes and op mixes of models no test names."""

import pytest

from tests.tools.e2e import compile_run_and_compare
from tests.tools.random_models import random_cnn, random_transformer

SPLITTING = [("tensor-parallel", "mesh-4x4", ()), ("layer-sequential", "simba-6x6", ()),
             ("tensor-parallel", "simba-6x6", ("--device-dtype", "int8"))]


@pytest.mark.parametrize("strategy, preset, extra", SPLITTING)
@pytest.mark.parametrize("seed, large", [(1, False), (4, False), (5, False), (2, True),
                                         (7, True), (8, True), (10, True)])
def test_random_cnns_match_onnxruntime(tmp_path, seed, large, strategy, preset, extra):
    plan = compile_run_and_compare(tmp_path, random_cnn(seed, large), f"chiplet/{preset}",
                                   strategy, extra=extra)
    if strategy == "layer-sequential":  # every layer over the clusters: the classifier too
        assert plan["placement"]["notes"]["splits"] >= 1


@pytest.mark.parametrize("strategy, preset, extra", SPLITTING[:2])
@pytest.mark.parametrize("seed", [0, 3, 9])
def test_random_transformers_match_onnxruntime(tmp_path, seed, strategy, preset, extra):
    plan = compile_run_and_compare(tmp_path, random_transformer(seed), f"chiplet/{preset}",
                                   strategy, extra=extra)
    if strategy == "layer-sequential":
        assert plan["placement"]["notes"]["splits"] >= 1


def test_large_random_cnns_are_split_in_two_dimensions(tmp_path):
    # Three slices of a 55x53 image, then a 64-channel 3x3 conv and a 128-channel 1x1 conv, on
    # mesh-4x4: the convs are split over rows as well as channels (a row split and a channel
    # split, or a 2-D split into row bands by channel slices), and still match onnxruntime.
    plan = compile_run_and_compare(tmp_path, random_cnn(4, large=True), "chiplet/mesh-4x4",
                                   "tensor-parallel")
    dims = set(plan["placement"]["notes"]["dims"])
    assert ("rows" in dims and dims & {"out_channels", "reduction"}) or any(
        dim.startswith("tiles/") for dim in dims)

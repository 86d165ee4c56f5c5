"""The data-parallel strategy end to end: batch split over clusters, numerics of onnxruntime."""

import onnx
import pytest

from tests.tools.e2e import compile_run_and_compare
from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


@pytest.mark.parametrize(
    "name, batch, preset, replicas",
    [("small-cnn", 6, "cluster-4", 4), ("small-cnn", 6, "mesh-4x4", 6),
     ("transformer-block", 3, "cluster-4", 3)],
)
def test_data_parallel_matches_onnxruntime(tmp_path, capsys, name, batch, preset, replicas):
    compile_run_and_compare(tmp_path, models.get_model(name, batch=batch), f"chiplet/{preset}",
                            "data-parallel", seed=2)
    summary = capsys.readouterr().out
    assert "strategy data-parallel" in summary
    assert f"on {replicas} clusters" in summary


def test_data_parallel_with_batch_one_says_why_and_what_works(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(models.get_model("small-cnn"), path)
    code = main(["compile", str(path), "--target", "chiplet/cluster-4",
                 "--target-chiplet-strategy", "data-parallel", "-o", str(tmp_path / "m.tar")])
    err = capsys.readouterr().err
    assert code == 2
    assert "batch of at least" in err and "has batch 1" in err and "pipeline" in err
    assert not (tmp_path / "m.tar").exists()


def test_data_parallel_splits_a_model_with_relu6_clips(tmp_path, capsys):
    model = models.get_model("mobilenet-v2", batch=4, image=32, width=0.5)
    compile_run_and_compare(tmp_path, model, "chiplet/cluster-4", "data-parallel")
    assert "strategy data-parallel" in capsys.readouterr().out

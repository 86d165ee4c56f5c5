"""tvmc compile --device-dtype and the energy report, end to end (issue 11)."""

import json
import tarfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


@pytest.fixture(scope="module")
def small_cnn(tmp_path_factory):
    root = tmp_path_factory.mktemp("precision")
    model = models.get_model("small-cnn")
    onnx.save(model, root / "m.onnx")
    inputs = models.example_inputs(model, seed=2)
    np.savez(root / "in.npz", **inputs)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    return root, reference


def compile_plan(root, out, *flags) -> dict:
    assert main(["compile", str(root / "m.onnx"), "--target", "chiplet/mesh-4x4", *flags,
                 "-o", str(out)]) == 0
    with tarfile.open(out) as tar:
        return json.load(tar.extractfile("plan.json"))


def test_device_dtype_scales_bytes_not_host_numerics(small_cnn, tmp_path, capsys):
    root, reference = small_cnn
    int8 = compile_plan(root, tmp_path / "int8.tar", "--device-dtype", "int8")
    fp32 = compile_plan(root, tmp_path / "fp32.tar", "--device-dtype", "fp32")
    summary = capsys.readouterr().out
    # Partial sums are 4-byte accumulators at both (int32, fp32).
    assert "device model: int8; host numerics: fp32; partial sums: 4 bytes an element" in summary
    assert "device model: fp32; host numerics: fp32; partial sums: 4 bytes an element" in summary
    assert (int8["device_dtype"], fp32["device_dtype"]) == ("int8", "fp32")
    assert int8["partial_sum_bytes"] == fp32["partial_sum_bytes"] == 4
    weights = [sum(t["weight_bytes"] for t in plan["tasks"]) for plan in (int8, fp32)]
    assert weights[1] == 4 * weights[0] > 0
    assert main(["run", str(tmp_path / "int8.tar"), "--inputs", str(root / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as data:
        np.testing.assert_allclose(data["output_0"], reference, rtol=1e-4, atol=1e-4)


def test_the_default_is_the_systems_dtype_and_fp32_costs_more_energy(small_cnn, tmp_path):
    root, _ = small_cnn
    default = compile_plan(root, tmp_path / "d.tar")
    fp32 = compile_plan(root, tmp_path / "f.tar", "--device-dtype", "fp32")
    assert default["device_dtype"] == "int8"  # what the mesh-4x4 preset declares
    energy = [plan["estimate"][0]["energy_per_inference_pj"] for plan in (default, fp32)]
    assert 0 < energy[0] < energy[1]
    for plan in (default, fp32):
        row = plan["estimate"][0]
        assert 0 < row["energy_bound_pj"] <= row["energy_per_inference_pj"]


def test_run_reports_energy_in_every_output(small_cnn, tmp_path, capsys):
    root, _ = small_cnn
    compile_plan(root, tmp_path / "m.tar")
    assert main(["run", str(tmp_path / "m.tar"), "--print-time", "--batches", "2",
                 "--profile-json", str(tmp_path / "p.json"), "--trace", str(tmp_path / "t.json"),
                 "--report", str(tmp_path / "report")]) == 0
    table = capsys.readouterr().out
    assert "device model: int8; host numerics: fp32" in table
    assert "energy per inference: " in table
    profile = json.loads((tmp_path / "p.json").read_text())
    energy = profile["energy"]
    assert energy["modelled"]
    assert energy["total_pj"] == pytest.approx(sum(energy["per_inference_pj"].values()))
    assert set(energy["per_inference_pj"]) == {"compute", "sram", "noc", "nop", "dram", "static"}
    used = [row["energy_pj"] for row in profile["clusters"]]
    assert sum(used) == pytest.approx(energy["per_inference_pj"]["compute"]
                                      + energy["per_inference_pj"]["sram"])
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and all(e["name"].startswith("power ") for e in counters)
    assert (tmp_path / "report" / "energy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_dtype_a_cluster_does_not_compute_names_the_cluster(small_cnn, tmp_path, capsys):
    root, _ = small_cnn
    code = main(["compile", str(root / "m.onnx"), "--target", "chiplet/simba-6x6",
                 "--device-dtype", "bf16", "-o", str(tmp_path / "m.tar")])
    err = capsys.readouterr().err
    assert code == 2
    assert "does not compute bf16" in err and "x0y0" in err and "int8" in err
    assert not (tmp_path / "m.tar").exists()


def test_an_objective_without_auto_is_refused(small_cnn, tmp_path, capsys):
    root, _ = small_cnn
    code = main(["compile", str(root / "m.onnx"), "--target", "chiplet/mesh-4x4",
                 "--objective", "energy", "-o", str(tmp_path / "m.tar")])
    assert code == 2
    assert "add -strategy=auto" in capsys.readouterr().err


def test_auto_energy_objective_from_the_command_line(small_cnn, tmp_path):
    root, _ = small_cnn
    plan = compile_plan(root, tmp_path / "m.tar", "--target-chiplet-strategy", "auto",
                        "--objective", "energy")
    auto = plan["placement"]["notes"]["auto"]
    assert auto["objective"] == "energy"
    best = min((row for row in auto["candidates"] if "energy_pj" in row),
               key=lambda row: row["energy_pj"])
    assert plan["strategy"] == f"auto:{best['strategy']}"

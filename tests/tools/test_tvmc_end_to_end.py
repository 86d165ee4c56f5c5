"""tvmc compile / tvmc run end to end, for every preset, against onnxruntime and plain TVM."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from tvm import relax

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model
from tvm_chiplet.tools.tvmc import main

PRESETS = ["cluster-4", "mesh-4x4", "simba-6x6"]
MODELS = {
    "small-cnn": {},
    "transformer-block": {},
    "resnet18": {},
}


@pytest.fixture(scope="module")
def model_cases(tmp_path_factory):
    """ONNX file, inputs, onnxruntime outputs and the unpartitioned TVM build's outputs."""
    root = tmp_path_factory.mktemp("models")
    cases = {}
    for name, options in MODELS.items():
        model = models.get_model(name, **options)
        path = root / f"{name}.onnx"
        onnx.save(model, path)
        inputs = models.example_inputs(model, seed=1)
        np.savez(root / f"{name}-in.npz", **inputs)
        reference = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
        mod = ReduceGraph()(load_model(model))
        vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
        plain = vm["main"](*[tvm.runtime.tensor(inputs[k]) for k in inputs])
        plain = [plain.numpy()] if hasattr(plain, "numpy") else [t.numpy() for t in plain]
        cases[name] = (path, root / f"{name}-in.npz", reference, plain)
    return cases


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", list(MODELS))
def test_compile_and_run_match_onnxruntime_and_plain_tvm(
    model_cases, tmp_path, preset, name, capsys
):
    model_path, inputs_path, reference, plain = model_cases[name]
    artifact, outputs, profile = tmp_path / "m.tar", tmp_path / "out.npz", tmp_path / "p.json"
    assert (
        main(["compile", str(model_path), "--target", f"chiplet/{preset}", "-o", str(artifact)])
        == 0
    )
    assert (
        main(
            [
                "run",
                str(artifact),
                "--inputs",
                str(inputs_path),
                "--outputs",
                str(outputs),
                "--print-time",
                "--profile-json",
                str(profile),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    with np.load(outputs) as data:
        got = [data[f"output_{i}"] for i in range(len(data.files))]
    assert len(got) == len(reference)
    for ours, ref, tvm_out in zip(got, reference, plain, strict=True):
        scale = max(float(np.abs(ref).max()), 1e-6)
        assert float(np.abs(ours - ref).max()) / scale <= 1e-4
        np.testing.assert_allclose(ours, tvm_out, rtol=1e-5, atol=1e-6 * scale)
    report = json.loads(profile.read_text())
    assert report["system"] == preset
    assert report["clusters"] and all(c["busy_cycles"] > 0 for c in report["clusters"])
    assert report["totals"]["cycles"] > 0
    assert "busy cyc" in printed and "device:" in printed
    assert len(printed.splitlines()) >= len(report["clusters"]) + 3


def test_console_script_and_input_shapes(model_cases, tmp_path):
    import subprocess

    model_path, inputs_path, _, _ = model_cases["small-cnn"]
    artifact = tmp_path / "cnn.tar"
    shape = list(np.load(inputs_path)["x"].shape)
    compiled = subprocess.run(
        [
            "tvmc",
            "compile",
            str(model_path),
            "--target",
            "chiplet/mesh-4x4",
            "--target-chiplet-strategy",
            "pipeline",
            "--input-shapes",
            f"x:{shape}".replace(" ", ""),
            "-o",
            str(artifact),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stderr
    ran = subprocess.run(
        ["tvmc", "run", str(artifact), "--print-time"], capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert "device:" in ran.stdout


def test_trace_has_a_track_per_cluster_and_per_busy_link(model_cases, tmp_path):
    model_path, _, _, _ = model_cases["resnet18"]
    artifact, trace_path = tmp_path / "r.tar", tmp_path / "trace.json"
    assert main(["compile", str(model_path), "--target", "chiplet/mesh-4x4",
                 "-o", str(artifact)]) == 0
    assert main(["run", str(artifact), "--batches", "3", "--trace", str(trace_path)]) == 0
    events = json.loads(trace_path.read_text())["traceEvents"]
    plan_clusters = {e["tid"] for e in events if e.get("cat") == "compute"}
    named = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
             and e["pid"] == 1}
    assert plan_clusters == named and len(plan_clusters) > 1
    transfers = [e for e in events if e.get("cat") == "transfer"]
    assert transfers and all(e["dur"] >= 0 for e in transfers)
    # Copies of a placement run whole rounds: every input of the rounds has its tasks.
    served = {e["args"]["input"] for e in events if e.get("cat") == "compute"}
    assert served == set(range(len(served))) and len(served) >= 3

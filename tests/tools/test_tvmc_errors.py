"""Bad input at the command line: a clear message, exit code 2, no traceback, no partial file."""

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


def run_cli(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    root = tmp_path_factory.mktemp("cnn")
    model = models.get_model("small-cnn")
    path = root / "cnn.onnx"
    onnx.save(model, path)
    artifact = root / "cnn.tar"
    assert main(["compile", str(path), "--target", "chiplet/cluster-4", "-o", str(artifact)]) == 0
    return path, artifact, models.example_inputs(model)


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".tmp-"))


def test_missing_model_file(tmp_path, capsys):
    code, err = run_cli(["compile", tmp_path / "nope.onnx", "--target", "chiplet/mesh-4x4",
                         "-o", tmp_path / "m.tar"], capsys)
    assert code == 2 and "nope.onnx" in err and "does not exist" in err
    assert not (tmp_path / "m.tar").exists()


def test_file_that_is_not_onnx(tmp_path, capsys):
    bogus = tmp_path / "model.onnx"
    bogus.write_bytes(b"\x00\xffthis is not a protobuf" * 10)
    code, err = run_cli(["compile", bogus, "--target", "chiplet/mesh-4x4",
                         "-o", tmp_path / "m.tar"], capsys)
    assert code == 2 and "model.onnx" in err and "not an ONNX model" in err
    assert not (tmp_path / "m.tar").exists() and not leftovers(tmp_path)


def test_operator_tvm_cannot_import_names_operator_and_node(tmp_path, capsys):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu0"),
        helper.make_node("FancyUnknownOp", ["a"], ["y"], name="mystery_node"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code, err = run_cli(["compile", path, "--target", "chiplet/mesh-4x4",
                         "-o", tmp_path / "m.tar"], capsys)
    assert code == 2
    assert "FancyUnknownOp" in err and "mystery_node" in err
    assert not (tmp_path / "m.tar").exists()


def test_unknown_preset_lists_valid_ones(cnn, tmp_path, capsys):
    code, err = run_cli(["compile", cnn[0], "--target", "chiplet/mesh-9x9",
                         "-o", tmp_path / "m.tar"], capsys)
    assert code == 2 and "mesh-9x9" in err
    for preset in ("cluster-4", "mesh-4x4", "simba-6x6"):
        assert preset in err


def test_malformed_toml_names_file_and_line(cnn, tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text("[system\nname = 'x'\n")
    code, err = run_cli(["compile", cnn[0], "--target", f"chiplet -config={config}",
                         "-o", tmp_path / "m.tar"], capsys)
    assert code == 2 and "bad.toml" in err and "line" in err


def test_inconsistent_toml_names_the_field(cnn, tmp_path, capsys):
    from tvm_chiplet.targets.system_toml import load_system

    preset = load_system("mesh-4x4")
    text = Path(preset.source).read_text()
    assert "macs_per_cycle" in text
    config = tmp_path / "neg.toml"
    config.write_text(text.replace("macs_per_cycle = ", "macs_per_cycle = -", 1))
    code, err = run_cli(["compile", cnn[0], "--target", "chiplet", "--target-chiplet-config",
                         config, "-o", tmp_path / "m.tar"], capsys)
    assert code == 2 and "neg.toml" in err and "macs_per_cycle" in err


def test_truncated_artifact_is_refused(cnn, tmp_path, capsys):
    data = cnn[1].read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 3])
    code, err = run_cli(["run", cut], capsys)
    assert code == 2 and "cut.tar" in err
    assert "truncated" in err or "incomplete" in err or "checksum" in err


def test_tampered_artifact_names_the_failed_check(cnn, tmp_path, capsys):
    members = {}
    with tarfile.open(cnn[1]) as tar:
        for name in tar.getnames():
            members[name] = tar.extractfile(name).read()
    plan = json.loads(members["plan.json"])
    plan["strategy"] = "tampered"
    members["plan.json"] = json.dumps(plan).encode()
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    code, err = run_cli(["run", bad], capsys)
    assert code == 2 and "checksum of plan.json" in err


@pytest.mark.parametrize(
    "change, expected",
    [
        ("name", "expected ['x'], given ['wrong']"),
        ("shape", "expected shape"),
        ("dtype", "expected dtype float32, given float64"),
    ],
)
def test_run_inputs_that_do_not_match(cnn, tmp_path, capsys, change, expected):
    inputs = dict(cnn[2])
    if change == "name":
        inputs = {"wrong": inputs["x"]}
    elif change == "shape":
        inputs["x"] = inputs["x"][..., :-1]
    else:
        inputs["x"] = inputs["x"].astype("float64")
    path = tmp_path / "in.npz"
    np.savez(path, **inputs)
    code, err = run_cli(["run", cnn[1], "--inputs", path, "--outputs", tmp_path / "o.npz"],
                        capsys)
    assert code == 2 and expected in err
    assert not (tmp_path / "o.npz").exists() and not leftovers(tmp_path)


@pytest.fixture(scope="module")
def embedding(tmp_path_factory):
    """ids (1, 4) int64 -> Gather from a 10-row table -> relu, compiled for cluster-4."""
    root = tmp_path_factory.mktemp("embedding")
    table = helper.make_tensor("table", TensorProto.FLOAT, [10, 3],
                               np.arange(30, dtype="float32").tolist())
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("Relu", ["e"], ["y"])], "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3])], [table])
    path = root / "embedding.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    artifact = root / "embedding.tar"
    assert main(["compile", str(path), "--target", "chiplet/cluster-4", "-o",
                 str(artifact)]) == 0
    return artifact, np.arange(30, dtype="float32").reshape(10, 3)


@pytest.mark.parametrize("ids", [[0, 9, -1, -10], [0, 10, 1, 2], [-11, 0, 0, 0]])
def test_token_ids_outside_the_table_are_refused_naming_the_input(embedding, tmp_path, capsys,
                                                                 ids):
    # The compiled lookup does not check its indices: one past the table read garbage (NaN),
    # far past it crashed the process. ONNX counts negative ids from the end.
    artifact, table = embedding
    path = tmp_path / "in.npz"
    np.savez(path, ids=np.array([ids], dtype="int64"))
    code, err = run_cli(["run", artifact, "--inputs", path, "--outputs", tmp_path / "o.npz"],
                        capsys)
    if all(-10 <= i < 10 for i in ids):
        assert code == 0
        with np.load(tmp_path / "o.npz") as out:
            np.testing.assert_array_equal(next(iter(out.values())), table[ids][None])
    else:
        assert code == 2 and "input 'ids' indexes a table of 10 rows" in err
        assert "[-10, 10)" in err and not (tmp_path / "o.npz").exists()


def test_ctrl_c_while_planning_exits_as_interrupted_and_writes_nothing(cnn, tmp_path, capsys,
                                                                      monkeypatch):
    """Planning runs inside a pass that TVM calls: Ctrl-C there reaches tvmc as an interrupt
    (exit code 130), not as a RuntimeError from TVM's FFI."""
    from tvm_chiplet.passes import plan_split_placement

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plan_split_placement, "plan_splits", interrupted)
    out = tmp_path / "m.tar"
    code, err = run_cli(["compile", cnn[0], "--target", "chiplet/cluster-4",
                         "--target-chiplet-strategy", "tensor-parallel", "-o", out], capsys)
    assert code == 130 and err.strip().endswith("tvmc: interrupted") and "Error" not in err
    assert not out.exists() and leftovers(tmp_path) == []


def test_failed_export_leaves_no_partial_file(cnn, tmp_path, capsys):
    target_dir = tmp_path / "missing-dir"
    code, err = run_cli(["compile", cnn[0], "--target", "chiplet/cluster-4",
                         "-o", target_dir / "m.tar"], capsys)
    assert code == 2 and "missing-dir" in err
    assert not leftovers(tmp_path)


@pytest.mark.parametrize(("strategy", "objective"), [("tensor-parallel", "energy"),
                                                     ("single", "time")])
def test_an_objective_the_strategy_cannot_take_names_both(cnn, tmp_path, capsys, strategy,
                                                          objective):
    code, err = run_cli(["compile", cnn[0], "--target", "chiplet/mesh-4x4",
                         "--target-chiplet-strategy", strategy, "--objective", objective,
                         "-o", tmp_path / "m.tar"], capsys)
    assert code == 2 and f"objective={objective!r}" in err and repr(strategy) in err
    assert "tensor-parallel" in err and not (tmp_path / "m.tar").exists()

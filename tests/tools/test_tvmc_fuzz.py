"""Fuzzing tvmc's doors: random arguments, artifacts cut anywhere, two compiles racing for one
output path. Every outcome is a result or a one-line error with exit code 2, never a traceback
or a torn file."""

import subprocess
import sys
import tarfile

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvm_chiplet.runtime.artifact import load_module
from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main

FUZZ = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    model = models.get_model("small-cnn")
    onnx.save(model, root / "cnn.onnx")
    np.savez(root / "in.npz", **models.example_inputs(model))
    assert main(["compile", str(root / "cnn.onnx"), "--target", "chiplet/cluster-4",
                 "-o", str(root / "cnn.tar")]) == 0
    return root


def _exit_code(argv, capsys) -> int:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if code != 0:
        assert code == 2 and err.strip(), err
    return code


RUN_OPTIONS = st.lists(st.sampled_from([
    ["--batches", "0"], ["--batches", "-3"], ["--batches", "2"], ["--batches", "x"],
    ["--network", "bogus"], ["--network", "analytical"], ["--fill-mode", "ones"],
    ["--fill-mode", "nan"], ["--seed", "7"], ["--inputs", "missing.npz"], ["--inputs", "{in}"],
    ["--print-time"], ["--outputs", "{root}/no/such/dir/out.npz"], ["--trace", "{root}/t.json"],
    ["--unknown-flag"], ["--report"],
]), max_size=4)


@FUZZ
@given(options=RUN_OPTIONS)
def test_random_tvmc_run_options_give_a_result_or_a_clear_error(cnn, options, capsys):
    argv = ["run", str(cnn / "cnn.tar")]
    for option in options:
        argv += [part.format(root=cnn, **{"in": cnn / "in.npz"}) for part in option]
    _exit_code(argv, capsys)


COMPILE_OPTIONS = st.lists(st.sampled_from([
    ["--target", "chiplet/nope"], ["--target", "llvm"], ["--target", "chiplet -config=x.toml"],
    ["--target-chiplet-strategy", "bogus"], ["--device-dtype", "int4"],
    ["--input-shapes", "x:[1,3]"], ["--input-shapes", "y:[1,3,32,32]"], ["--input-shapes", "]["],
    ["--objective", "energy"], ["--pipeline", "nope"], ["-o", "{root}/no/such/dir/m.tar"],
]), min_size=1, max_size=3)


@FUZZ
@given(options=COMPILE_OPTIONS)
def test_random_bad_tvmc_compile_options_are_refused_clearly(cnn, options, capsys):
    argv = ["compile", str(cnn / "cnn.onnx")]
    if not any(option[0] == "--target" for option in options):
        argv += ["--target", "chiplet/cluster-4"]
    for option in options:
        argv += [part.format(root=cnn) for part in option]
    _exit_code(argv, capsys)


@FUZZ
@given(cut=st.integers(0, 10**9))
def test_an_artifact_cut_anywhere_is_refused_with_its_name(cnn, cut, capsys, tmp_path_factory):
    data = (cnn / "cnn.tar").read_bytes()
    with tarfile.open(cnn / "cnn.tar") as tar:
        members_end = max(m.offset_data + m.size for m in tar.getmembers())
    path = tmp_path_factory.mktemp("cut") / "cut.tar"
    path.write_bytes(data[: cut % len(data)])
    code = _exit_code(["run", str(path)], capsys)
    # Cut in the tar's end-of-archive padding, every member is whole and checks out.
    assert code == 2 or cut % len(data) >= members_end


def test_two_compiles_racing_for_one_path_leave_one_whole_artifact(cnn):
    target = cnn / "raced.tar"
    command = [sys.executable, "-m", "tvm_chiplet.tools.tvmc", "compile", str(cnn / "cnn.onnx"),
               "--target", "chiplet/cluster-4", "-o", str(target)]
    racers = [subprocess.Popen([*command, "--target-chiplet-strategy", strategy],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
              for strategy in ("pipeline", "tensor-parallel")]
    for racer in racers:
        _, err = racer.communicate(timeout=600)
        assert racer.returncode == 0, err.decode()
    module = load_module(target)  # checks every member's checksum
    assert module.plan["strategy"] in ("pipeline", "tensor-parallel")
    assert not [p.name for p in cnn.iterdir() if p.name.startswith(".tmp-")]

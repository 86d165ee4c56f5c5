"""PyTorch programs through the chiplet path: a module, an ExportedProgram and a .pt2 file, each
against torch's own output; clear errors for what cannot be exported or read."""

import numpy as np
import pytest
import torch
from torch import nn

import tvm_chiplet
from tvm_chiplet.tools.frontends import ModelLoadError
from tvm_chiplet.tools.tvmc import main

TARGET = "chiplet/cluster-4"


class SmallNet(nn.Module):
    """Conv, batch norm, residual add, pooling and a classifier: what CNN exports are made of."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.relu(y + self.conv2(y))
        return self.fc(y.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    module = SmallNet().eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = module(x).numpy()
    return module, x, expected


def test_a_module_built_with_example_inputs_matches_torch(net):
    module, x, expected = net
    lib = tvm_chiplet.build(module, target=TARGET, example_inputs=(x,))
    assert [spec.name for spec in lib.input_specs] == ["x"]
    outputs = lib.run({"x": x.numpy()}).outputs
    np.testing.assert_allclose(outputs[0], expected, rtol=1e-4, atol=1e-5)


def test_an_exported_program_through_tvmc_matches_torch(net, tmp_path, capsys):
    module, x, expected = net
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(module, (x,)), path)
    assert main(["compile", "--print-inputs", str(path)]) == 0  # was: "not an ONNX model"
    assert capsys.readouterr().out.splitlines() == ["x  float32  [2,3,16,16]"]
    np.savez(tmp_path / "in.npz", x=x.numpy())
    assert main(["compile", str(path), "--target", TARGET, "-o", str(tmp_path / "m.tar")]) == 0
    assert main(["run", str(tmp_path / "m.tar"), "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out[out.files[0]], expected, rtol=1e-4, atol=1e-5)


class LastStep(nn.Module):
    """An LSTM read at its last step and a row picked from the end (``x[:, -1]``, ``x[-2]``):
    TVM's importer takes such indices as they are, and its kernel reads out of bounds."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.fc = nn.Linear(32, 4)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1]) + y[0, -2, :4]


def test_indices_counted_from_the_end_match_torch():
    torch.manual_seed(0)
    module, x = LastStep().eval(), torch.randn(1, 8, 16)
    with torch.no_grad():
        expected = module(x).numpy()
    for _ in range(3):  # out-of-bounds reads gave different garbage run to run
        outputs = tvm_chiplet.build(module, target=TARGET, example_inputs=(x,)).run(
            {"x": x.numpy()}).outputs
        np.testing.assert_allclose(outputs[0], expected, rtol=1e-4, atol=1e-5)


class UpNet(nn.Module):
    """Convs around a ConvTranspose (a U-Net's decoder): TVM names it ``conv2d_transpose``, so
    the convs are found by data flow, in a program that returns a tuple."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(16, 8, 2, 2)
        self.out = nn.Conv2d(11, 4, 3, padding=1)

    def forward(self, x):
        return self.out(torch.cat([torch.relu(self.up(torch.relu(self.down(x)))), x], 1))


@pytest.mark.parametrize("strategy", ["tensor-parallel", "layer-sequential"])
def test_a_program_with_a_conv_transpose_is_split_or_judged_whole_and_matches_torch(strategy):
    torch.manual_seed(0)
    module, x = UpNet().eval(), torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        expected = module(x).numpy()
    lib = tvm_chiplet.build(module, target="chiplet/mesh-4x4", example_inputs=(x,),
                            strategy=strategy)
    notes = lib.plan["placement"]["notes"]
    if strategy == "layer-sequential":
        assert notes["splits"] >= 1
    else:  # its splits judged beside the model whole on one cluster, which is faster here
        assert {"1", "whole"} <= set(notes["simulated_cycles"])
    np.testing.assert_allclose(lib.run({"x": x.numpy()}).outputs[0], expected, rtol=1e-4,
                               atol=1e-5)


def test_a_module_without_example_inputs_is_refused_with_the_remedy(net):
    with pytest.raises(ModelLoadError, match=r"needs example_inputs.*export it yourself"):
        tvm_chiplet.build(net[0], target=TARGET)


def test_input_shapes_are_refused_for_a_torch_program(net):
    module, x, _ = net
    with pytest.raises(ModelLoadError, match="come from the PyTorch program's example inputs"):
        tvm_chiplet.build(module, target=TARGET, example_inputs=(x,),
                          input_shapes={"x": [1, 3, 16, 16]})


def test_bad_pt2_files_are_named(tmp_path, capsys):
    missing = tmp_path / "missing.pt2"
    assert main(["compile", str(missing), "--target", TARGET]) != 0
    assert f"model file {str(missing)!r} does not exist" in capsys.readouterr().err
    garbage = tmp_path / "garbage.pt2"
    garbage.write_bytes(b"not a zip archive")
    assert main(["compile", str(garbage), "--target", TARGET]) != 0
    assert f"{str(garbage)!r} is not a torch.export program (.pt2)" in capsys.readouterr().err

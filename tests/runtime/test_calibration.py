"""Flow calibrated against flit (runtime/calibration.py) and stored with the system."""

import dataclasses
import warnings

import pytest

import tvm_chiplet
from tvm_chiplet.runtime.calibration import Workload, calibration_toml, fit_flow_calibration
from tvm_chiplet.runtime.device import simulate_plan, simulate_workload
from tvm_chiplet.targets.system import ChipletSystem, FlowCalibration, SystemConfigError
from tvm_chiplet.targets.system_toml import PRESET_DIR, load_system
from tvm_chiplet.tools import models


def uncalibrated_preset(name: str) -> str:
    """A preset's TOML text without its [calibration] section (kept last in every preset)."""
    return (PRESET_DIR / f"{name}.toml").read_text().split("\n[calibration]")[0]


def test_the_efficiency_scales_the_bandwidth_flow_gives_a_link_kind():
    system = dataclasses.replace(load_system("mesh-4x4"), calibration=None)
    link = next(link for link in system.links if link.kind == "nop")
    tasks = [{"name": "a", "cluster": link.src, "cycles": 0.0},
             {"name": "b", "cluster": link.dst, "cycles": 0.0}]
    messages = [{"src": 0, "dst": 1, "bytes": 32000, "route": [link.id]}]
    table = FlowCalibration((("nop", 0.5),), 0.0, "test", system.network_fingerprint())
    slow = dataclasses.replace(system, calibration=table)
    plain = simulate_workload(tasks, messages, system)
    halved = simulate_workload(tasks, messages, slow)
    assert not plain.calibrated and halved.calibrated
    assert plain.total_cycles == pytest.approx(link.latency + 32000 / link.bandwidth)
    assert halved.total_cycles == pytest.approx(link.latency + 32000 / (0.5 * link.bandwidth))
    flit = simulate_workload(tasks, messages, slow, network="flit")
    assert not flit.calibrated  # the flit model is the reference: never calibrated


@pytest.fixture(scope="module")
def fitted():
    lib = tvm_chiplet.build(models.get_model("resnet18", image=64), target="chiplet/mesh-4x4")
    workload = Workload("resnet18", lib.plan, batches=4)
    calibration, rows = fit_flow_calibration(lib.system, [workload])
    return lib, workload, calibration, rows


def test_fitting_brings_flow_no_further_from_flit(fitted):
    lib, workload, calibration, rows = fitted
    (row,) = rows
    before, after = abs(row["flow"] / row["flit"] - 1), abs(row["calibrated"] / row["flit"] - 1)
    assert after <= before + 1e-12
    assert calibration.flit_error == pytest.approx(after)
    # mesh-4x4 has die-to-die links only (no NoC), and DRAM links when the plan streams weights:
    # only the kinds that carry traffic are fitted.
    streams = bool(lib.plan["dram_fetches"])
    assert [kind for kind, _ in calibration.efficiency] == ["nop"] + ["dram"] * streams
    assert all(0.25 <= eta <= 1.0 for _, eta in calibration.efficiency)
    system = dataclasses.replace(lib.system, calibration=calibration)
    assert simulate_plan(lib.plan, system, workload.batches).total_cycles == pytest.approx(
        row["calibrated"])


def test_a_calibration_section_round_trips_through_the_system_toml(fitted, tmp_path):
    _, _, calibration, _ = fitted
    path = tmp_path / "calibrated.toml"
    path.write_text(uncalibrated_preset("mesh-4x4") + "\n"
                    + calibration_toml(calibration))
    system = ChipletSystem.from_toml(path)
    assert dict(system.calibration.efficiency) == pytest.approx(dict(calibration.efficiency))
    assert system.calibration.fingerprint == system.network_fingerprint()
    assert ChipletSystem.from_dict(system.to_dict()).calibration == system.calibration


def test_a_calibration_of_another_network_is_ignored_with_a_warning(fitted, tmp_path):
    _, _, calibration, _ = fitted
    path = tmp_path / "other.toml"
    other = dataclasses.replace(calibration, fingerprint="0123456789abcdef")
    path.write_text(uncalibrated_preset("mesh-4x4") + "\n" + calibration_toml(other))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        system = ChipletSystem.from_toml(path)
    assert system.calibration is None
    assert any("runs uncalibrated" in str(w.message) for w in caught)


def test_an_efficiency_above_one_names_the_field(tmp_path):
    path = tmp_path / "bad.toml"
    system = load_system("mesh-4x4")
    bad = FlowCalibration((("nop", 1.5),), 0.0, "x", system.network_fingerprint())
    path.write_text(uncalibrated_preset("mesh-4x4") + "\n" + calibration_toml(bad))
    with pytest.raises(SystemConfigError, match=r"calibration\.flow_efficiency\.nop"):
        ChipletSystem.from_toml(path)


def test_tvmc_compile_says_which_network_model_judged_and_how_calibrated(fitted, tmp_path,
                                                                          capsys):
    import onnx

    from tvm_chiplet.tools.tvmc import main

    _, _, calibration, _ = fitted
    config = tmp_path / "calibrated.toml"
    config.write_text(uncalibrated_preset("mesh-4x4") + "\n"
                      + calibration_toml(calibration))
    onnx.save(models.get_model("small-cnn"), tmp_path / "m.onnx")
    plain = tmp_path / "plain.toml"
    plain.write_text(uncalibrated_preset("mesh-4x4"))
    for target in (f"chiplet -config={plain}", f"chiplet -config={config}"):
        assert main(["compile", str(tmp_path / "m.onnx"), "--target", target,
                     "-o", str(tmp_path / "m.tar")]) == 0
    out = capsys.readouterr().out
    assert "network model: flow (uncalibrated: the system stores no [calibration])" in out
    assert f"network model: flow, calibrated against flit ({calibration.summary()})" in out

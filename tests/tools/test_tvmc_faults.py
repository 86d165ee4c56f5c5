"""tvmc compile --faults / --random-faults, tvmc run --faults on a healthy artifact, and
tvmc routes: the routing tables printed are the ones the simulator routes by."""

import json
import tarfile

import onnx
import pytest

from tvm_chiplet.build import build
from tvm_chiplet.runtime import device
from tvm_chiplet.runtime.artifact import ArtifactError, load_module
from tvm_chiplet.targets.routing import RoutingTables
from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "cnn.onnx"
    onnx.save(models.get_model("small-cnn"), path)
    return path


def test_compile_plans_on_named_and_random_faults_on_top_of_a_preset(cnn, tmp_path, capsys):
    artifact = tmp_path / "f.tar"
    argv = ["compile", str(cnn), "--target", "chiplet/mesh-4x4", "--faults", "x0y1,x2y2:x3y2",
            "--random-faults", "chiplets=1,links=2", "--seed", "7", "-o", str(artifact)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "faults on mesh-4x4 (random: {'chiplets': 1, 'links': 2} with seed 7): dead " \
           "chiplets x0y1, " in out
    assert "14 of 16 clusters survive (88% of the compute)" in out
    assert "faults: DRAM controller 0 on x0y1.k0 (51.2 B/cycle) is lost with its chiplet" in out
    with tarfile.open(artifact) as tar:
        plan = json.load(tar.extractfile("plan.json"))
        system = json.load(tar.extractfile("system.json"))
    assert plan["faults"]["dead"]["links"][0] == ["x2y2", "x3y2"]
    assert len(plan["faults"]["dead"]["links"]) == 3
    assert "cost estimate from the routing tables, cycles per input: compute " in out
    cost = plan["cost_estimate"]
    assert cost["per_inference"] == max(cost["compute"], cost["dram"],
                                        max(cost["intra_op"], cost["inter_op"])
                                        + cost["contention"])
    assert sum(len(c["cluster"]) for c in system["chiplet"]) == 14
    # The same artifact runs with the faults it was compiled for.
    assert main(["run", str(artifact), "--faults", "x0y1,x2y2:x3y2"]) == 0


def test_running_a_healthy_artifact_on_a_faulty_system_says_what_breaks(cnn, tmp_path, capsys):
    artifact = tmp_path / "h.tar"
    build(str(cnn), target="chiplet/mesh-4x4", strategy="single").export_library(artifact)
    with tarfile.open(artifact) as tar:
        assert json.load(tar.extractfile("plan.json"))["clusters_used"] == [0]
    assert main(["run", str(artifact), "--faults", "x0y0"]) == 2
    err = capsys.readouterr().err
    assert "was compiled for mesh-4x4 without faults x0y0, which break its plan: clusters " \
           "x0y0.k0 hold planned work; recompile it for the faulty system (tvmc compile ... " \
           "--faults 'x0y0'" in err
    # x3y3 holds no DRAM controller, and no route from one to x0y0 crosses it.
    assert main(["run", str(artifact), "--faults", "x3y3"]) == 0
    assert capsys.readouterr().out.startswith(
        "faults x3y3 on mesh-4x4: no task, message, weight fetch or route of the plan uses them "
        "(1 cluster(s), 10 routes checked); running as compiled\noutput_0: shape ")
    # The weights fit x0y0's SRAM: losing a DRAM controller does not matter to this plan ...
    assert main(["run", str(artifact), "--faults", "x0y1"]) == 0
    assert "running as compiled; DRAM controller 0 on x0y1.k0 (51.2 B/cycle) is lost with its " \
           "chiplet; 3 of 4 controllers remain\n" in capsys.readouterr().out
    # ... but does to one that streams weights from it.
    module = load_module(artifact)
    module.plan["dram_fetches"] = [{"task": 0, "cluster": 0, "dram": 0, "lender": None,
                                    "bytes": 64, "route": [], "after": None}]
    with pytest.raises(ArtifactError, match=r"weights stream from DRAM controller\(s\) 0 on "
                                            r"x0y1\.k0; DRAM controller 0 on x0y1\.k0"):
        module.check_faults("x0y1")
    # Seed 15 draws x0y0 among the dead chiplets (seed 3 does not: the plan runs).
    assert main(["run", str(artifact), "--random-faults", "chiplets=2,links=3",
                 "--seed", "3"]) == 0
    assert "running as compiled" in capsys.readouterr().out
    assert main(["run", str(artifact), "--random-faults", "chiplets=2,links=3",
                 "--seed", "15"]) == 2
    assert "without faults x0y0,x3y1,x0y1.k0:x1y1.k0,x0y3.k0:x1y3.k0,x1y3.k0:x2y3.k0, which " \
           "break its plan: clusters x0y0.k0 hold planned work; DRAM controller 2 on x3y1.k0 " \
           "(51.2 B/cycle) is lost with its chiplet; 3 of 4 controllers remain; recompile it for " \
           "the faulty system (tvmc compile ... --faults 'x0y0,x3y1,x0y1.k0:x1y1.k0," \
           in capsys.readouterr().err


def test_the_simulator_routes_by_the_tables_tvmc_routes_prints(cnn, tmp_path, capsys,
                                                                monkeypatch):
    artifact = tmp_path / "f.tar"
    assert main(["compile", str(cnn), "--target", "chiplet/mesh-4x4", "--target-chiplet-strategy",
                 "modular", "--faults", "x1y1,x0y0:x1y0", "-o", str(artifact)]) == 0
    capsys.readouterr()
    assert main(["routes", str(artifact), "--router", "x0y0.k0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("routing tables of mesh-4x4: scheme up-down (up*/down*, "
                           "deadlock-free), 2 VC class(es), 15 routers\nrouter x0y0.k0 (0)\n")
    assert main(["routes", str(artifact), "--json"]) == 0
    printed = RoutingTables.from_dict(json.loads(capsys.readouterr().out))
    seen = []
    real_simulate = device.simulate
    monkeypatch.setattr(device, "simulate", lambda tasks, messages, **kw: (
        seen.append((tasks, messages)), real_simulate(tasks, messages, **kw))[1])
    assert main(["run", str(artifact)]) == 0
    tasks, messages = seen[0]
    crossing = [m for m in messages if tasks[m.src_task].cluster != tasks[m.dst_task].cluster
                and tasks[m.src_task].cluster < 15 and tasks[m.dst_task].cluster < 15]
    assert crossing
    for message in crossing:
        assert list(message.route) == printed.route(tasks[message.src_task].cluster,
                                                    tasks[message.dst_task].cluster)


TINY_WITH_DRAM_CAPACITY = """
[system]
name = "tiny"
frequency_hz = 1.0e9
[grid]
rows = 2
cols = 2
[grid.chiplet.cluster]
count = 1
macs_per_cycle = 64
sram_bytes = 8192
local_bandwidth = 32.0
[nop]
bandwidth = 16.0
latency = 8.0
[[dram]]
chiplet = [0, 0]
bandwidth = 10.0
capacity_bytes = 100000
[[dram]]
chiplet = [1, 1]
bandwidth = 10.0
capacity_bytes = 100000
"""


def test_faults_that_leave_too_little_memory_say_by_how_much(cnn, tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_WITH_DRAM_CAPACITY)
    argv = ["compile", str(cnn), "--target", f"chiplet -config={config}", "--faults", "x1y1",
            "-o", str(tmp_path / "a.tar")]
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1] == (
        "tvmc compile: error: the model does not fit tiny: it needs 171.7 kB (40.6 kB of fp32 "
        "weights + 131.1 kB for the largest op's inputs and output), the 3 cluster(s) and 1 DRAM "
        "controller(s) alive hold 124.6 kB (24.6 kB SRAM + 100.0 kB DRAM): short by 47.1 kB "
        "(47,112 bytes); compile with fewer faults, for a system with more SRAM or DRAM "
        "capacity_bytes, or at a narrower --device-dtype")

"""tvmc explore: study files, a tiny grid study on a local Ray, plan cache, resume, failures,
report."""

import csv
import os
import time
from pathlib import Path

import pytest

from tvm_chiplet.tools import explore
from tvm_chiplet.tools.explore import StudyError, load_study, run_study
from tvm_chiplet.tools.explore.study import point_id, point_system, random_points
from tvm_chiplet.tools.tvmc import main

ray = pytest.importorskip("ray")

TINY = """
[study]
name = "tiny"
base = "mesh-4x4"
models = ["small-cnn"]

[parameters]
rows = [1, 2]
cols = [2]
network = ["analytical", "flow"]

[objectives]
area = {per_mac = 2.0e-4, per_sram_mib = 0.6, per_phy = 0.5}
"""


@pytest.fixture(scope="module")
def local_ray():
    """One Ray session for the module (ray.init costs seconds); tvmc explore reuses it."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR",
                 log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def write_study(tmp_path, text=TINY, name="study.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def read_rows(out):
    with open(out / "results.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory, local_ray):
    """The tiny grid study run once through the CLI: 2 grids x 2 network models."""
    root = tmp_path_factory.mktemp("explore")
    study = write_study(root)
    out = root / "results"
    code = main(["explore", str(study), "--out", str(out)])
    return code, study, out


@pytest.mark.parametrize(("old", "new", "message"), [
    ("rows = [1, 2]", "chiplets = [4]",
     r"unknown parameter 'chiplets'; valid parameters: rows, cols, macs_per_cycle, sram_bytes"),
    ('models = ["small-cnn"]', 'models = ["small-cnn"]\nstrategies = ["fast"]',
     r"unknown strategy 'fast'; expected one of pipeline"),
    ("rows = [1, 2]", "rows = []", r"parameters.rows: the list is empty: the space has no point"),
    ("rows = [1, 2]", "rows = {low = 4, high = 2}", r"the range is empty: low 4 > high 2"),
    ("rows = [1, 2]", "rows = {low = 1, high = 2}", r"a grid cannot enumerate"),
    ("per_phy = 0.5", "per_dram_channel = 1.0", r"missing \['per_phy'\]"),
], ids=["unknown-parameter", "unknown-strategy", "empty-list", "empty-range", "grid-of-ranges",
        "area-coefficients"])
def test_bad_study_is_refused_with_the_remedy(tmp_path, old, new, message):
    with pytest.raises(StudyError, match=message):
        load_study(write_study(tmp_path, TINY.replace(old, new)))


def test_parameters_set_the_points_system(tmp_path):
    study = load_study(write_study(tmp_path, TINY.replace(
        "network = [\"analytical\", \"flow\"]",
        "sram_bytes = [1048576]\nnop_bandwidth = [16.0]\ndram_channels = [3]\nfaults = [1]")))
    point = {"model": "small-cnn", "strategy": "pipeline", "batch": 1, "rows": 2, "cols": 2,
             "sram_bytes": 1048576, "nop_bandwidth": 16.0, "dram_channels": 3, "faults": 1}
    system = point_system(study, point)
    assert system.num_clusters == 3 and len(system.drams) == 3
    assert {c.sram_bytes for c in system.clusters} == {1048576}
    assert {link.bandwidth for link in system.links if link.kind == "nop"} == {16.0}
    assert point_system(study, point).to_dict() == system.to_dict()


def test_grid_study_runs_end_to_end(tiny_results):
    code, _study, out = tiny_results
    assert code == 0
    rows = read_rows(out)
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    assert {(r["rows"], r["network"]) for r in rows} == {
        ("1", "analytical"), ("1", "flow"), ("2", "analytical"), ("2", "flow")}
    for column in ("latency_ms", "throughput_per_s", "energy_uj", "edp_uj_ms", "area",
                   "segments", "clusters_used", "bound_ratio"):
        assert all(float(r[column]) > 0 for r in rows), column
    assert (out / "pareto_latency_energy.png").stat().st_size > 0


def test_points_differing_only_in_simulation_share_a_cached_plan(tiny_results):
    _code, _study, out = tiny_results
    rows = read_rows(out)
    assert len(list((out / "plans").glob("*.json"))) == 2
    for grid in ("1", "2"):
        pair = [r for r in rows if r["rows"] == grid]
        assert pair[0]["plan_key"] == pair[1]["plan_key"]
        assert sorted(r["cached"] for r in pair) == ["False", "True"]
        full, cached = sorted(pair, key=lambda r: r["cached"])
        assert float(cached["trial_s"]) < float(full["trial_s"]) / 5


def test_rerun_skips_the_points_done(tiny_results, capsys):
    _code, study, out = tiny_results
    before = (out / "results.csv").read_text()
    assert main(["explore", str(study), "--out", str(out)]) == 0
    assert "0 points run, 4 already done" in capsys.readouterr().out
    assert (out / "results.csv").read_text() == before


def test_report_prints_the_best_point_per_objective(tiny_results, capsys):
    _code, _study, out = tiny_results
    capsys.readouterr()
    assert main(["explore", "--report", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "study tiny (grid): 4 points, 4 ok"
    best = {line.split()[1]: line for line in lines[1:]}
    assert sorted(best) == ["area", "edp", "energy", "latency", "throughput"]
    assert "rows=1, cols=2" in best["area"]


def test_failed_trials_are_recorded_and_the_study_goes_on(tmp_path, local_ray):
    study = load_study(write_study(tmp_path, TINY.replace(
        "rows = [1, 2]", "rows = [1, 2, 3, 4, 5]") + "[search]\ntimeout_s = 3\n"))

    def trial(_study, point, _cache_dir):
        if point["rows"] == 1:
            os._exit(3)
        if point["rows"] == 2:
            raise ValueError("no plan fits")
        if point["rows"] == 3:
            raise MemoryError("cannot allocate")
        if point["rows"] == 4 and point["network"] == "flow":
            time.sleep(60)
        return {"latency_ms": 1.0}

    run = run_study(study, tmp_path / "out", trial=trial)
    status = {(r["rows"], r["network"]): (r["status"], r["error"]) for r in run.rows}
    assert status[(1, "flow")][0] == "crashed"
    assert status[(2, "flow")] == ("error", "ValueError: no plan fits")
    assert status[(3, "flow")][0] == "oom"
    assert status[(4, "flow")][0] == "timeout"
    assert status[(4, "analytical")] == status[(5, "flow")] == ("ok", "")
    assert len(read_rows(tmp_path / "out")) == 10


def test_unreachable_ray_address_suggests_running_locally(tmp_path, capsys):
    code = main(["explore", str(write_study(tmp_path)), "--out", str(tmp_path / "out"),
                 "--address", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot reach the Ray cluster at '127.0.0.1:1'" in err
    assert "leaving out --address" in err and "Traceback" not in err


def test_random_search_draws_distinct_points_from_the_seed(tmp_path):
    text = TINY.replace("cols = [2]", "cols = [2]\nnop_bandwidth = {low = 8.0, high = 64.0, "
                        "log = true}") + "[search]\nmethod = \"random\"\nbudget = 5\n"
    study = load_study(write_study(tmp_path, text))
    points = random_points(study, study.budget)
    assert len({point_id(p) for p in points}) == 5
    assert all(8.0 <= p["nop_bandwidth"] <= 64.0 for p in points)
    assert random_points(study, study.budget) == points


def test_example_studies_load():
    examples = sorted((Path(explore.__file__).parent / "examples").glob("*.toml"))
    assert len(examples) == 3
    for path in examples:
        assert load_study(path).models


def test_per_op_noc_routes_each_ops_traffic_alone(tmp_path, local_ray):
    from tvm_chiplet.build import build
    from tvm_chiplet.targets.topology import Topology
    from tvm_chiplet.tools import models
    from tvm_chiplet.tools.explore.per_op_noc import op_routing_cycles, per_op_noc

    module = build(models.get_model("small-cnn"), target="chiplet/quad-2x2")
    plan, system = module.plan, module.system
    rows = per_op_noc(plan, system, chunks=2)
    assert len(rows) == len(plan["tasks"]) // plan["copies"]
    routed = [i for i, row in enumerate(rows) if row["routing_cycles_flit"] > 0]
    assert routed and all(rows[i]["message_bytes"] > 0 for i in routed)
    topology, checked = Topology(system), 0
    for index in routed:
        incoming = [m for m in plan["messages"] if m["dst"] == index]
        if len(incoming) != 1 or any(f["task"] == index for f in plan["dram_fetches"]):
            continue
        message, checked = incoming[0], checked + 1
        src, dst = plan["tasks"][message["src"]]["cluster"], plan["tasks"][index]["cluster"]
        serialisation = message["bytes"] / topology.route_bandwidth(src, dst)
        expected = topology.route_latency(src, dst) + serialisation
        assert op_routing_cycles(plan, system, index, "analytical") == pytest.approx(expected)
        assert rows[index]["routing_cycles_flit"] >= serialisation
    assert checked

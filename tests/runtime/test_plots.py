"""PNG plots of a simulated run: Gantt chart, link-load map, report folder, tvmc run --report."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.image import imread

import tvm_chiplet
from tvm_chiplet.passes.planners import PipelinePlanner
from tvm_chiplet.runtime.device import simulate_plan
from tvm_chiplet.runtime.plots import (
    gantt_chart,
    gantt_figure,
    link_heatmap,
    link_load_figure,
    write_report,
)
from tvm_chiplet.targets.system_toml import list_presets, load_preset
from tvm_chiplet.tools.models import get_model
from tvm_chiplet.tools.tvmc import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def compiled():
    # One pipeline over several clusters (no copies), so that links carry activations.
    module = tvm_chiplet.build(get_model("small-cnn"), target="chiplet/quad-2x2",
                               strategy=PipelinePlanner(replicate=False))
    sim = simulate_plan(module.plan, module.system, batches=2)
    return module, sim


@pytest.fixture(scope="module")
def artifact(compiled, tmp_path_factory):
    path = tmp_path_factory.mktemp("artifact") / "cnn.tar"
    compiled[0].export_library(path)
    return path


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    height, width = imread(path).shape[:2]
    assert width > 200 and height > 100


def synthetic_sim(system, batches=1):
    """Link arrays with a different, nonzero load on every other link."""
    n = len(system.links)
    link_bytes = np.array([1000.0 * (i + 1) if i % 2 == 0 else 0.0 for i in range(n)])
    return SimpleNamespace(
        batches=batches, network="flow", link_bytes=link_bytes,
        link_utilisation=link_bytes / max(link_bytes.max(), 1.0),
    )


def test_write_report_writes_every_png_and_no_temporary_files(compiled, tmp_path):
    module, sim = compiled
    assert module.system.has_energy
    directory = tmp_path / "nested" / "report"
    paths = write_report(module.plan, module.system, sim, directory)
    names = ["gantt.png", "link_load.png", "energy.png"]
    assert paths == [str(directory / name) for name in names]
    for path in paths:
        assert_png(Path(path))
    assert sorted(p.name for p in directory.iterdir()) == sorted(names)


def test_write_report_overwrites_an_existing_report(compiled, tmp_path):
    module, sim = compiled
    (tmp_path / "gantt.png").write_bytes(b"old")
    write_report(module.plan, module.system, sim, tmp_path)
    assert_png(tmp_path / "gantt.png")


def test_gantt_has_one_row_per_used_cluster_and_a_titled_run(compiled):
    module, sim = compiled
    fig = gantt_figure(module.plan, module.system, sim)
    ax = fig.axes[0]
    used = sorted({t["cluster"] for t in module.plan["tasks"]})
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        module.system.clusters[c].name for c in used
    ]
    bars = [c for c in ax.collections if len(c.get_paths()) == 1]
    assert len(bars) == sim.batches * len(module.plan["tasks"])
    title = ax.get_title()
    assert "quad-2x2" in title and module.plan["strategy"] in title
    assert "2 batches" in title and "flow network" in title


def test_gantt_of_copies_has_a_row_per_cluster_of_every_copy():
    module = tvm_chiplet.build(get_model("small-cnn"), target="chiplet/quad-2x2")
    copies = module.plan["copies"]
    assert copies > 1
    sim = simulate_plan(module.plan, module.system, batches=2 * copies)
    ax = gantt_figure(module.plan, module.system, sim).axes[0]
    assert len(ax.get_yticklabels()) == len({t["cluster"] for t in module.plan["tasks"]})
    assert f"{2 * copies} inputs (2 rounds of {copies} copies)" in ax.get_title()


def test_gantt_rejects_a_simulation_of_another_plan(compiled, tmp_path):
    module, sim = compiled
    plan = dict(module.plan, tasks=module.plan["tasks"][:-1])
    with pytest.raises(ValueError, match=r"task_start has shape \[2, 10\], expected"):
        gantt_chart(plan, module.system, sim, tmp_path / "g.png")
    assert list(tmp_path.iterdir()) == []


def test_link_map_draws_every_link_and_colours_only_loaded_ones(compiled):
    module, sim = compiled
    fig = link_load_figure(module.system, sim)
    links_ax = fig.axes[0]
    arrows = [p for p in links_ax.patches if type(p).__name__ == "FancyArrowPatch"]
    assert len(arrows) == len(module.system.links)
    colours = [tuple(arrow.get_edgecolor()) for arrow in arrows]
    idle = {c for c, nbytes in zip(colours, sim.link_bytes, strict=True) if nbytes == 0}
    loaded = [c for c, nbytes in zip(colours, sim.link_bytes, strict=True) if nbytes > 0]
    assert len(idle) == 1
    assert loaded and not idle & set(loaded)
    assert len(fig.axes) == 4  # two panels, two colorbars


@pytest.mark.parametrize("preset", [name for name, _ in list_presets()])
def test_link_heatmap_renders_for_every_preset(preset, tmp_path):
    system = load_preset(preset)
    path = link_heatmap(system, synthetic_sim(system), tmp_path / f"{preset}.png")
    assert_png(tmp_path / f"{preset}.png")
    assert path == str(tmp_path / f"{preset}.png")


def test_link_heatmap_marks_grid_cells_without_a_chiplet():
    system = load_preset("example-hetero")  # 2x2 grid, the fourth chiplet is faulty
    fig = link_load_figure(system, synthetic_sim(system))
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert texts.count("no chiplet") == 1


def test_link_heatmap_with_no_traffic_renders(tmp_path):
    system = load_preset("cluster-4")
    sim = synthetic_sim(system)
    sim.link_bytes = np.zeros(len(system.links))
    sim.link_utilisation = np.zeros(len(system.links))
    link_heatmap(system, sim, tmp_path / "idle.png")
    assert_png(tmp_path / "idle.png")


def test_link_heatmap_rejects_arrays_of_another_system(tmp_path):
    sim = synthetic_sim(load_preset("cluster-4"))
    with pytest.raises(ValueError, match="one per link of mesh-4x4"):
        link_heatmap(load_preset("mesh-4x4"), sim, tmp_path / "x.png")


def test_write_report_names_a_directory_it_cannot_create(compiled, tmp_path):
    module, sim = compiled
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"report directory .*file/report.* cannot be created"):
        write_report(module.plan, module.system, sim, blocker / "report")


def test_tvmc_run_report_writes_both_plots(artifact, tmp_path, capsys):
    report = tmp_path / "report"
    assert main(["run", str(artifact), "--batches", "2", "--report", str(report)]) == 0
    capsys.readouterr()
    assert_png(report / "gantt.png")
    assert_png(report / "link_load.png")


def test_tvmc_run_report_under_a_file_exits_2_naming_the_path(artifact, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = blocker / "report"
    assert main(["run", str(artifact), "--report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err

"""Tests of the parallel NoC sweeps (runtime/noc.py) and the closed-form bounds they meet."""

import multiprocessing

import numpy as np
import pytest

from tvm_chiplet.runtime.noc import (
    saturation_throughput,
    simulate_noc,
    sweep_noc,
)
from tvm_chiplet.tools.bench.noc_bounds import (
    channel_loads,
    ideal_throughput,
    mean_zero_load_latency,
)

POINTS = [
    {"topology": "mesh-4x4", "traffic": "uniform", "rate": 0.2, "cycles": 1500, "seed": 3},
    {"topology": "mesh-4x4", "traffic": "transpose", "rate": 0.1, "cycles": 1500},
    {"topology": "mesh-2x3", "traffic": "bitcomp", "rate": 0.3, "cycles": 1000, "warmup": 100},
    {"topology": "mesh-4x4", "traffic": "hotspot", "rate": 0.05, "cycles": 1500, "seed": 1},
]


def test_sweep_results_are_in_input_order_and_equal_sequential_calls_for_any_jobs():
    expected = [simulate_noc(**point) for point in POINTS]
    assert sweep_noc(POINTS, jobs=1) == expected
    assert sweep_noc(POINTS, jobs=2) == expected


def test_progress_is_called_once_per_point_counting_up_to_total():
    calls = []
    sweep_noc(POINTS, jobs=2, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(done, len(POINTS)) for done in range(1, len(POINTS) + 1)]


def test_unknown_point_key_is_rejected_before_anything_runs():
    points = [POINTS[0], {"topology": "mesh-4x4", "rates": 0.1}]
    with pytest.raises(ValueError, match=r"sweep point 1 has unknown key\(s\) 'rates'.*rate"):
        sweep_noc(points, jobs=2)
    with pytest.raises(TypeError, match="sweep point 0 must be a dict"):
        sweep_noc([("mesh-4x4", 0.1)])
    with pytest.raises(ValueError, match="jobs must be"):
        sweep_noc(POINTS, jobs=0)


def test_simulate_noc_errors_from_workers_reach_the_caller():
    points = [POINTS[0], {"topology": "mesh-2x3", "traffic": "transpose", "cycles": 100}]
    with pytest.raises(ValueError, match="transpose traffic needs a square mesh"):
        sweep_noc(points, jobs=2)


def test_interrupt_cancels_the_sweep_and_leaves_no_worker_processes():
    def interrupt(done, total):
        raise KeyboardInterrupt

    points = [{**POINTS[0], "cycles": 20_000, "seed": seed} for seed in range(6)]
    with pytest.raises(KeyboardInterrupt):
        sweep_noc(points, jobs=2, progress=interrupt)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_uniform_bound_is_4_over_k_scaled_by_other_node_destinations(k):
    """Textbook 4/k counts self-traffic; simulate_noc draws among the N - 1 other nodes."""
    nodes = k * k
    expected = min(1.0, 4 / k * (nodes - 1) / nodes)
    assert ideal_throughput(f"mesh-{k}x{k}", "uniform") == pytest.approx(expected)


def test_transpose_bound_on_4x4_follows_the_hand_counted_hot_links():
    """(x, y) -> (y, x) with XY: in row 3 the eastward link (2, 3) -> (3, 3) carries the X legs
    of (0, 3), (1, 3) and (2, 3); in column 0 the southward link (0, 0) -> (0, 1) carries the Y
    legs of (1, 0), (2, 0) and (3, 0). Load 3 per unit injection, bound 1/3."""
    link_load, ejection = channel_loads("mesh-4x4", "transpose")
    assert link_load.max() == pytest.approx(3.0)
    assert np.count_nonzero(np.isclose(link_load, 3.0)) == 4
    np.testing.assert_allclose(ejection, 1.0)
    assert ideal_throughput("mesh-4x4", "transpose") == pytest.approx(1 / 3)
    assert ideal_throughput("mesh-8x8", "transpose") == pytest.approx(1 / 7)


def test_bitcomp_and_hotspot_bounds():
    assert ideal_throughput("mesh-8x8", "bitcomp") == pytest.approx(2 / 8)
    # The hotspot's ejection port: 15 * 0.2 + 15 * 0.8 / 15 flits per unit injection.
    assert ideal_throughput("mesh-4x4", "hotspot") == pytest.approx(1 / (15 * 0.2 + 0.8))
    assert ideal_throughput("mesh-4x4", "hotspot", hotspot_fraction=0.0) == pytest.approx(0.9375)


def test_mean_zero_load_latency_matches_a_low_rate_simulation():
    result = simulate_noc("mesh-4x4", "transpose", rate=0.01, cycles=20_000, warmup=0)
    expected = mean_zero_load_latency("mesh-4x4", "transpose")
    assert result.avg_packet_latency == pytest.approx(expected, rel=0.01)


def test_saturation_of_4x4_uniform_lies_between_half_and_all_of_the_ideal():
    ideal = ideal_throughput("mesh-4x4", "uniform")
    rates = [round(0.1 * i, 1) for i in range(1, 11)]
    saturation, results = saturation_throughput(
        "mesh-4x4", "uniform", rates=rates, jobs=2, cycles=3000, warmup=300
    )
    assert 0.5 * ideal < saturation < ideal
    assert len(results) == len(rates)
    assert results[-1].saturated
    assert [r.offered for r in results] == sorted(r.offered for r in results)


def test_saturation_throughput_refuses_a_fixed_rate():
    with pytest.raises(ValueError, match="remove 'rate'"):
        saturation_throughput("mesh-4x4", "uniform", rate=0.1)

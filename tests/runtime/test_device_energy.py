"""Energy of a simulated run (runtime/device.py) against closed forms of the cost model."""

import pytest

from tvm_chiplet.runtime.device import ENERGY_TERMS, simulate_workload
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.workload import STREAM_BUFFER_FRACTION, WorkItem, build_workload

FREQ = 1.0e9


def energy_system(**energy):
    """Two one-cluster chiplets a - b (a NoP link each way), a DRAM controller on a."""
    coefficients = {"mac": 0.5, "sram": 2.0, "nop": 3.0, "dram": 10.0, "static": 0.25, **energy}
    cluster = {"macs_per_cycle": 100, "sram_bytes": 1000, "local_bandwidth": 10.0,
               "energy_pj_per_mac": coefficients["mac"],
               "energy_pj_per_sram_byte": coefficients["sram"]}
    return ChipletSystem.from_dict({
        "system": {"name": "pair", "frequency_hz": FREQ},
        "chiplet": [{"name": name, "x": x, "y": 0, "static_power_w": coefficients["static"],
                     "cluster": dict(cluster)} for x, name in enumerate("ab")],
        "nop": {"bandwidth": 8.0, "latency": 2.0, "energy_pj_per_bit": coefficients["nop"]},
        "dram": [{"chiplet": "a", "bandwidth": 4.0, "energy_pj_per_bit": coefficients["dram"]}],
    })


def run(system, batches=1, weight_bytes=0.0):
    # a on cluster 0 sends 64 B to b on cluster 1; b's weights stream from DRAM when too big.
    items = [WorkItem("a", 0, 2000.0, 100.0, 0.0),
             WorkItem("b", 1, 4000.0, 50.0, weight_bytes, [(0, 64)])]
    tasks, messages, _, fetches = build_workload(items, system)
    return simulate_workload(tasks, messages, system, batches, fetches=fetches)


def test_each_term_is_the_cost_models_closed_form():
    system = energy_system()
    sim = run(system)
    per = sim.energy.per_inference_pj
    assert per["compute"] == pytest.approx((2000 + 4000) / 2 * 0.5)
    assert per["sram"] == pytest.approx((100 + 50) * 2.0)
    assert per["nop"] == pytest.approx(64 * 8 * 3.0)
    assert per["noc"] == per["dram"] == 0.0
    assert per["static"] == pytest.approx(2 * 0.25 * sim.total_cycles / FREQ * 1e12)
    assert sim.energy.total_pj == pytest.approx(sum(per[term] for term in ENERGY_TERMS))


def test_streamed_weights_pay_dram_and_link_energy_per_inference():
    system = energy_system()
    one, four = run(system, 1, 3000.0), run(system, 4, 3000.0)
    streamed = int(3000 - (1 - STREAM_BUFFER_FRACTION) * 1000)  # beyond the resident budget
    assert one.energy.per_inference_pj["dram"] == pytest.approx(8 * streamed * 10.0)
    assert four.energy.per_inference_pj["dram"] == pytest.approx(8 * streamed * 10.0)
    # The fetch crosses the a -> b link like the 64 B message.
    assert four.energy.per_inference_pj["nop"] == pytest.approx(8 * (64 + streamed) * 3.0)


def test_energy_is_split_by_cluster_and_by_link():
    sim = run(energy_system())
    assert list(sim.energy.cluster_pj) == pytest.approx([1000 * 0.5 + 100 * 2.0,
                                                         2000 * 0.5 + 50 * 2.0])
    assert sorted(sim.energy.link_pj) == pytest.approx([0.0, 64 * 8 * 3.0])


def test_a_system_without_coefficients_models_no_energy():
    system = ChipletSystem.from_dict({
        "system": {"name": "plain", "frequency_hz": FREQ},
        "chiplet": [{"name": "a", "x": 0, "y": 0, "cluster": {
            "macs_per_cycle": 100, "sram_bytes": 1000, "local_bandwidth": 10.0}}],
        "dram": [{"chiplet": "a", "bandwidth": 4.0}],
    })
    tasks, messages, _, _ = build_workload([WorkItem("a", 0, 2000.0, 100.0, 0.0)], system)
    sim = simulate_workload(tasks, messages, system)
    assert not sim.energy.modelled
    assert sim.energy.total_pj == 0.0

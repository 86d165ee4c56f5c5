"""Tests of the synthetic system generators (meshes and tori of one-cluster chiplets)."""

from tvm_chiplet.targets.system_generators import GridEnergy, mesh_system, torus_system


def test_mesh_system_builder_applies_parameters():
    system = mesh_system(
        2, 3, bandwidth=7.0, latency=3.0, macs_per_cycle=99, dram_bandwidth=5.0, dram_at=[(2, 1)]
    )
    assert system.name == "mesh-2x3"
    assert system.num_clusters == 6
    assert {(lk.kind, lk.bandwidth, lk.latency) for lk in system.links} == {("nop", 7.0, 3.0)}
    assert {c.macs_per_cycle for c in system.clusters} == {99}
    assert [(d.node, d.bandwidth) for d in system.drams] == [(5, 5.0)]


def test_generated_systems_default_to_fp32_without_energy():
    system = torus_system(3, 3)
    assert system.device_dtype == "fp32"
    assert not system.has_energy


def test_mesh_system_takes_dtype_rates_and_energy():
    energy = GridEnergy(
        pj_per_mac={"int8": 0.1, "fp32": 1.7},
        pj_per_sram_byte=1.75,
        nop_pj_per_bit=0.5,
        dram_pj_per_bit=4.5,
        static_power_w=0.05,
    )
    system = mesh_system(
        2, 2, macs_per_cycle={"int8": 512, "fp32": 64}, dtype="int8", energy=energy
    )
    assert system.device_dtype == "int8" and system.has_energy
    assert system.with_device_dtype("fp32").peak_macs_per_cycle == 4 * 64
    assert system.clusters[3].mac_energy("fp32") == 1.7
    assert {lk.energy_pj_per_bit for lk in system.links} == {0.5}
    assert [d.energy_pj_per_bit for d in system.drams] == [4.5]
    assert {c.static_power_w for c in system.chiplets} == {0.05}

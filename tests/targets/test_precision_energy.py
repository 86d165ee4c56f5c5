"""Tests of precision (dtypes, MACs per dtype, the device dtype) and energy coefficients."""

import copy
import json
import math
import re

import pytest

from tests.targets.test_system_toml import EXPECTED_PRESETS, explicit_dict, grid_dict
from tvm_chiplet.targets.system import DEVICE_DTYPES, DTYPE_BYTES, ChipletSystem, SystemConfigError
from tvm_chiplet.targets.system_toml import PRESET_DIR, load_system


def precision_dict(macs=64, dtype="int8", dtype_macs=None, **extra):
    data = grid_dict(**extra)
    data["system"]["dtype"] = dtype
    if dtype_macs is not None:
        data["system"]["dtype_macs"] = dtype_macs
    data["grid"]["chiplet"]["cluster"]["macs_per_cycle"] = macs
    return data


def energy_dict():
    """Two chiplets of two clusters each (so both link kinds exist), every coefficient given."""
    data = precision_dict(macs={"int8": 64, "fp32": 8}, rows=1, cols=2, clusters=2)
    data["grid"]["chiplet"]["static_power_w"] = 0.05
    data["grid"]["chiplet"]["cluster"]["energy_pj_per_mac"] = {"int8": 0.1, "fp32": 1.7}
    data["grid"]["chiplet"]["cluster"]["energy_pj_per_sram_byte"] = 1.75
    data["noc"]["energy_pj_per_bit"] = 0.075
    data["nop"]["energy_pj_per_bit"] = 0.5
    data["dram"][0]["energy_pj_per_bit"] = 4.5
    return data


def _drop(data, *path):
    data = copy.deepcopy(data)
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    del target[last]
    return data


def _set(data, value, *path):
    data = copy.deepcopy(data)
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    target[last] = value
    return data


# ---------------------------------------------------------------------- precision
def test_dtype_bytes_cover_every_device_dtype():
    assert DEVICE_DTYPES == ("int8", "fp16", "bf16", "fp32")
    assert [DTYPE_BYTES[d] for d in DEVICE_DTYPES] == [1, 2, 2, 4]


def test_system_without_dtype_keeps_fp32_meaning():
    system = ChipletSystem.from_dict(grid_dict())
    assert system.device_dtype == "fp32"
    assert system.dtype_bytes == 4
    assert {c.macs for c in system.clusters} == {(("fp32", 64),)}


def test_scalar_macs_rate_the_default_dtype_only():
    system = ChipletSystem.from_dict(precision_dict(macs=256))
    cluster = system.clusters[0]
    assert cluster.macs == (("int8", 256),)
    assert cluster.macs_per_cycle == 256
    assert cluster.supports("int8") and not cluster.supports("fp16")
    assert system.supported_dtypes == ("int8",)


def test_macs_table_gives_a_rate_per_dtype_in_device_dtype_order():
    system = ChipletSystem.from_dict(precision_dict(macs={"fp32": 128, "int8": 1024, "fp16": 512}))
    cluster = system.clusters[0]
    assert cluster.macs == (("int8", 1024), ("fp16", 512), ("fp32", 128))
    assert cluster.macs_per_cycle == 1024
    assert cluster.macs_for("fp16") == 512


def test_macs_table_must_include_the_default_dtype():
    with pytest.raises(
        SystemConfigError,
        match=r"^bad\.toml: grid\.chiplet\.cluster\.macs_per_cycle: found \{'fp16': 512\}; "
        r"expected a table that includes the default dtype int8",
    ):
        ChipletSystem.from_dict(precision_dict(macs={"fp16": 512}), source="bad.toml")


def test_macs_table_unknown_dtype_names_field_and_lists_dtypes():
    with pytest.raises(
        SystemConfigError,
        match=r"grid\.chiplet\.cluster\.macs_per_cycle\.int4: unknown dtype 'int4'; expected one "
        r"of int8, fp16, bf16, fp32",
    ):
        ChipletSystem.from_dict(precision_dict(macs={"int8": 64, "int4": 128}))


def test_macs_table_rates_must_be_positive_integers():
    with pytest.raises(
        SystemConfigError, match=r"macs_per_cycle\.fp16: found 0; expected an integer >= 1"
    ):
        ChipletSystem.from_dict(precision_dict(macs={"int8": 64, "fp16": 0}))


def test_unknown_system_dtype_lists_device_dtypes():
    with pytest.raises(
        SystemConfigError, match=r"system\.dtype: found 'fp8'; expected one of int8, fp16, bf16"
    ):
        ChipletSystem.from_dict(precision_dict(dtype="fp8"))


def test_dtype_macs_adds_rounded_down_rates_to_scalar_clusters():
    data = precision_dict(macs=100, dtype_macs={"fp32": 0.125, "fp16": 0.29, "bf16": 0.001})
    cluster = ChipletSystem.from_dict(data).clusters[0]
    assert cluster.macs == (("int8", 100), ("fp16", 29), ("bf16", 1), ("fp32", 12))


def test_dtype_macs_leaves_table_clusters_alone():
    data = explicit_dict()
    data["system"]["dtype"] = "int8"
    data["system"]["dtype_macs"] = {"fp16": 0.5}
    data["chiplet"][1]["cluster"][0]["macs_per_cycle"] = {"int8": 64, "fp32": 4}
    system = ChipletSystem.from_dict(data)
    assert system.clusters[0].macs == (("int8", 64), ("fp16", 32))
    assert system.clusters[1].macs == (("int8", 64), ("fp32", 4))
    assert system.supported_dtypes == ("int8",)


def test_dtype_macs_refuses_the_default_dtype():
    with pytest.raises(
        SystemConfigError, match=r"system\.dtype_macs\.int8: int8 is the default dtype"
    ):
        ChipletSystem.from_dict(precision_dict(dtype_macs={"int8": 1.0}))


def test_dtype_macs_fraction_must_be_positive():
    with pytest.raises(
        SystemConfigError, match=r"system\.dtype_macs\.fp16: found 0; expected a number > 0"
    ):
        ChipletSystem.from_dict(precision_dict(dtype_macs={"fp16": 0}))


def test_partial_sums_are_as_wide_as_the_accumulators_of_the_device_dtype():
    # By default 4 bytes (int32 for int8 MACs, fp32 otherwise); [system] accumulator_bytes
    # sets a dtype's (e.g. 24-bit int8 accumulators), never below the dtype's own width.
    macs = {"int8": 1024, "fp16": 512, "fp32": 128}
    default = ChipletSystem.from_dict(precision_dict(macs=macs))
    assert default.accumulator_bytes == ()
    assert [(default.with_device_dtype(d).partial_sum_bytes,
             default.with_device_dtype(d).partial_sum_scale) for d in ("int8", "fp16", "fp32")] \
        == [(4, 4.0), (4, 2.0), (4, 1.0)]
    data = precision_dict(macs=macs)
    data["system"]["accumulator_bytes"] = {"int8": 3, "fp16": 1}
    narrow = ChipletSystem.from_dict(data)
    assert [narrow.with_device_dtype(d).partial_sum_bytes for d in ("int8", "fp16", "fp32")] \
        == [3, 2, 4]
    assert ChipletSystem.from_dict(narrow.to_dict()) == narrow != default


@pytest.mark.parametrize(("widths", "pattern"), [
    ({"int4": 3}, r"system\.accumulator_bytes\.int4: unknown dtype 'int4'; expected one of int8"),
    ({"int8": 0}, r"system\.accumulator_bytes\.int8: found 0; expected an integer in 1\.\.8"),
    ({"int8": 2.5}, r"system\.accumulator_bytes\.int8: found 2\.5; expected an integer in"),
    (4, r"system\.accumulator_bytes: found 4; expected a table \{dtype = bytes of its "),
])
def test_bad_accumulator_widths_name_the_field(widths, pattern):
    data = precision_dict()
    data["system"]["accumulator_bytes"] = widths
    with pytest.raises(SystemConfigError, match=pattern):
        ChipletSystem.from_dict(data)


def test_with_device_dtype_switches_rates_and_bytes():
    system = ChipletSystem.from_dict(precision_dict(macs=1024, dtype_macs={"fp32": 0.125}))
    fp32 = system.with_device_dtype("fp32")
    assert fp32.device_dtype == "fp32"
    assert fp32.dtype_bytes == 4
    assert {c.macs_per_cycle for c in fp32.clusters} == {128}
    assert fp32.peak_macs_per_cycle == 128 * system.num_clusters
    assert fp32.clusters[0].macs == system.clusters[0].macs


def test_with_device_dtype_leaves_the_input_unchanged():
    system = ChipletSystem.from_dict(precision_dict(macs=1024, dtype_macs={"fp32": 0.125}))
    before = copy.deepcopy(system)
    system.with_device_dtype("fp32")
    assert system == before and system.device_dtype == "int8"
    assert system.with_device_dtype("int8") is system


def test_with_device_dtype_names_cluster_and_supported_dtypes():
    system = ChipletSystem.from_dict(precision_dict(macs=64, dtype_macs={"fp32": 0.125}))
    with pytest.raises(
        SystemConfigError,
        match=r"^test: cluster 'x0y0\.k0' does not compute fp16; it supports int8, fp32 "
        r"\(3 other clusters also lack fp16\)",
    ):
        system.with_device_dtype("fp16")


def test_with_device_dtype_rejects_unknown_dtype():
    system = ChipletSystem.from_dict(grid_dict())
    with pytest.raises(
        SystemConfigError,
        match=r"unknown device dtype 'float64'; expected one of int8, fp16, bf16, fp32",
    ):
        system.with_device_dtype("float64")


def test_cluster_rate_of_unsupported_dtype_names_supported_dtypes():
    cluster = ChipletSystem.from_dict(precision_dict()).clusters[0]
    with pytest.raises(
        SystemConfigError, match=r"cluster 'x0y0\.k0' does not compute bf16; it supports int8"
    ):
        cluster.macs_for("bf16")


def test_stats_name_the_device_dtype():
    system = ChipletSystem.from_dict(precision_dict(macs=1000, dtype_macs={"fp16": 0.5}))
    assert "4000 int8 MACs/cycle" in system.stats()
    assert "(8.0 int8 TOPS)" in system.stats()
    assert "2000 fp16 MACs/cycle" in system.with_device_dtype("fp16").summary()


# ---------------------------------------------------------------------- energy
def test_system_without_energy_has_zero_coefficients():
    system = ChipletSystem.from_dict(grid_dict(clusters=2))
    assert not system.has_energy
    assert all(c.mac_energy_pj == () and c.sram_energy_pj_per_byte == 0 for c in system.clusters)
    assert system.clusters[0].mac_energy("fp32") == 0.0
    assert {link.energy_pj_per_bit for link in system.links} == {0.0}
    assert {d.energy_pj_per_bit for d in system.drams} == {0.0}
    assert {c.static_power_w for c in system.chiplets} == {0.0}


def test_energy_coefficients_reach_every_part():
    system = ChipletSystem.from_dict(energy_dict())
    assert system.has_energy
    cluster = system.clusters[0]
    assert cluster.mac_energy_pj == (("int8", 0.1), ("fp32", 1.7))
    assert cluster.mac_energy("fp32") == 1.7
    assert cluster.sram_energy_pj_per_byte == 1.75
    assert {(lk.kind, lk.energy_pj_per_bit) for lk in system.links} == {
        ("noc", 0.075),
        ("nop", 0.5),
    }
    assert [d.energy_pj_per_bit for d in system.drams] == [4.5]
    assert {c.static_power_w for c in system.chiplets} == {0.05}


def test_listed_link_energy_overrides_its_kind():
    data = explicit_dict()
    for chiplet in data["chiplet"]:
        chiplet["static_power_w"] = 0.0
        chiplet["cluster"][0].update(energy_pj_per_mac=0.3, energy_pj_per_sram_byte=1.0)
    data["dram"][0]["energy_pj_per_bit"] = 20.0
    data["nop"]["energy_pj_per_bit"] = 0.5
    data["link"] = [
        {"src": "a", "dst": "b", "bidirectional": False, "energy_pj_per_bit": 1.25},
        {"src": "b", "dst": "a", "bidirectional": False},
    ]
    system = ChipletSystem.from_dict(data)
    assert [lk.energy_pj_per_bit for lk in system.links] == [1.25, 0.5]
    assert system.clusters[0].mac_energy_pj == (("fp32", 0.3),)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (
            ("grid", "chiplet", "cluster", "energy_pj_per_mac"),
            r"grid\.chiplet\.cluster\.energy_pj_per_mac",
        ),
        (
            ("grid", "chiplet", "cluster", "energy_pj_per_sram_byte"),
            r"grid\.chiplet\.cluster\.energy_pj_per_sram_byte",
        ),
        (("grid", "chiplet", "static_power_w"), r"grid\.chiplet\.static_power_w"),
        (("noc", "energy_pj_per_bit"), r"noc\.energy_pj_per_bit"),
        (("nop", "energy_pj_per_bit"), r"nop\.energy_pj_per_bit"),
        (("dram", 0, "energy_pj_per_bit"), r"dram\[0\]\.energy_pj_per_bit"),
    ],
)
def test_missing_energy_coefficient_names_the_field(path, field):
    with pytest.raises(
        SystemConfigError,
        match=rf"^bad\.toml: {field}: missing energy coefficient; expected a number >= 0 .*"
        r"\(the description declares energy, e\.g\. .*: declare every coefficient or none\)$",
    ):
        ChipletSystem.from_dict(_drop(energy_dict(), *path), source="bad.toml")


def test_missing_energy_names_a_coefficient_that_is_given():
    data = _set(grid_dict(), 4.5, "dram", 0, "energy_pj_per_bit")
    with pytest.raises(
        SystemConfigError,
        match=r"grid\.chiplet\.cluster\.energy_pj_per_mac: missing energy coefficient.*"
        r"e\.g\. dram\[0\]\.energy_pj_per_bit: declare every coefficient or none",
    ):
        ChipletSystem.from_dict(data)


def test_link_kind_without_links_needs_no_energy():
    data = _drop(energy_dict(), "noc", "energy_pj_per_bit")
    data["grid"]["chiplet"]["cluster"]["count"] = 1
    system = ChipletSystem.from_dict(data)
    assert system.has_energy
    assert {lk.kind for lk in system.links} == {"nop"}


@pytest.mark.parametrize(
    ("path", "value", "pattern"),
    [
        (
            ("grid", "chiplet", "cluster", "energy_pj_per_sram_byte"),
            -1.0,
            r"grid\.chiplet\.cluster\.energy_pj_per_sram_byte: found -1\.0; expected a number "
            r">= 0 \(pJ per SRAM byte\)",
        ),
        (
            ("grid", "chiplet", "cluster", "energy_pj_per_mac", "fp32"),
            -0.5,
            r"grid\.chiplet\.cluster\.energy_pj_per_mac\.fp32: found -0\.5",
        ),
        (
            ("grid", "chiplet", "static_power_w"),
            math.inf,
            r"grid\.chiplet\.static_power_w: found inf",
        ),
        (("noc", "energy_pj_per_bit"), math.nan, r"noc\.energy_pj_per_bit: found nan"),
        (("nop", "energy_pj_per_bit"), "0.5", r"nop\.energy_pj_per_bit: found '0\.5'"),
        (("dram", 0, "energy_pj_per_bit"), -4, r"dram\[0\]\.energy_pj_per_bit: found -4"),
    ],
)
def test_bad_energy_coefficient_names_the_field(path, value, pattern):
    with pytest.raises(SystemConfigError, match=r"^bad\.toml: " + pattern):
        ChipletSystem.from_dict(_set(energy_dict(), value, *path), source="bad.toml")


def test_scalar_mac_energy_is_refused_for_a_cluster_of_several_dtypes():
    data = _set(energy_dict(), 0.1, "grid", "chiplet", "cluster", "energy_pj_per_mac")
    with pytest.raises(
        SystemConfigError,
        match=r"energy_pj_per_mac: found 0\.1; expected a table of pJ per MAC for every dtype "
        r"the cluster computes \(int8, fp32\)",
    ):
        ChipletSystem.from_dict(data)


def test_mac_energy_table_must_cover_every_computed_dtype():
    data = _set(energy_dict(), {"int8": 0.1}, "grid", "chiplet", "cluster", "energy_pj_per_mac")
    with pytest.raises(
        SystemConfigError,
        match=r"energy_pj_per_mac\.fp32: missing; expected a number >= 0 \(pJ per MAC\) because "
        r"the cluster computes fp32",
    ):
        ChipletSystem.from_dict(data)


def test_mac_energy_table_refuses_a_dtype_the_cluster_does_not_compute():
    table = {"int8": 0.1, "fp16": 0.7, "fp32": 1.7}
    data = _set(energy_dict(), table, "grid", "chiplet", "cluster", "energy_pj_per_mac")
    with pytest.raises(
        SystemConfigError, match=r"energy_pj_per_mac\.fp16: the cluster does not compute fp16"
    ):
        ChipletSystem.from_dict(data)


def test_mac_energy_table_unknown_dtype_lists_device_dtypes():
    table = {"int8": 0.1, "fp32": 1.7, "tf32": 1.0}
    data = _set(energy_dict(), table, "grid", "chiplet", "cluster", "energy_pj_per_mac")
    with pytest.raises(
        SystemConfigError,
        match=r"energy_pj_per_mac\.tf32: unknown dtype 'tf32'; expected one of int8, fp16, bf16",
    ):
        ChipletSystem.from_dict(data)


def test_energy_error_from_a_file_names_the_file(tmp_path):
    path = tmp_path / "sys.toml"
    text = (PRESET_DIR / "mesh-4x4.toml").read_text()
    path.write_text(text.replace("static_power_w = 0.055\n", ""))
    with pytest.raises(
        SystemConfigError,
        match=re.escape(str(path)) + r": grid\.chiplet\.static_power_w: missing energy",
    ):
        load_system(str(path))


# ---------------------------------------------------------------------- round trip and presets
@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS))
@pytest.mark.parametrize("dtype", ["int8", "fp16", "fp32"])
def test_round_trip_keeps_energy_and_the_chosen_device_dtype(name, dtype):
    system = load_system(name).with_device_dtype(dtype)
    again = ChipletSystem.from_dict(json.loads(json.dumps(system.to_dict())))
    assert again == system
    assert again.device_dtype == dtype and again.has_energy


@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS))
def test_every_preset_declares_int8_and_energy(name):
    system = load_system(name)
    assert system.device_dtype == "int8"
    assert system.has_energy
    assert set(system.supported_dtypes) >= {"int8", "fp16", "fp32"}
    for cluster in system.clusters:
        assert all(cluster.mac_energy(d) > 0 for d in cluster.dtypes)
        assert cluster.sram_energy_pj_per_byte > 0
    assert all(link.energy_pj_per_bit > 0 for link in system.links)
    assert all(dram.energy_pj_per_bit > 0 for dram in system.drams)
    assert all(chiplet.static_power_w > 0 for chiplet in system.chiplets)


def test_simba_preset_rates_and_energy_follow_its_sources():
    system = load_system("simba-6x6")
    cluster = system.clusters[0]
    assert cluster.macs == (("int8", 1024), ("fp16", 256), ("fp32", 64))
    assert cluster.mac_energy("int8") == pytest.approx(2 * 0.11)
    assert {link.energy_pj_per_bit for link in system.links} == {1.29}

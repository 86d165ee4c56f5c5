"""Tests of the TOML loader and validator: presets, schema forms, faults and errors."""

import copy
import re

import pytest

from tvm_chiplet.targets.system import ChipletSystem, SystemConfigError
from tvm_chiplet.targets.system_toml import PRESET_DIR, list_presets, load_system, preset_names


def grid_dict(rows=2, cols=2, clusters=1, **extra):
    data = {
        "system": {"name": "test", "frequency_hz": 1.0e9},
        "grid": {
            "rows": rows,
            "cols": cols,
            "chiplet": {
                "cluster": {
                    "count": clusters,
                    "macs_per_cycle": 64,
                    "sram_bytes": 4096,
                    "local_bandwidth": 32.0,
                }
            },
        },
        "noc": {"bandwidth": 64.0, "latency": 2.0},
        "nop": {"bandwidth": 16.0, "latency": 8.0},
        "dram": [{"chiplet": [0, 0], "bandwidth": 50.0}],
    }
    data.update(extra)
    return data


def explicit_dict():
    cluster = {"macs_per_cycle": 64, "sram_bytes": 4096, "local_bandwidth": 32.0}
    return {
        "system": {"name": "explicit", "frequency_hz": 2.0e9},
        "nop": {"bandwidth": 16.0, "latency": 8.0},
        "chiplet": [
            {"name": "a", "x": 0, "y": 0, "cluster": [dict(cluster)]},
            {"name": "b", "x": 1, "y": 0, "cluster": [dict(cluster)]},
        ],
        "dram": [{"chiplet": "a", "bandwidth": 10.0}],
    }


EXPECTED_PRESETS = {
    # name: (chiplets, clusters, noc links, nop links, drams)
    "cluster-4": (1, 4, 8, 0, 2),
    "mesh-4x4": (16, 16, 0, 48, 4),
    "simba-6x6": (36, 36, 0, 120, 4),
    "quad-2x2": (4, 16, 32, 8, 2),
    "example-hetero": (3, 6, 8, 4, 1),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS))
def test_preset_loads_with_expected_counts(name):
    system = load_system(name)
    chiplets, clusters, noc, nop, drams = EXPECTED_PRESETS[name]
    assert system.name == name
    assert len(system.chiplets) == chiplets
    assert system.num_clusters == clusters
    assert sum(link.kind == "noc" for link in system.links) == noc
    assert sum(link.kind == "nop" for link in system.links) == nop
    assert len(system.drams) == drams


def test_every_preset_file_is_tested():
    assert set(preset_names()) == set(EXPECTED_PRESETS)


def test_simba_preset_matches_published_figures():
    system = load_system("simba-6x6")
    assert system.frequency_hz == 1.8e9
    assert {c.macs_per_cycle for c in system.clusters} == {16 * 8 * 8}
    assert {c.sram_bytes for c in system.clusters} == {(16 * (32 + 8 + 3) + 64) * 1024}
    tops_per_chiplet = 2 * 1024 * system.frequency_hz / 1e12
    assert 3.6 < tops_per_chiplet < 4.2
    nop = {(link.bandwidth, link.latency) for link in system.links}
    assert nop == {(13.889, 36.0)}
    assert 128 <= 2 * system.peak_macs_per_cycle * system.frequency_hz / 1e12 < 140
    assert system.device_dtype == "int8"


def test_preset_name_with_prefix_and_path_give_same_system():
    by_name = load_system("mesh-4x4")
    assert load_system("chiplet/mesh-4x4") == by_name
    assert load_system(PRESET_DIR / "mesh-4x4.toml") == by_name
    assert load_system(str(PRESET_DIR / "mesh-4x4.toml")) == by_name


def test_list_presets_gives_one_line_per_preset():
    presets = list_presets()
    assert [name for name, _ in presets] == sorted(EXPECTED_PRESETS)
    for _, summary in presets:
        assert summary and "\n" not in summary


def test_unknown_preset_lists_valid_names():
    with pytest.raises(SystemConfigError, match=r"mesh-4x5.*did you mean 'mesh-4x4'.*simba-6x6"):
        load_system("mesh-4x5")


def test_from_toml_reads_compact_form(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(
        "[system]\nname = 'tiny'\nfrequency_hz = 5e8\n"
        "[grid]\nrows = 1\ncols = 2\n"
        "[grid.chiplet.cluster]\nmacs_per_cycle = 8\nsram_bytes = 1024\nlocal_bandwidth = 4\n"
        "[nop]\nbandwidth = 2\nlatency = 1\n"
        "[[dram]]\nchiplet = 'x1y0'\nbandwidth = 3\n"
    )
    system = ChipletSystem.from_toml(path)
    assert system.source == str(path)
    assert [c.name for c in system.clusters] == ["x0y0.k0", "x1y0.k0"]
    assert system.drams[0].node == 1
    assert system.peak_macs_per_cycle == 16
    assert system.total_sram_bytes == 2048
    assert system.summary().startswith("tiny: 2 chiplets")


def test_grid_numbers_chiplets_row_major_and_clusters_chiplet_by_chiplet():
    system = ChipletSystem.from_dict(grid_dict(2, 3, clusters=2))
    assert [(c.x, c.y) for c in system.chiplets] == [(x, y) for y in range(2) for x in range(3)]
    assert system.chiplets[4].clusters == (8, 9)
    assert system.clusters[9].name == "x1y1.k1"
    assert system.chiplet_of(9) is system.chiplets[4]


def test_local_mesh_links_neighbours_both_ways():
    system = ChipletSystem.from_dict(grid_dict(1, 1, clusters=6))
    pairs = {(link.src, link.dst) for link in system.links}
    # Default local_cols for 6 clusters is 3: k0 k1 k2 / k3 k4 k5.
    assert [(c.lx, c.ly) for c in system.clusters] == [
        (0, 0),
        (1, 0),
        (2, 0),
        (0, 1),
        (1, 1),
        (2, 1),
    ]
    expected = {(0, 1), (1, 2), (3, 4), (4, 5), (0, 3), (1, 4), (2, 5)}
    assert pairs == expected | {(b, a) for a, b in expected}


def test_ring_layout_closes_the_ring():
    data = grid_dict(1, 1, clusters=4)
    data["grid"]["chiplet"]["layout"] = "ring"
    system = ChipletSystem.from_dict(data)
    undirected = {frozenset((link.src, link.dst)) for link in system.links}
    assert undirected == {frozenset(p) for p in ((0, 1), (1, 2), (2, 3), (3, 0))}


def test_explicit_links_replace_automatic_nop_links():
    data = explicit_dict()
    data["chiplet"].append(
        {"name": "c", "x": 0, "y": 1, "cluster": [copy.deepcopy(data["chiplet"][0]["cluster"][0])]}
    )
    data["link"] = [
        {"src": "a", "dst": "b", "bidirectional": False, "bandwidth": 4.0},
        {"src": "b", "dst": "c", "bidirectional": False},
        {"src": [0, 1], "dst": "a.k0", "bidirectional": False, "latency": 1.0},
    ]
    system = ChipletSystem.from_dict(data)
    assert [(lk.src, lk.dst, lk.bandwidth, lk.latency) for lk in system.links] == [
        (0, 1, 4.0, 8.0),
        (1, 2, 16.0, 8.0),
        (2, 0, 16.0, 1.0),
    ]


def test_faulty_chiplet_disappears_and_survivors_keep_names():
    system = ChipletSystem.from_dict(grid_dict(3, 3, faults={"chiplets": ["x1y1"]}))
    names = [c.name for c in system.clusters]
    assert "x1y1.k0" not in names
    assert names == [f"x{x}y{y}.k0" for y in range(3) for x in range(3) if (x, y) != (1, 1)]
    assert [c.id for c in system.clusters] == list(range(8))
    assert len(system.links) == 2 * (12 - 4)


def test_faulty_link_and_cluster_are_removed():
    data = grid_dict(
        2, 2, clusters=4, faults={"links": [["x0y0", "x1y0"]], "clusters": ["x1y1.k3"]}
    )
    system = ChipletSystem.from_dict(data)
    intact = ChipletSystem.from_dict(grid_dict(2, 2, clusters=4))
    assert system.num_clusters == intact.num_clusters - 1
    # One nop pair and the two local pairs of x1y1.k3 are gone.
    assert len(system.links) == len(intact.links) - 2 - 4
    gateways = {system.chiplets[0].gateway, system.chiplets[1].gateway}
    assert not any({lk.src, lk.dst} == gateways for lk in system.links)


def test_dram_on_faulty_chiplet_is_dropped():
    data = grid_dict(1, 3, faults={"chiplets": [[2, 0]]})
    data["dram"].append({"chiplet": "x2y0", "bandwidth": 7.0})
    system = ChipletSystem.from_dict(data)
    assert [d.bandwidth for d in system.drams] == [50.0]


def test_dram_capacity_is_optional_and_round_trips():
    assert ChipletSystem.from_dict(grid_dict(1, 2)).drams[0].capacity_bytes is None
    data = grid_dict(1, 2)
    data["dram"][0]["capacity_bytes"] = 1 << 30
    system = ChipletSystem.from_dict(data)
    assert system.drams[0].capacity_bytes == 1 << 30
    assert ChipletSystem.from_dict(system.to_dict()) == system
    data["dram"][0]["capacity_bytes"] = 0.5
    with pytest.raises(SystemConfigError, match=r"dram\[0\]\.capacity_bytes: .*an integer >= 1"):
        ChipletSystem.from_dict(data)


def test_from_dict_does_not_mutate_input():
    data = grid_dict(2, 2, clusters=2, faults={"chiplets": ["x0y1"]})
    before = copy.deepcopy(data)
    ChipletSystem.from_dict(data)
    assert data == before


def _mutate(path, value, base=None):
    data = copy.deepcopy(base or grid_dict())
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return data


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (
            _mutate(("grid", "chiplet", "cluster", "macs_per_cycle"), KeyError),
            r"grid\.chiplet\.cluster\.macs_per_cycle: missing required field; expected an "
            r"integer >= 1",
        ),
        (_mutate(("grid", "rows"), "4"),
         r"grid\.rows: found '4'; expected an integer in 1\.\.65536"),
        (_mutate(("grid", "cols"), True), r"grid\.cols: found True"),
        (
            _mutate(("system", "frequency_hz"), 0),
            r"system\.frequency_hz: found 0; expected a number > 0",
        ),
        (_mutate(("system", "name"), "my system"), r"system\.name: found 'my system'"),
        (
            _mutate(("nop", "bandwidth"), -1.0),
            r"nop\.bandwidth: found -1\.0; expected a number > 0",
        ),
        (_mutate(("noc", "latency"), -2), r"noc\.latency: found -2; expected a number >= 0"),
        (
            _mutate(("grid", "chiplet", "cluster", "sram_bytes"), 0),
            r"grid\.chiplet\.cluster\.sram_bytes: found 0",
        ),
        (
            _mutate(("grid", "chiplet", "cluster", "local_bandwidth"), float("nan")),
            r"grid\.chiplet\.cluster\.local_bandwidth: found nan",
        ),
        (
            _mutate(("grid", "chiplet", "cluster", "mac_per_cycle"), 4),
            r"grid\.chiplet\.cluster\.mac_per_cycle: unknown key 'mac_per_cycle' \(did you mean "
            r"'macs_per_cycle'\?\); allowed keys here: name, count, macs_per_cycle",
        ),
        (
            _mutate(("topology",), {}),
            r"topology: unknown key 'topology'.*allowed keys here: system",
        ),
        (_mutate(("system",), KeyError), r"system: missing required section \[system\]"),
        (
            _mutate(("system", "dtype"), "int4"),
            r"system\.dtype: found 'int4'; expected one of int8, fp16, bf16, fp32",
        ),
        (
            _mutate(("system", "dtype_macs"), {"fp64": 0.1}),
            r"system\.dtype_macs\.fp64: unknown dtype 'fp64'; expected one of int8, fp16",
        ),
        (
            _mutate(("grid", "chiplet", "cluster", "macs_per_cycle"), {"int8": 8}),
            r"grid\.chiplet\.cluster\.macs_per_cycle: found \{'int8': 8\}; expected a table "
            r"that includes the default dtype fp32",
        ),
        (
            _mutate(("nop", "energy_pj_per_bit"), -0.5),
            r"nop\.energy_pj_per_bit: found -0\.5; expected a number >= 0 \(pJ per bit\)",
        ),
        (_mutate(("dram",), []), r"dram: no DRAM controller; expected at least one"),
        (
            _mutate(("dram",), [{"chiplet": "x5y5", "bandwidth": 1.0}]),
            r"dram\[0\]\.chiplet: unknown chiplet 'x5y5'.*expected one of 'x0y0'",
        ),
        (
            _mutate(("dram",), [{"chiplet": [7, 7], "bandwidth": 1.0}]),
            r"dram\[0\]\.chiplet: no chiplet at coordinates \[7, 7\]",
        ),
        (
            _mutate(("dram",), [{"chiplet": "x0y0", "cluster": 3, "bandwidth": 1.0}]),
            r"dram\[0\]\.cluster: found 3; expected a cluster of chiplet 'x0y0'",
        ),
        (
            _mutate(("link",), [{"src": "x0y0", "dst": "x9y9"}]),
            r"link\[0\]\.dst: unknown chiplet 'x9y9'",
        ),
        (
            _mutate(("link",), [{"src": "x0y0", "dst": "x1y0.k7"}]),
            r"link\[0\]\.dst: chiplet 'x1y0' has no cluster 'k7'; expected one of 'k0'",
        ),
        (
            _mutate(("link",), [{"src": "x0y0", "dst": "x1y0", "kind": "noc"}]),
            r"link\[0\]\.kind: found 'noc'; expected 'nop': the endpoints are on different",
        ),
        (
            _mutate(("link",), [{"src": "x0y0", "dst": "x0y0"}]),
            r"link\[0\]: src and dst are the same node",
        ),
        (
            _mutate(("nop",), {}),
            r"nop\.bandwidth: missing; expected a number > 0 \(bytes/cycle\) because automatic "
            r"nop links",
        ),
        (_mutate(("chiplet",), []), r"grid/chiplet: found both of \[grid\] and \[\[chiplet\]\]"),
        (
            _mutate(("grid",), KeyError),
            r"grid/chiplet: found neither of \[grid\] and \[\[chiplet\]\]",
        ),
        (
            _mutate(("grid", "chiplet", "local_cols"), 3),
            r"grid\.chiplet\.local_cols: found 3; expected a divisor of the cluster count 1",
        ),
        (
            _mutate(("grid", "chiplet", "name"), "chip"),
            r"grid\.chiplet at \(x=1, y=0\): duplicate chiplet name 'chip' \(also grid\.chiplet "
            r"at \(x=0, y=0\)\)",
        ),
        (
            _mutate(("faults",), {"chiplets": ["x3y3"]}),
            r"faults\.chiplets\[0\]: unknown chiplet 'x3y3'",
        ),
        (
            _mutate(("faults",), {"links": [["x0y0", "x1y1"]]}),
            r"faults\.links\[0\]: no link joins 'x0y0' and 'x1y1'",
        ),
        (
            _mutate(("faults",), {"links": [["x0y0", "x1y0"], ["x0y0", "x0y1"]]}),
            r"faults: the system is disconnected after removing \[faults\]: it splits into 2 "
            r"islands whose clusters cannot reach each other: \{x0y0\}; \{x1y0, x0y1, x1y1\}",
        ),
        (
            _mutate(("faults",), {"chiplets": ["x0y0"]}),
            r"faults: every DRAM controller sits on a faulty part",
        ),
        (
            _mutate(("faults",), {"chiplets": ["x0y0", "x1y0", "x0y1", "x1y1"]}),
            r"faults: every cluster is faulty",
        ),
        (
            _mutate(
                ("grid", "chiplet", "cluster"),
                {
                    "count": 2,
                    "name": "a",
                    "macs_per_cycle": 1,
                    "sram_bytes": 1,
                    "local_bandwidth": 1,
                },
            ),
            r"grid\.chiplet\.cluster\.name: a name needs count = 1",
        ),
    ],
)
def test_invalid_description_names_source_field_and_value(data, pattern):
    with pytest.raises(SystemConfigError, match=r"^bad\.toml: " + pattern):
        ChipletSystem.from_dict(data, source="bad.toml")


def test_explicit_form_errors_name_indexed_paths():
    data = explicit_dict()
    data["chiplet"][1]["cluster"][0]["macs_per_cycle"] = -4
    with pytest.raises(
        SystemConfigError, match=r"chiplet\[1\]\.cluster\[0\]\.macs_per_cycle: found -4"
    ):
        ChipletSystem.from_dict(data, source="x.toml")
    data = explicit_dict()
    data["chiplet"][1]["x"] = 0
    with pytest.raises(
        SystemConfigError, match=r"chiplet\[1\]: duplicate coordinates \(x=0, y=0\)"
    ):
        ChipletSystem.from_dict(data)
    data = explicit_dict()
    data["chiplet"] = []
    with pytest.raises(SystemConfigError, match=r"chiplet: empty list; expected at least one"):
        ChipletSystem.from_dict(data)
    data = explicit_dict()
    data["chiplet"][0]["cluster"] = []
    with pytest.raises(SystemConfigError, match=r"chiplet\[0\]\.cluster: empty list"):
        ChipletSystem.from_dict(data)
    data = explicit_dict()
    del data["chiplet"][0]["y"]
    with pytest.raises(SystemConfigError, match=r"chiplet\[0\]\.y: missing required field"):
        ChipletSystem.from_dict(data)


def test_disconnected_links_are_refused_without_faults():
    data = explicit_dict()
    data["link"] = [{"src": "a", "dst": "b", "bidirectional": False}]
    with pytest.raises(SystemConfigError, match=r"link: the system is disconnected with the links"):
        ChipletSystem.from_dict(data)


def test_malformed_toml_reports_file_line_and_column(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[system]\nname = 'x'\nfrequency_hz = \n")
    with pytest.raises(
        SystemConfigError, match=re.escape(str(path)) + r": malformed TOML: .*line 3"
    ):
        ChipletSystem.from_toml(path)


def test_missing_file_is_reported_with_presets(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(SystemConfigError, match=r"nope\.toml: cannot read.*mesh-4x4"):
        load_system(path)


def test_field_errors_from_a_file_name_the_file(tmp_path):
    path = tmp_path / "sys.toml"
    text = (PRESET_DIR / "mesh-4x4.toml").read_text().replace("latency = 10.0", "latency = -1.0")
    path.write_text(text)
    with pytest.raises(SystemConfigError, match=re.escape(str(path)) + r": nop\.latency: found -1"):
        load_system(str(path))


def test_multicast_is_a_link_kind_default_that_a_link_may_override():
    plain = ChipletSystem.from_dict(grid_dict(clusters=2))
    assert not any(link.multicast for link in plain.links)
    system = ChipletSystem.from_dict(grid_dict(clusters=2, nop={"bandwidth": 16.0, "latency": 8.0,
                                                                "multicast": True}))
    assert {link.kind for link in system.links if link.multicast} == {"nop"}
    assert all(link.multicast == (link.kind == "nop") for link in system.links)
    data = explicit_dict()
    data["nop"]["multicast"] = True
    data["link"] = [{"src": "a", "dst": "b", "multicast": False}, {"src": "b", "dst": "a",
                                                                   "bidirectional": False}]
    links = ChipletSystem.from_dict(data).links
    assert [(link.src, link.dst, link.multicast) for link in links] == [
        (0, 1, False), (1, 0, False), (1, 0, True)]


@pytest.mark.parametrize("where", ["nop", "link"])
def test_multicast_must_be_a_boolean(where):
    data = explicit_dict()
    if where == "nop":
        data["nop"]["multicast"] = "yes"
        match = r"nop\.multicast.*true or false"
    else:
        data["link"] = [{"src": "a", "dst": "b", "multicast": 1}]
        match = r"link\[0\]\.multicast.*true or false"
    with pytest.raises(SystemConfigError, match=match):
        ChipletSystem.from_dict(data)


def test_disconnecting_faults_name_every_island_by_chiplets_and_lone_clusters():
    data = grid_dict(1, 4, clusters=2, faults={"chiplets": ["x1y0"], "clusters": ["x3y0.k1"]})
    data["dram"].append({"chiplet": "x3y0", "bandwidth": 7.0})
    with pytest.raises(
        SystemConfigError,
        match=r"splits into 2 islands whose clusters cannot reach each other: \{x0y0\}; "
              r"\{x2y0, x3y0\}",
    ):
        ChipletSystem.from_dict(data)
    data["faults"] = {"chiplets": ["x1y0"], "links": [["x2y0.k0", "x2y0.k1"]]}
    with pytest.raises(SystemConfigError, match=r"\{x0y0\}; \{x2y0\.k0, x3y0\}; \{x2y0\.k1\}"):
        ChipletSystem.from_dict(data)


@pytest.mark.parametrize(("data", "pattern"), [
    (grid_dict(rows=10**30), r"grid\.rows.*an integer in 1\.\.65536"),
    (grid_dict(clusters=10**30), r"grid\.chiplet\.cluster\.count.*an integer in 1\.\.65536"),
    (grid_dict(rows=1024, cols=1024), r"grid: 1024 x 1024 chiplets; expected at most 65536"),
    (grid_dict(rows=256, cols=256, clusters=2), r"grid: .*expected at most 65536 clusters"),
])
def test_absurd_sizes_are_refused_before_anything_is_built(data, pattern):
    with pytest.raises(SystemConfigError, match=r"^bad\.toml: " + pattern):
        ChipletSystem.from_dict(data, source="bad.toml")


def test_multicast_orders_parse_round_trip_and_change_the_network_fingerprint():
    default = ChipletSystem.from_dict(grid_dict())
    assert default.multicast_orders == ("xy", "yx")
    data = grid_dict()
    data["system"]["multicast_orders"] = ["xy"]
    xy_only = ChipletSystem.from_dict(data)
    assert xy_only.multicast_orders == ("xy",)
    assert ChipletSystem.from_dict(xy_only.to_dict()) == xy_only != default
    # A calibration measured with trees in both orders is not one of this network.
    assert xy_only.network_fingerprint() != default.network_fingerprint()
    assert "multicast_orders" not in default.to_dict()["system"]


@pytest.mark.parametrize("orders", [[], ["zx"], ["xy", "xy"], "xy"])
def test_bad_multicast_orders_name_the_field(orders):
    data = grid_dict()
    data["system"]["multicast_orders"] = orders
    with pytest.raises(SystemConfigError, match=re.escape(
            f"system.multicast_orders: found {orders!r}; expected a non-empty list of distinct "
            "orders from ['xy', 'yx']")):
        ChipletSystem.from_dict(data)

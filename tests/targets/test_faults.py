"""Tests of faults as a what-if: parsing, applying on top of a system, random draws."""

import pytest

from tvm_chiplet.targets.faults import (
    dead_parts,
    parse_fault_counts,
    parse_faults,
    random_faults,
    with_faults,
)
from tvm_chiplet.targets.system import SystemConfigError
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import load_system


def test_fault_text_names_chiplets_clusters_and_links():
    assert parse_faults("x1y1, x0y0.k3,x0y0:x1y0") == {
        "chiplets": ["x1y1"], "clusters": ["x0y0.k3"], "links": [["x0y0", "x1y0"]]}
    assert parse_fault_counts("chiplets=2,links=4") == {"chiplets": 2, "links": 4}


@pytest.mark.parametrize(("text", "pattern"), [
    ("", r"names no part"),
    ("a:b:c", r"'a:b:c' is not a link"),
])
def test_bad_fault_text_is_refused(text, pattern):
    with pytest.raises(SystemConfigError, match=pattern):
        parse_faults(text)


def test_bad_fault_counts_are_refused():
    with pytest.raises(SystemConfigError, match=r"'chips=2'; expected kind=count"):
        parse_fault_counts("chips=2")


def test_faults_on_a_preset_keep_names_and_say_which_dram_is_lost():
    healthy = load_system("mesh-4x4")
    faulty, notes = with_faults(healthy, "x0y1,x2y2:x3y2")
    assert faulty.num_clusters == healthy.num_clusters - 1
    assert "x0y1.k0" not in {c.name for c in faulty.clusters}
    assert len(faulty.drams) == len(healthy.drams) - 1
    assert notes == ["DRAM controller 0 on x0y1.k0 (51.2 B/cycle) is lost with its chiplet; 3 of "
                     "4 controllers remain"]
    dead_clusters, dead_links = dead_parts(healthy, faulty)
    assert [healthy.clusters[c].name for c in dead_clusters] == ["x0y1.k0"]
    ends = {(healthy.clusters[healthy.links[i].src].name.split(".")[0],
             healthy.clusters[healthy.links[i].dst].name.split(".")[0]) for i in dead_links}
    assert ("x2y2", "x3y2") in ends and ("x3y2", "x2y2") in ends
    assert faulty.calibration.fingerprint == faulty.network_fingerprint()


def test_faults_naming_unknown_parts_or_splitting_the_system_are_refused():
    healthy = mesh_system(3, 3)
    with pytest.raises(SystemConfigError, match=r"unknown chiplet 'x7y7'"):
        with_faults(healthy, "x7y7")
    with pytest.raises(SystemConfigError, match=r"splits into 2 islands .*\{x0y0\}"):
        with_faults(healthy, "x0y0:x1y0,x0y0:x0y1")


def test_random_faults_are_deterministic_connected_and_as_many_as_asked():
    system = load_system("simba-6x6")
    first = random_faults(system, chiplets=4, links=8, seed=7)
    assert first == random_faults(system, chiplets=4, links=8, seed=7)
    assert first != random_faults(system, chiplets=4, links=8, seed=8)
    assert len(first["chiplets"]) == 4 and len(first["links"]) == 8
    faulty, _ = with_faults(system, first)
    assert faulty.num_clusters == system.num_clusters - 4


def test_random_faults_say_when_every_draw_disconnects():
    with pytest.raises(SystemConfigError, match=r"no set of 0 dead chiplets.*ask for fewer"):
        random_faults(mesh_system(1, 3), links=1, seed=0)

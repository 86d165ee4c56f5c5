"""Tests of the chiplet system model: serialisation round trip, equality and queries."""

import dataclasses
import json

import pytest

from tests.targets.test_system_toml import EXPECTED_PRESETS, grid_dict
from tvm_chiplet.targets.system import ChipletSystem, SystemConfigError
from tvm_chiplet.targets.system_toml import load_system


@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS))
def test_to_dict_round_trips_through_json(name):
    system = load_system(name)
    data = json.loads(json.dumps(system.to_dict()))
    assert ChipletSystem.from_dict(data) == system


def test_to_dict_writes_energy_only_when_declared():
    plain = ChipletSystem.from_dict(grid_dict(clusters=2)).to_dict()
    assert "energy_pj_per_mac" not in plain["chiplet"][0]["cluster"][0]
    assert all("energy_pj_per_bit" not in link for link in plain["link"])
    data = load_system("quad-2x2").to_dict()
    cluster = data["chiplet"][0]["cluster"][0]
    assert data["system"]["dtype"] == "int8"
    assert cluster["macs_per_cycle"] == {"int8": 1024, "fp16": 512, "fp32": 128}
    assert cluster["energy_pj_per_mac"] == {"int8": 0.1, "fp16": 0.72, "fp32": 1.69}
    assert {link["energy_pj_per_bit"] for link in data["link"]} == {0.075, 0.5}


def test_round_trip_keeps_faulty_system_numbering():
    data = grid_dict(3, 3, clusters=4, faults={"chiplets": ["x1y1"], "clusters": ["x0y0.k3"]})
    system = ChipletSystem.from_dict(data)
    again = ChipletSystem.from_dict(system.to_dict())
    assert again == system
    assert [c.name for c in again.clusters] == [c.name for c in system.clusters]


def test_systems_are_frozen_and_source_is_not_compared():
    system = ChipletSystem.from_dict(grid_dict(), source="one")
    assert system == ChipletSystem.from_dict(grid_dict(), source="two")
    with pytest.raises(dataclasses.FrozenInstanceError):
        system.name = "other"


def test_find_cluster_names_known_clusters_on_error():
    system = ChipletSystem.from_dict(grid_dict())
    assert system.find_cluster("x1y0.k0").id == 1
    with pytest.raises(SystemConfigError, match=r"no cluster named 'x9y9\.k0'.*'x0y0\.k0'"):
        system.find_cluster("x9y9.k0")

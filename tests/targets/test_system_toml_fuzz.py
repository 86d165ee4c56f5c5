"""Property-based tests of the system TOML loader: every malformed description, whatever is
wrong with it, gets a one-line SystemConfigError that names the file, never another exception."""

import copy
import math
import random
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.targets.test_system_toml import explicit_dict, grid_dict
from tvm_chiplet.targets.system import ChipletSystem, SystemConfigError
from tvm_chiplet.targets.system_toml import PRESET_DIR, load_system, preset_names

SOURCE = "fuzzed.toml"

# Values of every TOML type, and edge numbers.
ODD = [
    0, -1, 1, 2, 10**30, 1.5, -0.5, 0.0, math.nan, math.inf, -math.inf, True, False, "", "x",
    "x0y0", "noc", "int8", [], [1], [1, 2], ["a"], [[0, 0]], {}, {"a": 1}, {"count": 0},
]
ODD_VALUES = st.sampled_from(ODD)


def _paths(value, prefix=()):
    """Every (path, value) inside nested dicts and lists, the root excluded."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        yield (*prefix, key), child
        yield from _paths(child, (*prefix, key))


def _at(data, path):
    for key in path:
        data = data[key]
    return data


def _mutate(data, path, how, value):
    """``data`` with the item at ``path`` deleted, replaced by ``value``, or given a stray key."""
    data = copy.deepcopy(data)
    parent, key = _at(data, path[:-1]), path[-1]
    if how == "delete":
        del parent[key]
    elif how == "replace":
        parent[key] = value
    elif isinstance(parent[key], dict):
        parent[key]["unexpected_key"] = value
    else:
        parent[key] = {"unexpected_key": value}
    return data


def _presets():
    return [tomllib.loads((PRESET_DIR / f"{name}.toml").read_text()) for name in preset_names()]


BASES = [grid_dict(), grid_dict(2, 2, clusters=4), explicit_dict(), *_presets()]


@st.composite
def mutations(draw):
    base = draw(st.sampled_from(BASES))
    paths = [path for path, _ in _paths(base)]
    steps = draw(st.integers(1, 3))
    data = base
    for _ in range(steps):
        paths = [path for path, _ in _paths(data)]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        data = _mutate(data, path, draw(st.sampled_from(["delete", "replace", "stray"])),
                       draw(ODD_VALUES))
    return data


def _check_loads_or_says_why(data):
    try:
        ChipletSystem.from_dict(data, source=SOURCE)
    except SystemConfigError as err:
        message = str(err)
        assert "\n" not in message, message
        assert message.startswith(SOURCE), message
    # Any other exception type fails the test: that is a traceback for the user.


@pytest.mark.filterwarnings("ignore:.*calibration.*was measured on another network")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_any_mutation_of_a_valid_description_loads_or_names_the_problem(data):
    _check_loads_or_says_why(data)


@pytest.mark.parametrize("name", preset_names())
@settings(max_examples=40, deadline=None)
@given(cut=st.floats(0.0, 1.0))
def test_a_truncated_preset_file_is_refused_with_its_name(name, cut, tmp_path_factory):
    text = (PRESET_DIR / f"{name}.toml").read_text()
    path = tmp_path_factory.mktemp("cut") / f"{name}.toml"
    path.write_text(text[: int(len(text) * cut)])
    try:
        load_system(path)
    except SystemConfigError as err:
        assert "\n" not in str(err) and str(path) in str(err)


@pytest.mark.filterwarnings("ignore:.*calibration.*was measured on another network")
def test_the_mutations_break_most_descriptions_and_leave_some_valid():
    """Guards the property above: its mutations must mostly produce errors, not only no-ops."""
    rng = random.Random(0)
    refused = loaded = 0
    for _ in range(200):
        data = rng.choice(BASES)
        path = rng.choice([path for path, _ in _paths(data)])
        data = _mutate(data, path, rng.choice(["delete", "replace", "stray"]), rng.choice(ODD))
        try:
            ChipletSystem.from_dict(data, source=SOURCE)
            loaded += 1
        except SystemConfigError:
            refused += 1
    assert refused >= 100 and loaded >= 5, (refused, loaded)

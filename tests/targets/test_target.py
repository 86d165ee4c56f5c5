"""Tests of chiplet target tags and target-string parsing."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_chiplet.targets.system import SystemConfigError
from tvm_chiplet.targets.system_toml import PRESET_DIR, load_system, preset_names
from tvm_chiplet.targets.target import (
    ChipletTargetError,
    parse_target,
    register_chiplet_tags,
)


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "my system.toml"
    path.write_text((PRESET_DIR / "quad-2x2.toml").read_text().replace("quad-2x2", "mine"))
    return path


def test_every_preset_has_a_tag():
    assert register_chiplet_tags() == [f"chiplet/{name}" for name in preset_names()]
    for name in preset_names():
        target = tvm.target.Target(f"chiplet/{name}")
        assert target.kind.name == "llvm"
        assert str(target.tag) == f"chiplet/{name}"
        assert list(target.keys) == ["chiplet", "cpu"]


def test_preset_tag_string_gives_system_and_tagged_target():
    parsed = parse_target("chiplet/mesh-4x4")
    assert parsed.system == load_system("mesh-4x4")
    assert parsed.preset == "mesh-4x4"
    assert parsed.options == {}
    assert str(parsed.tvm_target.tag) == "chiplet/mesh-4x4"


def test_target_object_with_tag_is_accepted():
    parsed = parse_target(tvm.target.Target("chiplet/simba-6x6"), {"strategy": "pipeline"})
    assert parsed.system.name == "simba-6x6"
    assert parsed.strategy == "pipeline"


def test_config_file_with_options_in_string(config_file):
    parsed = parse_target(f"chiplet -config='{config_file}' -strategy=pipeline")
    assert parsed.system.name == "mine"
    assert parsed.system.num_clusters == 16
    assert parsed.options == {"config": str(config_file), "strategy": "pipeline"}
    assert parsed.preset is None
    assert list(parsed.tvm_target.keys) == ["chiplet", "cpu"]


def test_tvmc_style_option_dict(config_file):
    parsed = parse_target("chiplet", {"config": str(config_file), "strategy": "greedy"})
    assert parsed.system.name == "mine"
    assert parsed.strategy == "greedy"


def test_target_string_round_trips(config_file):
    for parsed in (
        parse_target("chiplet/quad-2x2 -strategy=pipeline"),
        parse_target("chiplet", {"config": str(config_file)}),
    ):
        again = parse_target(parsed.target_string())
        assert (again.system, again.options, again.preset) == (
            parsed.system,
            parsed.options,
            parsed.preset,
        )


@pytest.mark.parametrize(
    ("target", "options", "pattern"),
    [
        ("llvm", None, r"target 'llvm' is not a chiplet target; expected 'chiplet/<preset>'"),
        ("", None, r"empty target string"),
        ("chiplet", None, r"target 'chiplet' names no chiplet system"),
        (
            "chiplet/mesh-4x4 -tile=4",
            None,
            r"unknown chiplet target option\(s\) tile; known options are strategy: .*config: ",
        ),
        ("chiplet/mesh-4x4", {"stratgy": "x"}, r"unknown chiplet target option\(s\) stratgy"),
        ("chiplet/mesh-4x4 strategy", None, r"option 'strategy' .* is malformed"),
        (
            "chiplet/mesh-4x4 -strategy=a",
            {"strategy": "b"},
            r"'strategy' is 'a' in the target but 'b' in the options",
        ),
        ("chiplet/mesh-4x4", {"strategy": 3}, r"option 'strategy' has value 3; expected a str"),
        (
            "chiplet/mesh-4x4 -config=x.toml",
            None,
            r"names preset 'mesh-4x4' and config file 'x\.toml'; expected one of them",
        ),
        (tvm.target.Target("llvm"), None, r"has no 'chiplet/<preset>' tag"),
        (42, None, r"target 42 has type int"),
    ],
)
def test_invalid_targets_say_what_is_accepted(target, options, pattern):
    with pytest.raises(ChipletTargetError, match=pattern):
        parse_target(target, options)


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(
        SystemConfigError, match=r"unknown chiplet system preset 'mesh-9x9'.*mesh-4x4"
    ):
        parse_target("chiplet/mesh-9x9")


def test_missing_config_file_is_reported(tmp_path):
    with pytest.raises(SystemConfigError, match=r"absent\.toml: cannot read"):
        parse_target(f"chiplet -config={tmp_path / 'absent.toml'}")


def test_tvm_compile_accepts_the_chiplet_target():
    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                z = R.add(x, y)
                out = R.multiply(z, y)
                R.output(out)
            return out

    target = parse_target("chiplet/mesh-4x4").tvm_target
    executable = tvm.compile(Module, target=target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    x = np.arange(6, dtype="float32").reshape(2, 3)
    y = np.full((2, 3), 2.0, dtype="float32")
    result = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y)).numpy()
    np.testing.assert_allclose(result, (x + y) * y)

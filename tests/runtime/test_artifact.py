import io
import json
import tarfile

import numpy as np
import pytest

import tvm_chiplet
from tvm_chiplet.runtime.artifact import ArtifactError
from tvm_chiplet.runtime.executor import InputError
from tvm_chiplet.tools import models


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    model = models.get_model("small-cnn")
    lib = tvm_chiplet.build(model, target="chiplet/quad-2x2")
    path = lib.export_library(tmp_path_factory.mktemp("art") / "cnn.tar")
    return lib, path, models.example_inputs(model)


def rewrite(path, out, change):
    with tarfile.open(path) as tar:
        members = {n: tar.extractfile(n).read() for n in tar.getnames()}
    change(members)
    with tarfile.open(out, "w") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return out


def test_artifact_holds_library_plan_system_and_metadata(compiled):
    _, path, _ = compiled
    with tarfile.open(path) as tar:
        assert sorted(tar.getnames()) == ["lib.so", "metadata.json", "plan.json", "routes.json",
                                          "system.json"]
        meta = json.loads(tar.extractfile("metadata.json").read())
    assert meta["inputs"] == [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert set(meta["checksums"]) == {"lib.so", "plan.json", "routes.json", "system.json"}
    assert meta["versions"]["tvm"]


def test_export_is_atomic_and_leaves_no_temporary_file(compiled, tmp_path):
    lib, _, _ = compiled
    lib.export_library(tmp_path / "a.tar")
    assert [p.name for p in tmp_path.iterdir()] == ["a.tar"]


def test_version_mismatch_is_named(compiled, tmp_path):
    def older_tvm(members):
        meta = json.loads(members["metadata.json"])
        meta["versions"]["tvm"] = "0.19.0"
        members["metadata.json"] = json.dumps(meta).encode()

    bad = rewrite(compiled[1], tmp_path / "old.tar", older_tvm)
    with pytest.raises(ArtifactError, match=r"built with tvm 0\.19\.0"):
        tvm_chiplet.load_module(bad)


def test_missing_member_is_named(compiled, tmp_path):
    bad = rewrite(compiled[1], tmp_path / "nolib.tar", lambda m: m.pop("lib.so"))
    with pytest.raises(ArtifactError, match=r"incomplete: missing \['lib.so'\]"):
        tvm_chiplet.load_module(bad)


def test_executor_uses_one_worker_per_cluster_and_matches_main(compiled):
    _, path, inputs = compiled
    module = tvm_chiplet.load_module(path)
    result = module.run(inputs)
    expected = module.vm()["main"](*[np.asarray(inputs["x"])]).numpy()
    np.testing.assert_array_equal(result.outputs[0], expected)
    # The host runs copy 0's segments; copies of the placement only change device timing.
    segment_clusters = {segment["cluster"] for segment in module.plan["segments"]}
    assert {run.cluster for run in result.segments} == segment_clusters
    assert set(result.cluster_seconds) == segment_clusters
    assert segment_clusters <= set(module.plan["clusters_used"])
    for transfer in result.transfers:
        assert transfer["src_cluster"] != transfer["dst_cluster"] and transfer["bytes"] > 0
        assert transfer["route"]


def test_inputs_given_as_a_list_in_spec_order(compiled):
    lib, _, inputs = compiled
    assert lib.run([inputs["x"]]).outputs[0].shape == (1, 10)
    with pytest.raises(InputError, match="expected 1 inputs"):
        lib.run([inputs["x"], inputs["x"]])

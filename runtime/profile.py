"""Per-cluster report: modeled device time from the C++ simulator plus measured host time."""

from __future__ import annotations

import numpy as np

from tvm_chiplet.runtime.device import DeviceSimResult
from tvm_chiplet.runtime.simulator import SimResult
from tvm_chiplet.targets.system import ChipletSystem


def bytes_label(value: float) -> str:
    """``"3.5 MB"``, ``"12 kB"``, ``"80 B"``: three significant digits in the largest unit."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def energy_label(picojoules: float) -> str:
    """``"1.25 mJ"``, ``"310 uJ"``, ``"4.2 nJ"``: three significant digits in the largest unit."""
    for unit, scale in (("J", 1e12), ("mJ", 1e9), ("uJ", 1e6), ("nJ", 1e3)):
        if picojoules >= scale:
            return f"{picojoules / scale:.3g} {unit}"
    return f"{picojoules:.3g} pJ"


def energy_parts(per_inference_pj: dict[str, float]) -> str:
    """``"compute 61%, sram 20%, ..."``: each energy term's share of the total, largest first."""
    total = sum(per_inference_pj.values()) or 1.0
    return ", ".join(f"{name} {100 * value / total:.0f}%" for name, value in
                     sorted(per_inference_pj.items(), key=lambda item: -item[1]))


def run_label(batches: int, copies: int = 1, microbatch: int = 1) -> str:
    """``"2 batches"``, or for copies of a placement ``"8 inputs (2 rounds of 4 copies)"``, or
    with microbatches ``"64 inputs (2 rounds of 2 copies x microbatch 16)"``."""
    if copies > 1 or microbatch > 1:
        rounds = f"{batches} round{'s' if batches != 1 else ''}"
        parts = [f"{copies} copies"] * (copies > 1) + [f"microbatch {microbatch}"] * (
            microbatch > 1)
        return f"{batches * copies * microbatch} inputs ({rounds} of {' x '.join(parts)})"
    return f"{batches} batch{'es' if batches != 1 else ''}"


def profile_report(plan: dict, system: ChipletSystem, sim: SimResult, execution=None) -> dict:
    """Everything ``--profile-json`` writes: per cluster, per link, totals."""
    freq = system.frequency_hz
    used = set(plan.get("clusters_used", []))
    segments_on: dict[int, int] = {}
    for segment in plan["segments"]:
        segments_on[segment["cluster"]] = segments_on.get(segment["cluster"], 0) + 1
    ops_on: dict[int, int] = {}
    for task in plan["tasks"]:
        ops_on[task["cluster"]] = ops_on.get(task["cluster"], 0) + 1
    host = execution.cluster_seconds if execution is not None else {}
    energy = getattr(sim, "energy", None)
    clusters = []
    for cluster in system.clusters:
        cid = cluster.id
        if cid not in used:
            continue
        clusters.append({
            "cluster": cid,
            "name": cluster.name,
            "chiplet": cluster.chiplet,
            "segments": segments_on.get(cid, 0),
            "ops": ops_on.get(cid, 0),
            "host_ms": 1e3 * host[cid] if cid in host else None,
            "busy_cycles": float(sim.cluster_busy_cycles[cid]),
            "wait_cycles": float(sim.cluster_wait_cycles[cid]),
            "idle_cycles": float(sim.cluster_idle_cycles[cid]),
            "utilisation": float(sim.cluster_utilisation[cid]),
            "energy_pj": float(energy.cluster_pj[cid]) if energy else None,
        })
    links = [
        {
            "link": link.id, "src": link.src, "dst": link.dst, "kind": link.kind,
            "bytes": float(sim.link_bytes[link.id]),
            "busy_cycles": float(sim.link_busy_cycles[link.id]),
            "utilisation": float(sim.link_utilisation[link.id]),
            "energy_pj": float(energy.link_pj[link.id]) if energy else None,
        }
        for link in system.links
        if sim.link_bytes[link.id] > 0
    ]
    drams = [
        {
            "dram": dram.id, "node": dram.node, "bytes": float(sim.dram_bytes[dram.id]),
            "busy_cycles": float(sim.dram_busy_cycles[dram.id]),
            "utilisation": float(sim.dram_utilisation[dram.id]),
        }
        for dram in system.drams
    ] if isinstance(sim, DeviceSimResult) else []
    total = float(sim.total_cycles)
    report = {
        "system": system.name,
        "strategy": plan.get("strategy"),
        "batches": int(sim.batches),
        "inputs": sim.inputs if isinstance(sim, DeviceSimResult) else int(sim.batches),
        "copies": sim.copies if isinstance(sim, DeviceSimResult) else 1,
        "microbatch": sim.microbatch if isinstance(sim, DeviceSimResult) else 1,
        "network": sim.network,
        "device_dtype": plan.get("device_dtype", system.device_dtype),
        "host_dtypes": plan.get("host_dtypes", []),
        "energy": energy.to_dict() if energy else None,
        "clusters": clusters,
        "links": links,
        "drams": drams,
        "sram_loans": [{"borrower": b, "lender": k, "bytes": n}
                       for b, k, n in plan.get("sram_loans", [])],
        "totals": {
            "cycles": total,
            "latency_s": total / freq,
            "latency_per_batch_cycles": [float(x) for x in np.atleast_1d(sim.latency_per_batch)],
            "throughput_per_s": sim.per_second(freq),
            "avg_utilisation": float(np.mean([c["utilisation"] for c in clusters]))
            if clusters else 0.0,
            "bytes_moved": float(sum(t["bytes"] for t in plan.get("transfers", []))),
        },
    }
    if execution is not None:
        report["host"] = {
            "wall_s": execution.wall_seconds,
            "segments": [s.__dict__ for s in execution.segments],
        }
    return report


def format_table(report: dict) -> str:
    """The per-cluster timing table ``tvmc run --print-time`` prints."""
    head = (
        f"{'cluster':>8} {'name':>14} {'segs':>5} {'ops':>5} {'host ms':>9} "
        f"{'busy cyc':>12} {'wait cyc':>12} {'idle cyc':>12} {'util':>6}"
    )
    lines = [head, "-" * len(head)]
    for c in report["clusters"]:
        host = f"{c['host_ms']:9.2f}" if c["host_ms"] is not None else f"{'-':>9}"
        lines.append(
            f"{c['cluster']:>8} {c['name'][:14]:>14} {c['segments']:>5} {c['ops']:>5} {host} "
            f"{c['busy_cycles']:12.0f} {c['wait_cycles']:12.0f} {c['idle_cycles']:12.0f} "
            f"{100 * c['utilisation']:5.1f}%"
        )
    totals = report["totals"]
    lines.append("-" * len(head))
    copies, microbatch = report.get("copies", 1), report.get("microbatch", 1)
    inputs = f"{run_label(report['batches'], copies, microbatch)} in " \
        if copies > 1 or microbatch > 1 else ""
    lines.append(
        f"device: {inputs}{totals['cycles']:.0f} cycles = {1e3 * totals['latency_s']:.3f} ms, "
        f"throughput {rate_label(totals['throughput_per_s'])}, "
        f"avg utilisation {100 * totals['avg_utilisation']:.1f}%, "
        f"{len(report['links'])} busy links"
    )
    lines.append(f"device model: {report['device_dtype']}; host numerics: "
                 f"{', '.join(report['host_dtypes']) or 'as compiled'}")
    energy = report.get("energy")
    if energy and energy["modelled"]:
        lines.append(f"energy per inference: {energy_label(energy['total_pj'])} "
                     f"({energy_parts(energy['per_inference_pj'])})")
    streamed = [d for d in report.get("drams", []) if d["bytes"] > 0]
    if streamed:
        lines.append("dram: " + ", ".join(
            f"controller {d['dram']} {d['bytes'] / 1e6:.1f} MB ({100 * d['utilisation']:.1f}% busy)"
            for d in streamed
        ))
    loans = report.get("sram_loans", [])
    if loans:
        lenders = sorted({loan["lender"] for loan in loans})
        borrowers = sorted({loan["borrower"] for loan in loans})
        lines.append(
            f"sram loans: {bytes_label(sum(loan['bytes'] for loan in loans))} of streamed "
            f"weights per input held by clusters {', '.join(map(str, lenders))} for clusters "
            f"{', '.join(map(str, borrowers))}"
        )
    if "host" in report:
        lines.append(f"host: wall {1e3 * report['host']['wall_s']:.2f} ms")
    return "\n".join(lines)


def chrome_trace(plan: dict, system: ChipletSystem, sim: SimResult) -> dict:
    """A Chrome / Perfetto trace of the simulated run: a track per cluster, a track per busy link.

    Times are microseconds at the system clock. Each task of each round is a complete event on its
    cluster's track (``input``: the first input it serves,
    ``(round * copies + copy) * microbatch``, and ``microbatch`` inputs from there); each message
    is an event on every link of its route, from the moment its producer finished to its
    arrival. For a system with energy coefficients, a counter track per
    cluster shows its dynamic power (MAC + SRAM energy of the running task over its duration).
    """
    to_us = 1e6 / system.frequency_hz
    copies, microbatch = plan.get("copies", 1), plan.get("microbatch", 1)
    events: list[dict] = []
    cluster_pid, link_pid = 1, 2
    events.append({"ph": "M", "name": "process_name", "pid": cluster_pid,
                   "args": {"name": f"{system.name} clusters"}})
    events.append({"ph": "M", "name": "process_name", "pid": link_pid,
                   "args": {"name": f"{system.name} links"}})
    for cid in sorted({t["cluster"] for t in plan["tasks"]}):
        events.append({"ph": "M", "name": "thread_name", "pid": cluster_pid, "tid": cid,
                       "args": {"name": system.clusters[cid].name}})
    links = {link.id: link for link in system.links}
    busy_links = sorted({lid for m in plan["messages"] for lid in m["route"]})
    for lid in busy_links:
        link = links[lid]
        events.append({"ph": "M", "name": "thread_name", "pid": link_pid, "tid": lid,
                       "args": {"name": f"{link.kind} {link.src}->{link.dst}"}})
    for batch in range(sim.batches):
        for index, task in enumerate(plan["tasks"]):
            start, end = sim.task_start[batch, index], sim.task_end[batch, index]
            events.append({
                "ph": "X", "name": task["name"], "cat": "compute", "pid": cluster_pid,
                "tid": task["cluster"], "ts": start * to_us, "dur": (end - start) * to_us,
                "args": {"input": (batch * copies + task.get("copy", 0)) * microbatch,
                         "microbatch": microbatch, "round": batch,
                         "op_id": task["op_id"], "cycles": task["cycles"]},
            })
            if system.has_energy and end > start:
                joules = 1e-12 * (task.get("mac_pj", 0.0) + task.get("sram_pj", 0.0))
                watts = joules / ((end - start) / system.frequency_hz)
                track = f"power {system.clusters[task['cluster']].name} (W)"
                events.append({"ph": "C", "name": track, "pid": cluster_pid,
                               "ts": start * to_us, "args": {"W": watts}})
                events.append({"ph": "C", "name": track, "pid": cluster_pid,
                               "ts": end * to_us, "args": {"W": 0.0}})
        for index, message in enumerate(plan["messages"]):
            if not message["route"]:
                continue
            sent = sim.task_end[batch, message["src"]]
            arrived = sim.message_arrival[batch, index]
            for lid in message["route"]:
                events.append({
                    "ph": "X", "name": f"{message['bytes']} B", "cat": "transfer",
                    "pid": link_pid, "tid": lid, "ts": sent * to_us,
                    "dur": max(arrived - sent, 0.0) * to_us,
                    "args": {"batch": batch, "src_task": message["src"],
                             "dst_task": message["dst"]},
                })
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def rate_label(per_second: float | None) -> str:
    """``"1234.5 inf/s"``, or ``"no device time"`` for a plan without device tasks."""
    return "no device time" if per_second is None else f"{per_second:.1f} inf/s"


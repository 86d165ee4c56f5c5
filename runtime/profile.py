"""Per-cluster report: modeled device time from the C++ simulator plus measured host time."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tvm_chiplet.runtime.simulator import SimMessage, SimResult, SimTask, simulate
from tvm_chiplet.targets.system import ChipletSystem


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceSimResult(SimResult):
    """A :class:`SimResult` for a chiplet system, plus its DRAM controllers' load.

    ``dram_bytes``, ``dram_busy_cycles`` and ``dram_utilisation`` are indexed by controller id.
    ``copies``: how many copies of one input's work the task graph holds (input-level data
    parallelism); then each of the ``batches`` rounds runs ``copies`` inputs, ``inputs`` is
    ``batches * copies`` and ``throughput_per_cycle`` counts inputs, not rounds.
    """

    dram_bytes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    dram_busy_cycles: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    dram_utilisation: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    copies: int = 1

    @property
    def inputs(self) -> int:
        """Inputs the simulation ran: ``batches`` rounds of ``copies`` inputs."""
        return int(self.batches) * self.copies


def simulate_workload(
    tasks: list[dict], messages: list[dict], system: ChipletSystem, batches: int = 1,
    network: str = "flow", progress=None, fetches: list[dict] = (), copies: int = 1,
) -> DeviceSimResult:
    """Simulate tasks (``name``, ``cluster``, ``cycles``), routed messages and DRAM fetches.

    With ``copies > 1`` the tasks are that many independent copies of one input's work (see
    :func:`~tvm_chiplet.targets.workload.replicate_items`): ``batches`` inputs run as
    ``ceil(batches / copies)`` rounds of every copy, so when ``copies`` does not divide
    ``batches`` the last round runs a few inputs more than asked for.

    Each DRAM controller becomes a link of its bandwidth in front of the fetch's route (a part
    lent from another cluster's SRAM, ``dram`` None, takes its route alone), and
    each streaming cluster gets a DMA engine (a zero-cycle task stream of its own) that runs
    its fetches one after another (a fetch's parts from several controllers in parallel), so
    fetches contend for controllers and links like messages do. The
    result covers the system's clusters, links, tasks and messages only (fetch tasks, engines
    and controller links are simulated but left out). ``progress(fraction)`` is called as the
    simulation advances; Ctrl-C stops it cleanly.
    """
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    links = sorted(system.links, key=lambda link: link.id)
    bandwidth = [link.bandwidth for link in links] + [d.bandwidth for d in system.drams]
    latency = [link.latency for link in links] + [0.0] * len(system.drams)
    sim_tasks = [SimTask(t["name"], t["cluster"], float(t["cycles"])) for t in tasks]
    sim_messages = [
        SimMessage(m["src"], m["dst"], int(m["bytes"]), list(m["route"])) for m in messages
    ]
    engines: dict[int, int] = {}
    landing: dict[int, int] = {}  # task index -> its landing task
    for fetch in fetches:
        engine = engines.setdefault(fetch["cluster"], system.num_clusters + len(engines))
        task = fetch["task"]
        if task not in landing:
            # One DMA transfer at a time per cluster: the engine issues a fetch, then waits
            # for all its parts to land before it issues the next one.
            issue = len(sim_tasks)
            sim_tasks.append(SimTask(f"dram:{tasks[task]['name']}", engine, 0.0))
            sim_tasks.append(SimTask(f"landed:{tasks[task]['name']}", engine, 0.0))
            landing[task] = issue + 1
            sim_messages.append(SimMessage(issue + 1, task, 0, []))
            if fetch["after"] is not None:
                sim_messages.append(SimMessage(fetch["after"], issue, 0, []))
        issue = landing[task] - 1
        # A part from DRAM first crosses its controller; a part lent by another cluster's SRAM
        # only crosses the network.
        source = [] if fetch.get("dram") is None else [len(links) + fetch["dram"]]
        sim_messages.append(
            SimMessage(issue, landing[task], fetch["bytes"], [*source, *fetch["route"]])
        )
    sim = simulate(
        sim_tasks,
        sim_messages,
        link_bandwidth=np.array(bandwidth, dtype=np.float64),
        link_latency=np.array(latency, dtype=np.float64),
        num_clusters=system.num_clusters + len(engines),
        batches=math.ceil(batches / copies),
        network=network,
        progress=progress,
    )
    n, t, m, k = system.num_clusters, len(tasks), len(messages), len(links)
    fields = {f.name: getattr(sim, f.name) for f in dataclasses.fields(SimResult)}
    fields.update(
        task_names=sim.task_names[:t],
        task_start=sim.task_start[:, :t],
        task_end=sim.task_end[:, :t],
        message_arrival=sim.message_arrival[:, :m],
        cluster_busy_cycles=sim.cluster_busy_cycles[:n],
        cluster_wait_cycles=sim.cluster_wait_cycles[:n],
        cluster_idle_cycles=sim.cluster_idle_cycles[:n],
        cluster_utilisation=sim.cluster_utilisation[:n],
        link_bytes=sim.link_bytes[:k],
        link_busy_cycles=sim.link_busy_cycles[:k],
        link_utilisation=sim.link_utilisation[:k],
        throughput_per_cycle=sim.throughput_per_cycle * copies,
    )
    return DeviceSimResult(
        **fields,
        dram_bytes=sim.link_bytes[k:],
        dram_busy_cycles=sim.link_busy_cycles[k:],
        dram_utilisation=sim.link_utilisation[k:],
        copies=copies,
    )


def bytes_label(value: float) -> str:
    """``"3.5 MB"``, ``"12 kB"``, ``"80 B"``: three significant digits in the largest unit."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def run_label(batches: int, copies: int = 1) -> str:
    """``"2 batches"``, or for copies of a placement ``"8 inputs (2 rounds of 4 copies)"``."""
    if copies > 1:
        rounds = f"{batches} round{'s' if batches != 1 else ''}"
        return f"{batches * copies} inputs ({rounds} of {copies} copies)"
    return f"{batches} batch{'es' if batches != 1 else ''}"


def simulate_plan(
    plan: dict, system: ChipletSystem, batches: int = 1, network: str = "flow", progress=None
) -> DeviceSimResult:
    """Simulate a compiled plan on its system: tasks with cost-model cycles, routed messages."""
    return simulate_workload(plan["tasks"], plan["messages"], system, batches, network, progress,
                             plan.get("dram_fetches", []), copies=plan.get("copies", 1))


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
        })
    links = [
        {
            "link": link.id, "src": link.src, "dst": link.dst, "kind": link.kind,
            "bytes": float(sim.link_bytes[link.id]),
            "busy_cycles": float(sim.link_busy_cycles[link.id]),
            "utilisation": float(sim.link_utilisation[link.id]),
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
        "network": sim.network,
        "clusters": clusters,
        "links": links,
        "drams": drams,
        "sram_loans": [{"borrower": b, "lender": k, "bytes": n}
                       for b, k, n in plan.get("sram_loans", [])],
        "totals": {
            "cycles": total,
            "latency_s": total / freq,
            "latency_per_batch_cycles": [float(x) for x in np.atleast_1d(sim.latency_per_batch)],
            "throughput_per_s": float(sim.throughput_per_cycle) * freq,
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
    copies = report.get("copies", 1)
    inputs = f"{run_label(report['batches'], copies)} in " if copies > 1 else ""
    lines.append(
        f"device: {inputs}{totals['cycles']:.0f} cycles = {1e3 * totals['latency_s']:.3f} ms, "
        f"throughput {totals['throughput_per_s']:.1f} inf/s, "
        f"avg utilisation {100 * totals['avg_utilisation']:.1f}%, "
        f"{len(report['links'])} busy links"
    )
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

    Times are microseconds at the system clock. Each task of each batch is a complete event on its
    cluster's track; each message is an event on every link of its route, from the moment its
    producer finished to its arrival.
    """
    to_us = 1e6 / system.frequency_hz
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
                "args": {"batch": batch, "op_id": task["op_id"], "cycles": task["cycles"]},
            })
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

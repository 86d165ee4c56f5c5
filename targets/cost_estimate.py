"""A placement's cost in parts, estimated from the routing tables (no simulation).

For a workload (tasks on clusters, messages between them, weight fetches; the format of
:func:`~tvm_chiplet.targets.workload.build_workload` and of ``plan.json``), every message and
fetch is routed by walking the system's :class:`~tvm_chiplet.targets.routing.RoutingTables`
(on a faulty system: the up*/down* detours), and its bytes load every link on the way. The
parts, each in cycles per inference (the busiest resource of its kind):

``compute``
    the busiest cluster's task cycles;
``intra_op``
    the busiest link's load from messages inside a pipeline stage (between the parts of split
    operators: their collectives; every message, for strategies without stages);
``inter_op``
    the busiest link's load from messages between stages;
``contention``
    what sharing adds on the busiest link: its load from every message and fetch, less the
    larger of the two above;
``dram``
    the busiest DRAM controller's bytes over its bandwidth.

``per_inference = max(compute, max(intra_op, inter_op) + contention, dram)`` is the
steady-state interval between inputs; ``latency`` the critical path of one input (task cycles,
plus each message's route latency and bytes over its narrowest link); :meth:`CostEstimate.cycles`
puts them together for ``inputs`` pipelined inputs. A shared transfer (``multicast``) loads each
link of the union of its routes once (a ring relay is counted as direct routes: an
approximation). Bandwidths are those the ``flow`` model uses: scaled by the system's
calibration when it has one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from tvm_chiplet.targets.routing import RoutingTables
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.workload import dram_reads, fetch_source

PARTS = ("compute", "intra_op", "inter_op", "contention", "dram")


@dataclass(frozen=True)
class CostEstimate:
    """A placement's estimated cost (cycles per inference unless said otherwise)."""

    compute: float
    intra_op: float
    inter_op: float
    contention: float
    dram: float
    per_inference: float
    latency: float
    busiest_link: int | None

    def cycles(self, inputs: int = 1) -> float:
        """Estimated cycles to run ``inputs`` pipelined inputs: one latency, then one interval
        per further input."""
        return self.latency + max(0, inputs - 1) * self.per_inference

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """``"compute 1200, intra-op 0, inter-op 300, contention 40, DRAM 0 cycles/inference"``."""
        parts = ", ".join(f"{name.replace('_', '-')} {getattr(self, name):.0f}"
                          for name in PARTS)
        return parts.replace("dram", "DRAM") + " cycles/inference"


def estimate_cost(tasks: list[dict], messages: list[dict], fetches: list[dict],
                  system: ChipletSystem, routing: RoutingTables, copies: int = 1
                  ) -> CostEstimate:
    """The cost of a placed workload in parts (see the module docstring).

    ``tasks`` need ``cluster`` and ``cycles`` (``stage`` optional), ``messages`` ``src``,
    ``dst`` (task indices), ``bytes`` and ``multicast``, ``fetches`` ``cluster``, ``dram``,
    ``lender`` and ``bytes``; ``copies``: the inputs the tasks serve (copies of one input's
    work, each a microbatch of inputs or one).
    """
    busy: dict[int, float] = defaultdict(float)
    for task in tasks:
        busy[task["cluster"]] += float(task["cycles"])
    load = {"intra": defaultdict(float), "inter": defaultdict(float), "all": defaultdict(float)}
    calibration = system.calibration
    bandwidth = [link.bandwidth * (calibration.factor(link.kind) if calibration else 1.0)
                 for link in system.links]
    dram_rate = [d.bandwidth * (calibration.factor("dram") if calibration else 1.0)
                 for d in system.drams]
    shared: dict[int, set[int]] = defaultdict(set)
    arrival = [0.0] * len(tasks)
    finish = [0.0] * len(tasks)
    incoming: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for message in messages:
        src, dst = tasks[message["src"]], tasks[message["dst"]]
        route = routing.route(src["cluster"], dst["cluster"])
        nbytes = float(message["bytes"])
        delay = sum(system.links[i].latency for i in route) + (
            nbytes / min(bandwidth[i] for i in route) if route else 0.0)
        incoming[message["dst"]].append((message["src"], delay))
        group = message.get("multicast")
        kind = "intra" if src.get("stage", 0) == dst.get("stage", 0) else "inter"
        for link in route:
            if group is not None:
                if link in shared[group]:
                    continue
                shared[group].add(link)
            load[kind][link] += nbytes / bandwidth[link]
            load["all"][link] += nbytes / bandwidth[link]
    dram: dict[int, float] = defaultdict(float)
    for fetch in fetches:
        source = fetch_source(fetch, system)
        for link in routing.route(source, fetch["cluster"]):
            load["all"][link] += fetch["bytes"] / bandwidth[link]
    for fetch in dram_reads(fetches):
        dram[fetch["dram"]] += fetch["bytes"] / dram_rate[fetch["dram"]]
    for index in range(len(tasks)):  # tasks are in execution order: producers come first
        arrival[index] = max((finish[src] + delay for src, delay in incoming[index]
                              if src < index), default=0.0)
        finish[index] = arrival[index] + float(tasks[index]["cycles"])

    def busiest(values: dict[int, float]) -> float:
        return max(values.values(), default=0.0) / copies

    link_total = busiest(load["all"])
    intra, inter = busiest(load["intra"]), busiest(load["inter"])
    compute, dram_part = busiest(busy), busiest(dram)
    return CostEstimate(
        compute=compute,
        intra_op=intra,
        inter_op=inter,
        contention=max(0.0, link_total - max(intra, inter)),
        dram=dram_part,
        per_inference=max(compute, link_total, dram_part),
        latency=max(finish, default=0.0),
        busiest_link=max(load["all"], key=load["all"].get) if load["all"] else None,
    )


def rank_correlation(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (ties share their mean rank):
    how alike an estimate and the simulator rank the same candidates."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"expected two sequences of one length >= 2, got {len(a)} and {len(b)}")

    def ranks(values: list[float]) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        order = np.argsort(values, kind="stable")
        result = np.empty(len(values))
        result[order] = np.arange(len(values), dtype=np.float64)
        for value in np.unique(values):
            tied = values == value
            result[tied] = result[tied].mean()
        return result

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def plan_cost(plan: dict, system: ChipletSystem, routing: RoutingTables) -> CostEstimate:
    """:func:`estimate_cost` of a compiled plan (``plan.json``)."""
    return estimate_cost(plan["tasks"], plan["messages"], plan.get("dram_fetches", []), system,
                         routing, copies=plan.get("copies", 1) * plan.get("microbatch", 1))


__all__ = ["PARTS", "CostEstimate", "estimate_cost", "plan_cost", "rank_correlation"]

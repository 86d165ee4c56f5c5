"""The planner interface: op graph + costs + system in, a :class:`Placement` out (no TVM here)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tvm_chiplet.passes.analysis.op_graph import OpGraph
from tvm_chiplet.passes.planners.placement import Placement, PlanningError
from tvm_chiplet.targets import cost_model
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology

WorkloadSimulator = Callable[..., Any]
"""The device simulator planners are judged by, handed in by the driver.

Called as ``simulator(tasks, messages, system, batches, network, fetches=..., copies=...)`` with
a workload of :func:`~tvm_chiplet.targets.workload.build_workload`; returns a result with
``total_cycles``, ``throughput_per_cycle``, ``latency_per_batch``, ``inputs`` and the per-cluster,
per-link and per-controller loads (:func:`tvm_chiplet.runtime.device.simulate_workload`).
"""

SplitRealise = Callable[[Placement], tuple[OpGraph, Placement]]
"""Realises a placement's splits, handed in by the driver with the module: returns the op graph
of the realised module and the placement of its ops
(:class:`tvm_chiplet.passes.plan_split_placement.SplitRealiser`)."""


_progress: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "planning_progress", default=None)


@contextlib.contextmanager
def planning_progress(progress: Callable[[str], None] | None) -> Iterator[None]:
    """Within it, planners report the steps of a long plan (:func:`report`) to ``progress``,
    one line each: the driver's way to show what a plan of minutes is doing (``tvmc compile``
    prints them). ``None`` reports nothing."""
    token = _progress.set(progress)
    try:
        yield
    finally:
        _progress.reset(token)


def report(line: str) -> None:
    """Report one step of planning to the callback of the enclosing :func:`planning_progress`
    (nothing outside one)."""
    progress = _progress.get()
    if progress is not None:
        progress(line)


def check_memory(graph: OpGraph, system: ChipletSystem) -> None:
    """Raise :class:`PlanningError` when the SRAM of ``system``'s clusters plus the memory behind
    its DRAM controllers cannot hold the model: its weights and the largest op's inputs and
    output. Unbounded (no check) when some controller declares no ``capacity_bytes``, as the
    presets do not; on a system with dead parts only what survives counts."""
    capacities = [dram.capacity_bytes for dram in system.drams]
    if any(capacity is None for capacity in capacities):
        return
    weights = sum(op.weight_bytes for op in graph.ops)
    working = max((op.input_bytes + op.output_bytes for op in graph.ops), default=0)
    sram = sum(cluster.sram_bytes for cluster in system.clusters)
    dram = sum(capacities)
    short = weights + working - sram - dram
    if short > 0:
        raise PlanningError(
            f"the model does not fit {system.name}: it needs {_mb(weights + working)} "
            f"({_mb(weights)} of {system.device_dtype} weights + {_mb(working)} for the largest "
            f"op's inputs and output), the {system.num_clusters} cluster(s) and {len(capacities)} "
            f"DRAM controller(s) alive hold {_mb(sram + dram)} ({_mb(sram)} SRAM + {_mb(dram)} "
            f"DRAM): short by {_mb(short)} ({short:,} bytes); compile with fewer faults, for a "
            f"system with more SRAM or DRAM capacity_bytes, or at a narrower --device-dtype")


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.1f} kB"


@dataclass
class PlanningProblem:
    """Everything a planner may look at: the graph, the system, the shared cost model, a judge.

    ``split_dims[op_id]`` maps each dimension an op can be split along (see
    :data:`~tvm_chiplet.passes.planners.placement.SPLIT_DIMS`) to its size; ops missing from it
    cannot be split (:func:`~tvm_chiplet.passes.split_operators.find_anchors` provides it).
    ``follow_ops`` maps each split op with no constant operand (a matmul of two activations,
    such as attention's) to the number of independent products it holds (the product of its
    output's leading axes: attention's heads); such an op may instead follow a sharded
    operand's layout part by part, as other ops do. ``halos[op_id]``: a conv2d's (input rows
    a row band reads beyond its share, input rows), for the halo of a 2-D split.
    ``data_bytes[op_id]``: the bytes of the value a split op's conv2d / matmul reads as its
    data (its first operand), which tells that input from others of a fused op (a residual
    added in the conv's epilogue, read part by part as the output is split).
    ``simulator`` is the device simulator that judges candidates (see :data:`WorkloadSimulator`;
    planners reach it only through
    :func:`~tvm_chiplet.passes.planners.evaluate.simulate_placement`); strategies that compare
    candidates need it. ``realise`` turns a placement that splits ops into the op graph of the
    module it realises and the placement of that graph's ops (see :data:`SplitRealise`), so that
    such a placement is judged as it will run; without it, split ops are judged from
    :func:`~tvm_chiplet.passes.planners.placement.part_bytes` (parts combined on one cluster).

    ``memo`` holds results planners reuse within this problem (simulated placements, the
    pipeline planner's DP runs), keyed by everything they depend on besides the problem; a
    shallow copy with another cluster order (:meth:`Topology.with_cluster_order`: the same
    routes) shares it, so a planner that calls another over several orders pays once per
    distinct run.
    """

    graph: OpGraph
    system: ChipletSystem
    topology: Topology
    split_dims: dict[int, dict[str, int]] = field(default_factory=dict)
    simulator: WorkloadSimulator | None = None
    realise: SplitRealise | None = None
    follow_ops: dict[int, int] = field(default_factory=dict)
    halos: dict[int, tuple[int, int]] = field(default_factory=dict)
    data_bytes: dict[int, int] = field(default_factory=dict)
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_memory(self.graph, self.system)
        self.op_cycles = self._cycles(weights_resident=True)
        self.op_cycles_streamed = self._cycles(weights_resident=False)

    def _cycles(self, weights_resident: bool) -> np.ndarray:
        """``[op, cluster]`` cycles from the shared cost model (plumbing ops cost nothing)."""
        clusters = self.system.clusters
        return np.array(
            [
                [
                    cost_model.op_cycles(
                        op.flops, op.bytes_moved, op.weight_bytes, c, self.system,
                        weights_resident=weights_resident,
                    )
                    if op.is_compute
                    else 0.0
                    for c in clusters
                ]
                for op in self.graph.ops
            ],
            dtype=np.float64,
        ).reshape(len(self.graph.ops), len(clusters))

    def transfer_cycles(self, nbytes: int, src: int, dst: int) -> float:
        if src == dst or nbytes == 0:
            return 0.0
        return cost_model.transfer_cycles(nbytes, self.topology.route(src, dst), self.system)

    def receive_cycles(self, order: Sequence[int], cut: Sequence[float]) -> np.ndarray:
        """``table[k, i]``: :meth:`transfer_cycles` of ``cut[i]`` bytes from ``order[k - 1]``
        to ``order[k]`` (row 0: zeros), what a stage on ``order[k]`` starting at op ``i`` pays
        to receive the values crossing its input cut (:meth:`OpGraph.cut_bytes`)."""
        cut = np.asarray(cut, dtype=np.float64)
        if (cut < 0).any():
            raise ValueError(f"cut bytes must be >= 0, found {cut.min()!r}")
        table = np.zeros((len(order), len(cut)))
        for k in range(1, len(order)):
            route = () if order[k - 1] == order[k] else self.topology.route(order[k - 1], order[k])
            if route:
                latency, bandwidth = cost_model.route_rate(route, self.system)
                table[k] = np.where(cut == 0, 0.0, latency + cut / bandwidth)
        return table


class Planner(Protocol):
    """A placement strategy. ``plan`` must be deterministic and must not touch IR."""

    name: str

    def plan(self, problem: PlanningProblem) -> Placement: ...

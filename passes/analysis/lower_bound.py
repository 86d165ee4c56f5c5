"""The physical lower bound of running a model on a chiplet system (no TVM; planners use it).

Every term is a time, in cycles of ``system.frequency_hz``, that *no* placement of the op graph
can beat when ``batches`` inferences are run; :attr:`LowerBound.bound_cycles` is their maximum.
Notation: ``F`` total FLOPs of one inference, ``P = 2 * sum(macs_per_cycle)`` the peak FLOPs per
cycle of all clusters, ``L = sum(local_bandwidth)``, ``D = sum(dram bandwidth)``, ``b`` batches.

``compute``
    ``b * F / P``: every FLOP runs on some MAC unit.
``critical_path``
    Per op, the fastest it can possibly run is on *all* clusters at once (a tensor-parallel
    split may spread one op over every cluster), so an op takes at least
    ``a_i = max(flops_i / P, bytes_moved_i / L)`` (roofline, weights resident, no transfer
    cost). :attr:`LowerBound.critical_path_cycles` is the longest path of ``a_i`` through the op
    DAG (one inference). With ``b`` batches the term is the pipelined formula
    ``max(CP, min(CP, S) + (b - 1) * S)`` where ``S`` is the per-batch steady bound (below).
    Why it holds: every batch needs ``CP`` after the start, so ``T >= CP``; and each part of
    ``S`` is a per-batch amount of a resource that ``b`` batches use ``b`` times, so
    ``T >= b * S >= min(CP, S) + (b - 1) * S``. On homogeneous systems ``CP <= S`` (``CP`` is a
    sum of ``a_i`` over a path, ``S`` at least their sum over all ops) and the formula is the
    familiar ``CP + (b - 1) * S``; on heterogeneous ones ``CP > S`` can happen, and then a
    compute-rich and a bandwidth-rich cluster may overlap different batches, so only
    ``CP + (b - 1) * S`` with the ``min`` is sound.
``dram``
    Bytes that must cross the DRAM controllers / ``D``: every weight once, plus every batch's
    model inputs and outputs. Weights that exceed the total SRAM need not come back for every
    batch: a schedule may run several batches through an op while that op's weights are on chip
    (batching, the way accelerators reuse weights; our planners' ``Placement.microbatch``) and
    keep those batches' activations in SRAM meanwhile, so one load of each weight is all that
    every placement must pay. With ``weights_preloaded=True`` the weights that fit are already
    in SRAM when the clock starts (the convention of the cost model and the simulator, which
    charge resident weights nothing), so only the overflow ``weights - total SRAM`` is counted,
    once. With ``io_in_dram=False`` the model inputs and outputs are left out (the simulator's
    convention: inputs appear in and outputs leave from the clusters' SRAM, host I/O is not
    modelled).
``bisection``
    Bytes that every placement must move across the narrowest balanced cut, over its bandwidth.
    This bound is **zero**: in this model no positive amount of data is forced across the cut.
    A placement may keep all work on one half (each half has SRAM and may stream weights from
    its own DRAM, or the weights fit), or split ops so finely (tensor-parallel, with
    recomputation) that only an arbitrarily small slice crosses. A bound that assumes half the
    weights cross when they exceed half the SRAM is *not* sound for that reason, so it is not
    used; the term is kept so that the report names all four physical limits.

Energy (not a time, not in :attr:`LowerBound.bound_cycles`): ``energy_pj`` is what ``batches``
inferences must spend at least: every MAC at the cheapest MAC energy of any cluster at the device
dtype (``F / 2 * min_c e_mac``), plus the DRAM bytes of the ``dram`` term at the cheapest
controller's pJ/bit. SRAM accesses, links and static power can in principle be made arbitrarily
small per inference, so they are left out. Zero for a system without energy coefficients.

The per-batch steady bound is ``S = max(F / P, W / kappa, dram_steady)`` where
``W = sum_i max(flops_i / P, (act_i + weight_i / b) / L)`` (every op occupies its cluster for at
least its roofline time; ``act_i`` the bytes of its inputs and outputs, which every batch moves,
while its weights may be read once for all ``b`` batches, as a weight-stationary array does for
a microbatch) and
``kappa = sum_c max(2 * macs_c / P, local_bandwidth_c / L)`` (``1`` on homogeneous systems)
corrects ``W`` for clusters whose compute and bandwidth shares differ: a cluster ``c`` busy for
``t`` cycles does at most ``kappa_c * t`` of the area ``W``. ``dram_steady`` is the ``dram``
term's share of one batch (``dram / b``: its inputs and outputs, ``1 / b`` of the weight load).

Example
-------
>>> bound = lower_bound(graph, system, batches=8)       # doctest: +SKIP
>>> bound.binding, bound.ratio(simulated_cycles)        # doctest: +SKIP
('compute', 1.7)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import networkx as nx

from tvm_chiplet.passes.analysis.op_graph import OpGraph
from tvm_chiplet.targets.system import ChipletSystem

TERMS = ("compute", "critical_path", "dram", "bisection")
"""Names of the terms of :attr:`LowerBound.bound_cycles`, in tie-breaking order."""


@dataclass(frozen=True)
class LowerBound:
    """Physical lower bound of ``batches`` inferences of a model on a system; cycles.

    Attributes
    ----------
    batches : int
        Inferences the bound is for.
    frequency_hz : float
        The system clock all cycle figures refer to.
    compute_cycles : float
        ``batches * F / P`` (see the module docstring).
    critical_path_cycles : float
        Longest path of per-op minimum times, one inference.
    steady_cycles : float
        Per-batch steady-state bound ``S``.
    pipeline_cycles : float
        ``max(CP, min(CP, S) + (batches - 1) * S)``: the ``critical_path`` term.
    dram_cycles : float
        DRAM bytes of all batches over the total DRAM bandwidth.
    bisection_cycles : float
        Bytes forced across the bisection over its bandwidth (zero, see the module docstring).
    bound_cycles : float
        The largest of the ``compute``, ``critical_path`` (pipeline), ``dram`` and ``bisection``
        terms.
    binding : str
        Name of the term equal to ``bound_cycles`` (the first in :data:`TERMS` on ties).
    dram_bytes : int
        Bytes counted by the DRAM term.
    weights_preloaded : bool
        Whether the first load of SRAM-resident weights was left out of the DRAM term.
    energy_pj : float
        Energy the ``batches`` inferences must spend at least, in pJ (module docstring).
    """

    batches: int
    frequency_hz: float
    compute_cycles: float
    critical_path_cycles: float
    steady_cycles: float
    pipeline_cycles: float
    dram_cycles: float
    bisection_cycles: float
    bound_cycles: float
    binding: str
    dram_bytes: int
    weights_preloaded: bool
    energy_pj: float = 0.0

    @property
    def energy_per_inference_pj(self) -> float:
        """The energy bound of one inference, in pJ."""
        return self.energy_pj / self.batches

    @property
    def latency_bound_s(self) -> float:
        """Seconds one inference takes at least: the critical path."""
        return self.critical_path_cycles / self.frequency_hz

    @property
    def throughput_bound_per_s(self) -> float:
        """Inferences per second that ``batches`` inferences cannot exceed on average."""
        if self.bound_cycles == 0:
            return math.inf
        return self.batches * self.frequency_hz / self.bound_cycles

    def ratio(self, simulated_cycles: float) -> float:
        """``simulated_cycles / bound_cycles``: how far a run is from the bound (>= 1 if sound).

        Raises
        ------
        ValueError
            If ``simulated_cycles`` is negative or not finite.
        """
        if not (math.isfinite(simulated_cycles) and simulated_cycles >= 0):
            raise ValueError(
                f"simulated_cycles must be a finite number >= 0, found {simulated_cycles!r}; "
                f"pass SimResult.total_cycles of a run of {self.batches} batch(es)"
            )
        if self.bound_cycles == 0:
            return math.inf if simulated_cycles > 0 else 1.0
        return simulated_cycles / self.bound_cycles

    def to_dict(self) -> dict[str, float | int | str]:
        """JSON-serialisable fields plus the two derived bounds in seconds."""
        return {
            **asdict(self),
            "latency_bound_s": self.latency_bound_s,
            "throughput_bound_per_s": self.throughput_bound_per_s,
            "energy_per_inference_pj": self.energy_per_inference_pj,
        }


def lower_bound(
    graph: OpGraph, system: ChipletSystem, batches: int = 1, weights_preloaded: bool = False,
    io_in_dram: bool = True,
) -> LowerBound:
    """Physical lower bound of running ``batches`` inferences of ``graph`` on ``system``.

    Parameters
    ----------
    graph : OpGraph
        The op graph of the reduced model (:func:`extract_op_graph`).
    system : ChipletSystem
        The hardware.
    batches : int, default 1
        Inferences streamed through the system (>= 1).
    weights_preloaded : bool, default False
        Count no DRAM time for the first load of the weights that fit in SRAM (they are loaded
        before timing starts, as the simulator assumes); ``False`` is the physical cold start.
    io_in_dram : bool, default True
        Count the model inputs and outputs as DRAM traffic; ``False`` matches the simulator,
        which does not model host I/O.

    Returns
    -------
    LowerBound
        Every term and the binding one, in cycles at ``system.frequency_hz`` (see the module
        docstring for the formulas and why each is a true lower bound).

    Raises
    ------
    ValueError
        If ``batches`` is not an integer >= 1, or the op graph has a cycle.
    """
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise ValueError(f"batches must be an integer >= 1, found {batches!r}")
    if not nx.is_directed_acyclic_graph(graph.graph):
        raise ValueError(
            f"the op graph has a cycle ({nx.find_cycle(graph.graph)}); expected the DAG that "
            f"extract_op_graph builds from a dataflow block"
        )
    peak = 2.0 * system.peak_macs_per_cycle
    bandwidth = sum(c.local_bandwidth for c in system.clusters)
    op_time = [
        max(op.flops / peak, op.bytes_moved / bandwidth) if op.is_compute else 0.0
        for op in graph.ops
    ]
    per_batch_compute = graph.total_flops / peak

    finish: dict[int, float] = {}
    for node in nx.lexicographical_topological_sort(graph.graph):
        start = max((finish[u] for u in graph.graph.predecessors(node)), default=0.0)
        finish[node] = start + op_time[node]
    critical_path = max(finish.values(), default=0.0)

    weights = graph.total_weight_bytes
    overflow = max(0, weights - system.total_sram_bytes)
    io_bytes = model_input_bytes(graph) + model_output_bytes(graph) if io_in_dram else 0
    dram_bandwidth = sum(d.bandwidth for d in system.drams)
    first_load = overflow if weights_preloaded else weights
    dram_bytes = first_load + batches * io_bytes
    dram_steady = dram_bytes / batches / dram_bandwidth

    kappa = sum(
        max(2.0 * c.macs_per_cycle / peak, c.local_bandwidth / bandwidth) for c in system.clusters
    )
    area = sum(
        max(op.flops / peak, (op.input_bytes + op.output_bytes + op.weight_bytes / batches)
            / bandwidth) if op.is_compute else 0.0
        for op in graph.ops
    )
    steady = max(per_batch_compute, area / kappa, dram_steady)
    pipeline = max(critical_path, min(critical_path, steady) + (batches - 1) * steady)

    terms = {
        "compute": batches * per_batch_compute,
        "critical_path": pipeline,
        "dram": dram_bytes / dram_bandwidth,
        "bisection": 0.0,
    }
    binding = max(TERMS, key=lambda name: (terms[name], -TERMS.index(name)))
    energy = 0.0
    if system.has_energy:
        mac_pj = min(c.mac_energy(system.device_dtype) for c in system.clusters)
        bit_pj = min((d.energy_pj_per_bit for d in system.drams), default=0.0)
        energy = batches * graph.total_flops / 2.0 * mac_pj + 8.0 * dram_bytes * bit_pj
    return LowerBound(
        batches=batches,
        frequency_hz=system.frequency_hz,
        compute_cycles=terms["compute"],
        critical_path_cycles=critical_path,
        steady_cycles=steady,
        pipeline_cycles=pipeline,
        dram_cycles=terms["dram"],
        bisection_cycles=terms["bisection"],
        bound_cycles=terms[binding],
        binding=binding,
        dram_bytes=dram_bytes,
        weights_preloaded=weights_preloaded,
        energy_pj=energy,
    )


def model_output_bytes(graph: OpGraph) -> int:
    """Bytes of the values ``main`` returns, each distinct op counted once."""
    return sum(graph.ops[op_id].output_bytes for op_id in sorted(set(graph.output_ops)))


def model_input_bytes(graph: OpGraph) -> int:
    """A lower bound on the bytes of the model inputs that the ops read.

    An op's ``input_bytes`` minus the bytes on its incoming edges is what it reads from model
    inputs. An op that reads one model input only gives that input's size; the sum of those is
    compared with the largest single op's share, and the larger is returned.
    """
    readers: dict[int, list[int]] = {}
    for index, uses in enumerate(graph.input_uses):
        for op_id in sorted(set(uses)):
            readers.setdefault(op_id, []).append(index)
    from_inputs = {
        op_id: graph.ops[op_id].input_bytes
        - sum(nbytes for _, _, nbytes in graph.graph.in_edges(op_id, data="nbytes"))
        for op_id in readers
    }
    size: dict[int, int] = {}
    for op_id, inputs in readers.items():
        if len(inputs) == 1:
            size[inputs[0]] = max(size.get(inputs[0], 0), from_inputs[op_id])
    return max(sum(size.values()), max(from_inputs.values(), default=0), 0)


__all__ = ["TERMS", "LowerBound", "lower_bound", "model_input_bytes", "model_output_bytes"]

"""Plain data for the op graph that analyses produce and planners consume (no TVM here)."""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx


@dataclass(frozen=True)
class OpNode:
    """One binding of the reduced ``main`` function.

    Attributes
    ----------
    op_id : int
        Position of the binding in ``main``'s dataflow block; stable across passes that keep
        the bindings (the ``chiplet.op_id`` call attribute carries it).
    name : str
        Callee name for ``call_tir`` (the fused PrimFunc), else the kind of binding.
    kind : str
        ``"call_tir"`` for compute, ``"tuple"`` / ``"get_item"`` / ``"other"`` for plumbing.
    flops : float
        Floating-point operations from TVM's TIR FLOP estimator, or from shapes where it
        fails (see :func:`~tvm_chiplet.passes.analysis.extract_op_graph.call_flops`); 0 for
        plumbing.
    input_bytes, output_bytes : int
        Bytes read from tensor arguments that are not constants, and bytes written.
    weight_bytes : int
        Bytes of constant arguments (weights), which live on the cluster running the op.
    weight_key : str
        A digest of the constant arguments' values (:func:`~tvm_chiplet.passes.analysis.
        extract_op_graph.call_tir_weight_key`): ops with equal keys hold the same weights, as
        the parts of a row split do; "" for none.
    """

    op_id: int
    name: str
    kind: str
    flops: float
    input_bytes: int
    output_bytes: int
    weight_bytes: int
    weight_key: str = ""

    @property
    def is_compute(self) -> bool:
        return self.kind == "call_tir"

    @property
    def bytes_moved(self) -> int:
        return self.input_bytes + self.output_bytes + self.weight_bytes


@dataclass
class OpGraph:
    """Data-dependency graph of the ops of a reduced module.

    ``graph`` has one node per ``op_id`` and an edge ``u -> v`` with attribute ``nbytes`` when op
    ``v`` reads the value that op ``u`` defines. ``input_uses[i]`` lists the ops reading model
    input ``i``; ``output_ops`` lists the ops whose values ``main`` returns, in order.
    """

    ops: list[OpNode]
    graph: nx.DiGraph
    input_names: list[str] = field(default_factory=list)
    input_uses: list[list[int]] = field(default_factory=list)
    output_ops: list[int] = field(default_factory=list)

    @classmethod
    def from_tasks(cls, tasks: list[dict]) -> OpGraph:
        """The compute-op graph of a compiled plan's ``tasks`` (as in ``plan.json``)."""
        graph = nx.DiGraph()
        ops = []
        for index, task in enumerate(tasks):
            moved, weights = int(task["bytes_moved"]), int(task["weight_bytes"])
            ops.append(OpNode(index, task["name"], "call_tir", float(task["flops"]),
                              moved - weights, 0, weights, task.get("weight_key", "")))
            graph.add_node(index)
            for producer, nbytes in task["deps"]:
                graph.add_edge(producer, index, nbytes=int(nbytes))
        return cls(ops=ops, graph=graph)

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def total_flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def total_weight_bytes(self) -> int:
        return sum(op.weight_bytes for op in self.ops)

    def edges(self) -> list[tuple[int, int, int]]:
        """All ``(producer, consumer, nbytes)`` edges in a deterministic order."""
        return sorted((u, v, d["nbytes"]) for u, v, d in self.graph.edges(data=True))

    def cut_bytes(self) -> list[int]:
        """``cut[i]``: bytes produced by ops ``< i`` and read by ops ``>= i`` (each value once)."""
        n = len(self.ops)
        delta = [0] * (n + 1)
        last_use: dict[int, int] = {}
        for u, v, _ in self.edges():
            last_use[u] = max(last_use.get(u, u), v)
        for u, last in last_use.items():
            nbytes = self.ops[u].output_bytes
            delta[u + 1] += nbytes
            delta[last + 1] -= nbytes
        cut, running = [], 0
        for i in range(n + 1):
            running += delta[i]
            cut.append(running)
        return cut

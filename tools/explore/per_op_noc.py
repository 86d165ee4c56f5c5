"""The per-op NoC study: each op's traffic (the messages it receives and its weight fetches, on
their routes) simulated alone at flit level, as independent Ray tasks, next to the whole
model's simulation (``tvmc run --per-op-noc``).

An op's workload holds its producers and itself as zero-cycle tasks, so the simulated time is
the routing time of its inputs and weights on an otherwise idle network: what the op's traffic
costs when nothing contends with it. A shared transfer (multicast tree or ring relay) is sent
on the system's own route, as the flit routers neither replicate nor relay.
"""

from __future__ import annotations

from tvm_chiplet.runtime.device import simulate_plan, simulate_workload
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology


def op_workload(plan: dict, index: int, topology: Topology) -> tuple[list, list, list]:
    """(tasks, messages, fetches) of op ``index``'s traffic alone (see the module docstring)."""
    tasks = plan["tasks"]
    incoming = [m for m in plan["messages"] if m["dst"] == index and m["bytes"] > 0]
    sub_tasks = [{"name": tasks[m["src"]]["name"], "cluster": tasks[m["src"]]["cluster"],
                  "cycles": 0.0} for m in incoming]
    op = len(sub_tasks)
    sub_tasks.append({"name": tasks[index]["name"], "cluster": tasks[index]["cluster"],
                      "cycles": 0.0})
    messages = []
    for k, message in enumerate(incoming):
        route = message["route"] if message.get("multicast") is None else topology.route(
            tasks[message["src"]]["cluster"], tasks[index]["cluster"])
        messages.append({"src": k, "dst": op, "bytes": message["bytes"], "route": list(route),
                         "multicast": None})
    fetches = [{**f, "task": op, "after": None}
               for f in plan.get("dram_fetches", []) if f["task"] == index]
    return sub_tasks, messages, fetches


def op_routing_cycles(plan: dict, system: ChipletSystem, index: int,
                      network: str = "flit") -> float:
    """Cycles op ``index``'s traffic takes alone on the ``network`` model (0 without traffic)."""
    tasks, messages, fetches = op_workload(plan, index, Topology(system))
    if not messages and not fetches:
        return 0.0
    return float(simulate_workload(tasks, messages, system, 1, network,
                                   fetches=fetches).total_cycles)


def _routing_chunk(plan: dict, system: ChipletSystem, indices: list[int]) -> list[float]:
    return [op_routing_cycles(plan, system, i) for i in indices]


def per_op_noc(plan: dict, system: ChipletSystem, network: str = "flow",
               address: str | None = None, chunks: int = 8) -> list[dict]:
    """One row per op of one input (copy 0): its traffic, its routing cycles alone at flit
    level (simulated as ``chunks`` Ray tasks), its compute cycles, and its start and end in
    the whole model's simulation on ``network``."""
    import ray

    from tvm_chiplet.tools.explore.engine import connect

    per_copy = len(plan["tasks"]) // plan.get("copies", 1)
    indices = list(range(per_copy))
    started = connect(address)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_routing_chunk)
        plan_ref, system_ref = ray.put(plan), ray.put(system)
        size = max(1, -(-len(indices) // chunks))
        refs = [remote.remote(plan_ref, system_ref, indices[i:i + size])
                for i in range(0, len(indices), size)]
        routing = [cycles for part in ray.get(refs) for cycles in part]
    finally:
        if started:
            ray.shutdown()
    whole = simulate_plan(plan, system, 1, network)
    rows = []
    for index in indices:
        task = plan["tasks"][index]
        incoming = [m for m in plan["messages"] if m["dst"] == index]
        rows.append({
            "op": task["name"], "cluster": task["cluster"],
            "messages": len(incoming), "message_bytes": sum(m["bytes"] for m in incoming),
            "fetch_bytes": sum(f["bytes"] for f in plan.get("dram_fetches", [])
                               if f["task"] == index),
            "routing_cycles_flit": routing[index], "compute_cycles": float(task["cycles"]),
            "model_start": float(whole.task_start[0, index]),
            "model_end": float(whole.task_end[0, index]),
        })
    return rows


def format_per_op_noc(rows: list[dict]) -> str:
    """The per-op table as text, with the whole model's time for one input."""
    lines = [f"{'op':<32} {'cluster':>7} {'msgs':>5} {'msg bytes':>10} {'fetch bytes':>11} "
             f"{'route (flit)':>12} {'compute':>10} {'start':>10} {'end':>10}"]
    for row in rows:
        lines.append(f"{row['op'][:32]:<32} {row['cluster']:>7} {row['messages']:>5} "
                     f"{row['message_bytes']:>10} {row['fetch_bytes']:>11} "
                     f"{row['routing_cycles_flit']:>12.0f} {row['compute_cycles']:>10.0f} "
                     f"{row['model_start']:>10.0f} {row['model_end']:>10.0f}")
    routed = sum(row["routing_cycles_flit"] for row in rows)
    whole = max((row["model_end"] for row in rows), default=0.0)
    lines.append(f"sum of the ops' routing cycles alone (flit): {routed:.0f}; whole model, "
                 f"one input: {whole:.0f} cycles")
    return "\n".join(lines)

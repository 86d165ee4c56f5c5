"""The simulated device: the workload of a plan on the C++ simulator, with DMA engines and DRAM.

A workload is tasks on clusters (cycles from the shared cost model), messages on the system's
routes, and weight fetches from DRAM controllers or lending clusters' SRAM
(:mod:`tvm_chiplet.targets.workload` builds it). :func:`simulate_workload` turns each DRAM
controller into a link in front of its fetches' routes and gives each streaming cluster a DMA
engine, runs :func:`~tvm_chiplet.runtime.simulator.simulate`, and returns a
:class:`DeviceSimResult`. Planners receive :func:`simulate_workload` from the driver as their
judge; :func:`simulate_plan` simulates a compiled artifact's ``plan.json``.
"""

from __future__ import annotations

import dataclasses
import math

import networkx as nx
import numpy as np

from tvm_chiplet.runtime.simulator import (
    MessageColumns,
    SimResult,
    SimTask,
    acyclic,
    simulate,
)
from tvm_chiplet.targets.collector import collection_paused
from tvm_chiplet.targets.cost_model import static_energy_pj
from tvm_chiplet.targets.routing import RoutingTables
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import STREAM_BUFFER_FRACTION, fetch_source

STREAM_CHUNKS = 8
"""Most chunks a task with streamed weights runs as (:func:`simulate_workload`): its weights
arrive in that many pieces through the double buffer, and it computes on each piece as the next
one lands."""

STREAM_PIECE_BYTES = 4096
"""Smallest piece streamed weights are cut into: below it a piece's route latency, paid once
per piece by the one-transfer-at-a-time DMA engine, outweighs the overlap."""

ENERGY_TERMS = ("compute", "sram", "noc", "nop", "dram", "static")
"""The parts of :attr:`Energy.per_inference_pj`: MACs, SRAM accesses, on-chip and die-to-die
links, DRAM controllers, and the chiplets' static power over the run."""


@dataclasses.dataclass(frozen=True, eq=False)
class Energy:
    """Energy per inference of a simulated run, in picojoules, at the device dtype.

    ``per_inference_pj[term]`` for each of :data:`ENERGY_TERMS`; ``cluster_pj`` (compute +
    SRAM), ``link_pj`` and ``dram_pj`` are indexed by cluster, link and controller id.
    ``modelled`` is False for a system without energy coefficients (everything is then 0).
    A lent share of a fetch is charged on the links it crosses, not on the lender's SRAM.
    """

    per_inference_pj: dict[str, float]
    cluster_pj: np.ndarray
    link_pj: np.ndarray
    dram_pj: np.ndarray
    modelled: bool

    @property
    def total_pj(self) -> float:
        """Energy of one inference, every term included."""
        return float(sum(self.per_inference_pj.values()))

    def to_dict(self) -> dict:
        return {
            "modelled": self.modelled,
            "per_inference_pj": {k: float(v) for k, v in self.per_inference_pj.items()},
            "total_pj": self.total_pj,
            "cluster_pj": [float(x) for x in self.cluster_pj],
            "link_pj": [float(x) for x in self.link_pj],
            "dram_pj": [float(x) for x in self.dram_pj],
        }


def run_energy(tasks: list[dict], system: ChipletSystem, sim: SimResult, rounds: int,
               inputs: int, dram_bytes: np.ndarray) -> Energy:
    """The :class:`Energy` of ``rounds`` runs of ``tasks`` (``mac_pj`` / ``sram_pj`` each, as
    :func:`~tvm_chiplet.targets.workload.build_workload` gives them) that served ``inputs``
    inputs, with the links' and controllers' bytes of ``sim``."""
    cluster_pj = np.zeros(system.num_clusters)
    mac_pj = sram_pj = 0.0
    for task in tasks:
        mac, sram = task.get("mac_pj", 0.0), task.get("sram_pj", 0.0)
        cluster_pj[task["cluster"]] += mac + sram
        mac_pj, sram_pj = mac_pj + mac, sram_pj + sram
    scale = rounds / inputs
    links = sorted(system.links, key=lambda link: link.id)
    link_pj = np.array([8.0 * float(sim.link_bytes[link.id]) * link.energy_pj_per_bit
                        for link in links]) / inputs
    dram_pj = np.array([8.0 * float(nbytes) * dram.energy_pj_per_bit
                        for nbytes, dram in zip(dram_bytes, system.drams, strict=True)]) / inputs
    per_inference = {
        "compute": mac_pj * scale,
        "sram": sram_pj * scale,
        "noc": float(sum(link_pj[link.id] for link in links if link.kind == "noc")),
        "nop": float(sum(link_pj[link.id] for link in links if link.kind == "nop")),
        "dram": float(dram_pj.sum()),
        "static": static_energy_pj(float(sim.total_cycles), system) / inputs,
    }
    return Energy(per_inference, cluster_pj * scale, link_pj, dram_pj, system.has_energy)


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceSimResult(SimResult):
    """A :class:`SimResult` for a chiplet system, plus its DRAM controllers' load.

    ``dram_bytes``, ``dram_busy_cycles`` and ``dram_utilisation`` are indexed by controller id.
    ``copies``: how many copies of one input's work the task graph holds (input-level data
    parallelism) and ``microbatch`` how many inputs each task runs back to back; then each of
    the ``batches`` rounds runs ``copies * microbatch`` inputs, ``inputs`` is
    ``batches * copies * microbatch`` and ``throughput_per_cycle`` counts inputs, not rounds.
    ``energy``: the run's energy per inference (:class:`Energy`). ``calibrated``: the ``flow``
    network ran with the system's :class:`~tvm_chiplet.targets.system.FlowCalibration`.
    """

    dram_bytes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    dram_busy_cycles: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    dram_utilisation: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    copies: int = 1
    microbatch: int = 1
    energy: Energy | None = None
    calibrated: bool = False

    @property
    def inputs(self) -> int:
        """Inputs the simulation ran: ``batches`` rounds of ``copies * microbatch`` inputs."""
        return int(self.batches) * self.copies * self.microbatch


@collection_paused()
def simulate_workload(
    tasks: list[dict], messages: list[dict], system: ChipletSystem, batches: int = 1,
    network: str = "flow", progress=None, fetches: list[dict] = (), copies: int = 1,
    routing: RoutingTables | None = None, microbatch: int = 1,
) -> DeviceSimResult:
    """Simulate tasks (``name``, ``cluster``, ``cycles``), routed messages and DRAM fetches.

    With ``copies > 1`` the tasks are that many independent copies of one input's work (see
    :func:`~tvm_chiplet.targets.workload.replicate_items`): ``batches`` inputs run as
    ``ceil(batches / copies)`` rounds of every copy, so when ``copies`` does not divide
    ``batches`` the last round runs a few inputs more than asked for. With ``microbatch > 1``
    every task runs that many inputs back to back (the workload of
    :func:`~tvm_chiplet.targets.workload.build_workload` with that ``microbatch``): a round
    then runs ``copies * microbatch`` inputs.

    A shared transfer (``"multicast"``: a multicast tree or a ring relay, see
    :mod:`~tvm_chiplet.targets.workload`) is one transfer over its routes, except with the
    ``flit`` network, whose routers neither replicate nor relay: there each copy goes alone on
    the system's own route.

    With the ``flow`` network, a system's :attr:`~ChipletSystem.calibration` scales each link's
    and controller's bandwidth by its kind's efficiency (fitted against the ``flit`` model).
    Each DRAM controller becomes a link of its bandwidth in front of the fetch's route (a part
    lent from another cluster's SRAM, ``dram`` None, takes its route alone), and
    each streaming cluster gets a DMA engine (a zero-cycle task stream of its own) that runs
    its fetches one after another (a fetch's parts from several controllers in parallel), so
    fetches contend for controllers and links like messages do. A task whose streamed weights
    fill more than half its cluster's stream buffer runs as chunks (:func:`_stream_chunks`),
    as weight tiles stream through an accelerator's double buffer: its weights arrive in as
    many pieces, each fetched into the half of the buffer that the chunk two before it on the
    cluster has freed, and each chunk computes its share of the task once its piece has
    landed, so the task computes while the rest of its weights arrive. The result reports a
    task from its first chunk's start to its last chunk's end. A fetch ``"shared"`` by a weight
    pool's members (the index of its first reader's) is issued once, by that reader's engine
    when every reader's buffer is free, and sent as one transfer over its readers' routes (a
    ring or a tree). A reader that frees its buffer only after running items whose own fetches
    wait for this one (replicas of two ops that clusters run in different orders) would close
    a cycle of waits: it fetches its copy alone instead, on its own route, when its own buffer
    is free. The result covers the system's clusters, links, tasks and messages only
    (fetch tasks, engines and controller links are simulated but left out).
    ``progress(fraction)`` is called as the simulation advances; Ctrl-C stops it cleanly.

    With ``routing`` (the artifact's :class:`~tvm_chiplet.targets.routing.RoutingTables`),
    every message between two clusters and every fetch is routed by walking the tables, as the
    routers would, and not by the routes written in ``messages`` / ``fetches``; a shared
    transfer keeps its tree or ring (each ring hop is a table route) under ``flow``.
    """
    if copies < 1 or microbatch < 1:
        raise ValueError(f"copies and microbatch must be >= 1, got {copies} and {microbatch}")
    per_round = copies * microbatch
    links = sorted(system.links, key=lambda link: link.id)
    bandwidth = [link.bandwidth for link in links] + [d.bandwidth for d in system.drams]
    calibration = system.calibration if network == "flow" else None
    if calibration is not None:
        kinds = [link.kind for link in links] + ["dram"] * len(system.drams)
        bandwidth = [b * calibration.factor(kind) for b, kind in zip(bandwidth, kinds,
                                                                      strict=True)]
    latency = [link.latency for link in links] + [0.0] * len(system.drams)
    if routing is not None:
        messages, fetches = _routed(tasks, messages, fetches, system, routing, network)
    elif network == "flit":
        messages = _unshared(tasks, messages, system)
    # A shared fetch waits for every reader's buffer; a reader whose buffer frees only after
    # the fetch it shares has gone out (it runs its items in another order than the first
    # reader) fetches its copy alone instead, until no such wait closes a cycle.
    while True:
        sim_tasks, sim_messages, first, last, engines, gates = _task_graph(
            tasks, messages, fetches, system, len(links))
        readers = _waiting_readers(sim_tasks, sim_messages, gates)
        if not readers:
            break
        router = routing or Topology(system)
        fetches = [{**fetch, "shared": None,
                    "route": router.route(fetch_source(fetch, system), fetch["cluster"])}
                   if (fetch["task"], fetch.get("shared")) in readers else fetch
                   for fetch in fetches]
    sim = simulate(
        sim_tasks,
        sim_messages,
        link_bandwidth=np.array(bandwidth, dtype=np.float64),
        link_latency=np.array(latency, dtype=np.float64),
        num_clusters=system.num_clusters + len(engines),
        batches=math.ceil(batches / per_round),
        network=network,
        progress=progress,
    )
    n, m, k = system.num_clusters, len(messages), len(links)
    fields = {f.name: getattr(sim, f.name) for f in dataclasses.fields(SimResult)}
    fields.update(
        task_names=tuple(sim.task_names[i] for i in first),
        task_start=sim.task_start[:, first],
        task_end=sim.task_end[:, last],
        message_arrival=sim.message_arrival[:, :m],
        cluster_busy_cycles=sim.cluster_busy_cycles[:n],
        cluster_wait_cycles=sim.cluster_wait_cycles[:n],
        cluster_idle_cycles=sim.cluster_idle_cycles[:n],
        cluster_utilisation=sim.cluster_utilisation[:n],
        link_bytes=sim.link_bytes[:k],
        link_busy_cycles=sim.link_busy_cycles[:k],
        link_utilisation=sim.link_utilisation[:k],
        throughput_per_cycle=sim.throughput_per_cycle * per_round,
    )
    rounds = math.ceil(batches / per_round)
    return DeviceSimResult(
        **fields,
        dram_bytes=sim.link_bytes[k:],
        dram_busy_cycles=sim.link_busy_cycles[k:],
        dram_utilisation=sim.link_utilisation[k:],
        copies=copies,
        microbatch=microbatch,
        energy=run_energy(tasks, system, sim, rounds, rounds * per_round, sim.link_bytes[k:]),
        calibrated=calibration is not None,
    )


def _task_graph(tasks: list[dict], messages: list[dict], fetches: list[dict],
                system: ChipletSystem, num_links: int):
    """The simulator's tasks and messages of a workload (:func:`simulate_workload`): each
    task as its chunks, and each streaming cluster's DMA engine with its fetches. Also returns
    the first and last chunk of each task, the engines by cluster, and the messages by which a
    reader's buffer gates a shared fetch, ``{(freeing task, issuing task): (reader task,
    shared fetch)}``."""
    # Each task runs as its chunks, one after another, each on its piece of the streamed
    # weights; messages leave its last chunk and enter its first.
    chunks = _stream_chunks(tasks, fetches, system)
    sim_tasks, first, last = [], [], []
    for task, pieces in zip(tasks, chunks, strict=True):
        first.append(len(sim_tasks))
        sim_tasks += [SimTask(task["name"], task["cluster"], float(task["cycles"]) / pieces)
                      for _ in range(pieces)]
        last.append(len(sim_tasks) - 1)
    sim_messages = MessageColumns()
    for m in messages:
        sim_messages.append(_at(last, m["src"]), _at(first, m["dst"]), int(m["bytes"]),
                            m["route"], m.get("multicast"))
    engines: dict[int, int] = {}
    landing: dict[tuple[int, int], int] = {}  # (task index, chunk) -> its landing task
    freed: dict[tuple[int, int], int | None] = {}  # (task, chunk) -> the task freeing its half
    gated: set[tuple[int, int, int]] = set()  # (task, chunk, issue) whose buffer gates an issue
    gates: dict[tuple[int, int], tuple[int, int]] = {}
    streamed: dict[int, list[int]] = {}  # cluster -> its streamed chunks, in order
    for number, fetch in enumerate(fetches):
        engine = engines.setdefault(fetch["cluster"], system.num_clusters + len(engines))
        task = fetch["task"]
        if (task, 0) not in landing:
            order = streamed.setdefault(fetch["cluster"], [])
            for chunk in range(chunks[task]):
                # One DMA transfer at a time per cluster: the engine issues a piece, then
                # waits for all its parts to land before it issues the next one, into the
                # half of the double buffer that the chunk two before it has freed.
                issue = len(sim_tasks)
                sim_tasks.append(SimTask(f"dram:{tasks[task]['name']}", engine, 0.0))
                sim_tasks.append(SimTask(f"landed:{tasks[task]['name']}", engine, 0.0))
                landing[task, chunk] = issue + 1
                sim_messages.append(issue + 1, first[task] + chunk, 0)
                # (A first piece whose fetch has no "after" has its buffer free.)
                free = order[-2] if len(order) >= 2 and (
                    chunk or fetch["after"] is not None) else None
                freed[task, chunk] = free
                if free is not None:
                    sim_messages.append(free, issue, 0)
                order.append(first[task] + chunk)
        # A part from DRAM first crosses its controller; a part lent by another cluster's SRAM
        # only crosses the network.
        source = [] if fetch.get("dram") is None else [num_links + fetch["dram"]]
        shared = fetch.get("shared")
        route = [*source, *fetch["route"]]
        for chunk, nbytes in enumerate(_pieces(int(fetch["bytes"]), chunks[task])):
            issue = landing[task, chunk] - 1
            if shared is not None and shared != number:
                # One fetch for the whole pool: issued by its first reader once every reader's
                # buffer is free, sent once to all of them.
                issue = landing[fetches[shared]["task"], chunk] - 1
                if freed[task, chunk] is not None and (task, chunk, issue) not in gated:
                    gated.add((task, chunk, issue))  # once for all the parts it reads
                    sim_messages.append(freed[task, chunk], issue, 0)
                    gates[freed[task, chunk], issue] = (task, shared)
            sim_messages.append(
                issue, landing[task, chunk], nbytes, route,
                None if shared is None else -1 - (shared * STREAM_CHUNKS + chunk))
    return sim_tasks, sim_messages, first, last, engines, gates


def _waiting_readers(sim_tasks: list[SimTask], sim_messages: MessageColumns,
                     gates: dict[tuple[int, int], tuple[int, int]]) -> set[tuple[int, int]]:
    """``(reader task, shared fetch)`` of every reader whose buffer gates a shared fetch on a
    cycle of waits (messages, and each task's wait for the one before it on its cluster); none
    when no such gate closes a cycle (a cycle of the workload's own messages or order is left
    for the simulator to name)."""
    if not gates:
        return set()
    src, dst = np.asarray(sim_messages.src_task), np.asarray(sim_messages.dst_task)
    if src.dtype.kind != "i" or dst.dtype.kind != "i" or min(src.min(), dst.min()) < 0 or (
            max(src.max(), dst.max()) >= len(sim_tasks)):
        return set()  # an invalid task index: the simulator names it
    # Each cluster (and DMA engine) runs its tasks in list order: a wait on the one before.
    cluster = np.array([task.cluster for task in sim_tasks])
    order = np.argsort(cluster, kind="stable")
    follows = cluster[order[1:]] == cluster[order[:-1]]
    src = np.concatenate([src, order[:-1][follows]])
    dst = np.concatenate([dst, order[1:][follows]])
    if acyclic(len(sim_tasks), src, dst):
        return set()
    # Every edge inside a strongly connected component lies on a cycle.
    graph = nx.DiGraph()
    graph.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    component = {task: number
                 for number, tasks in enumerate(nx.strongly_connected_components(graph))
                 for task in tasks if len(tasks) > 1}
    return {reader for (freeing, issuing), reader in gates.items()
            if component.get(freeing, -1) == component.get(issuing, -2)}


def _stream_chunks(tasks: list[dict], fetches: list[dict], system: ChipletSystem) -> list[int]:
    """Per task, the chunks it runs as: as many as halves of its cluster's stream buffer its
    streamed weights fill, at most :data:`STREAM_CHUNKS` and with pieces of at least
    :data:`STREAM_PIECE_BYTES`; every reader of a shared fetch as few as the fewest of them."""
    streamed = [0.0] * len(tasks)
    for fetch in fetches:
        streamed[fetch["task"]] += fetch["bytes"]
    chunks = []
    for task, nbytes in zip(tasks, streamed, strict=True):
        half = 0.5 * STREAM_BUFFER_FRACTION * system.clusters[task["cluster"]].sram_bytes
        pieces = min(math.ceil(nbytes / half) if half > 0 else 1, nbytes // STREAM_PIECE_BYTES)
        chunks.append(int(min(STREAM_CHUNKS, max(1, pieces))))
    readers = {}  # task -> the first task of the readers sharing its fetches
    for fetch in fetches:
        if fetch.get("shared") is not None:
            lead = fetches[fetch["shared"]]["task"]
            readers[fetch["task"]] = readers.get(lead, lead)
    for task, lead in readers.items():
        chunks[lead] = min(chunks[lead], chunks[task])
    for task, lead in readers.items():
        chunks[task] = chunks[lead]
    return chunks


def _pieces(nbytes: int, count: int) -> list[int]:
    """``nbytes`` cut into ``count`` pieces, the remainder in the last."""
    return [nbytes // count] * (count - 1) + [nbytes - (count - 1) * (nbytes // count)]


def _at(index: list[int], task):
    """``index[task]``; a task that is not a valid index as is, for the simulator to name."""
    try:
        return index[task] if task >= 0 else task
    except (IndexError, TypeError):
        return task


def _routed(tasks: list[dict], messages: list[dict], fetches: list[dict],
            system: ChipletSystem, routing: RoutingTables, network: str
            ) -> tuple[list[dict], list[dict]]:
    """``messages`` and ``fetches`` with their routes walked on ``routing``; shared transfers
    (a multicast message, a weight pool's fetch sent once to all its readers) keep theirs, a
    tree or a ring of table routes, except under ``flit``, which sends each copy alone."""
    routed = []
    for message in messages:
        if message.get("multicast") is None or network == "flit":
            route = routing.route(tasks[message["src"]]["cluster"],
                                  tasks[message["dst"]]["cluster"])
            message = {**message, "route": route, "multicast": None}
        routed.append(message)
    walked = []
    for fetch in fetches:
        if fetch.get("shared") is None or network == "flit":
            fetch = {**fetch, "route": routing.route(fetch_source(fetch, system),
                                                     fetch["cluster"])}
        walked.append(fetch)
    return routed, walked


def _unshared(tasks: list[dict], messages: list[dict], system: ChipletSystem) -> list[dict]:
    """``messages`` with every copy of a shared transfer sent alone on the system's own route:
    the ``flit`` routers neither replicate packets nor relay around a ring."""
    topology = None
    unshared = []
    for message in messages:
        if message.get("multicast") is not None:
            topology = topology or Topology(system)
            route = topology.route(tasks[message["src"]]["cluster"],
                                   tasks[message["dst"]]["cluster"])
            message = {**message, "route": route, "multicast": None}
        unshared.append(message)
    return unshared


def simulate_plan(
    plan: dict, system: ChipletSystem, batches: int = 1, network: str = "flow", progress=None,
    routing: RoutingTables | None = None,
) -> DeviceSimResult:
    """Simulate a compiled plan on its system: tasks with cost-model cycles, routed messages
    (routed by walking ``routing``, the artifact's tables, when given)."""
    return simulate_workload(plan["tasks"], plan["messages"], system, batches, network, progress,
                             plan.get("dram_fetches", []), copies=plan.get("copies", 1),
                             routing=routing, microbatch=plan.get("microbatch", 1))

"""Discrete-event timing simulation of a placed task graph on a chiplet device.

The timing core is C++ (``runtime/cpp``, built by ``pip install .`` into
``libtvm_chiplet_sim.so`` and called through tvm-ffi); this module validates inputs, converts them
to flat numpy arrays, and turns the raw event times into a :class:`SimResult`.
``tests/runtime/simulator_reference.py`` holds a small pure-Python implementation of the same
model that the tests check the C++ core against.

The model
---------
- Each task runs on one cluster for a fixed number of cycles. A cluster runs its tasks one at a
  time, without preemption, in increasing task index; with ``batches > 1`` the whole task graph is
  streamed that many times and each cluster runs its list for batch 0, then batch 1, ... A task of
  batch ``b + 1`` may run while other clusters still work on batch ``b`` (pipelining).
- A message joins two tasks of the same batch. It is sent when its source task finishes and the
  destination task starts once all its messages have arrived and its cluster is free. An empty
  route costs nothing (the data stays where it is).
- Network models (:data:`NETWORK_MODELS`):

  ``"analytical"``
      sum of the route's link latencies + bytes / slowest bandwidth on the route; no contention.
  ``"flow"``
      messages in flight share every link's bandwidth max-min fairly, recomputed whenever a
      transfer starts or finishes; the route's latency is paid once, after the last byte. A
      message alone on its route takes exactly the analytical time.
  ``"flit"``
      cycle-level wormhole routers with virtual channels and credits
      (:class:`~tvm_chiplet.runtime.noc.FlitParams`, see :mod:`tvm_chiplet.runtime.noc`). A
      message becomes ``ceil(nbytes / flit_bytes)`` flits (at least one; the last carries the
      rest) in packets of ``packet_flits``, ``flit_bytes`` being at least the widest link (by
      default exactly), so every link moves its own bandwidth; the message is queued at its
      source router at ``ceil(send time)``; it arrives the cycle after its last
      flit is ejected. Routers are inferred from the routes (consecutive links of a route meet
      at one router). The Python reference does not implement it.

A link is busy while at least one message is transferring bytes over it (latency excluded).

Multicast: messages that share a :attr:`SimMessage.multicast` id carry the same bytes from the
same task to several tasks, as routers that replicate packets, or clusters relaying a value
around a ring (each route then follows the ring), send them: ``"flow"`` moves them
as one transfer over the union of their routes (each link of that tree carries the bytes once,
at the rate of the tree's most contended link), each arriving its own route's latency after the
last byte; ``"analytical"`` has no contention to share, so it times each alone; link bytes count
each tree link once. ``"flit"`` sends them as separate messages (its routers do not replicate
packets), and counts link bytes that way.

Example
-------
>>> tasks = [SimTask("produce", cluster=0, cycles=100), SimTask("consume", cluster=1, cycles=50)]
>>> messages = [SimMessage(src_task=0, dst_task=1, nbytes=64, route=[0])]
>>> result = simulate(tasks, messages, link_bandwidth=[32.0], link_latency=[5.0], num_clusters=2)
>>> float(result.total_cycles)  # 100 + (5 + 64 / 32) + 50
157.0
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tvm_chiplet.runtime.noc import FlitParams

NETWORK_MODELS: tuple[str, ...] = ("analytical", "flow")
"""Event-level network models, implemented by :func:`simulate` and by the tests' Python
reference."""

SIMULATE_NETWORK_MODELS: tuple[str, ...] = (*NETWORK_MODELS, "flit")
"""Names accepted by the ``network`` argument of :func:`simulate` (adds the cycle-level model)."""

_LIBRARY_NAME = "libtvm_chiplet_sim.so"
_MAX_BLOCKED_LISTED = 8
# Wall time of one slice of the C++ simulation; Python handles Ctrl-C and progress between slices.
_SLICE_SECONDS = 0.2


@dataclass(frozen=True)
class SimTask:
    """A unit of work placed on one cluster.

    Parameters
    ----------
    name : str
        Label used in results and error messages.
    cluster : int
        Index of the cluster that runs the task, in ``0 .. num_clusters - 1``.
    cycles : float
        Execution time in cycles (finite, >= 0).
    """

    name: str
    cluster: int
    cycles: float


@dataclass(frozen=True)
class SimMessage:
    """Data sent from one task to another of the same batch.

    Parameters
    ----------
    src_task, dst_task : int
        Indices into the task list.
    nbytes : int
        Payload size in bytes (>= 0).
    route : Sequence[int]
        Link ids in travel order; empty when both tasks share the data in place.
    multicast : int or None
        Messages with the same id are one multicast (module docstring): they must leave the
        same task with the same bytes.
    """

    src_task: int
    dst_task: int
    nbytes: int
    route: Sequence[int] = ()
    multicast: int | None = None


class MessageColumns:
    """Messages as columns, one list per field of :class:`SimMessage`: what :func:`simulate`
    also takes, without an object per message (a device workload has millions)."""

    def __init__(self) -> None:
        self.src_task: list[int] = []
        self.dst_task: list[int] = []
        self.nbytes: list[int] = []
        self.route: list[Sequence[int]] = []
        self.multicast: list = []

    def append(self, src_task: int, dst_task: int, nbytes: int, route: Sequence[int] = (),
               multicast=None) -> None:
        self.src_task.append(src_task)
        self.dst_task.append(dst_task)
        self.nbytes.append(nbytes)
        self.route.append(route)
        self.multicast.append(multicast)

    @classmethod
    def of(cls, messages: Sequence[SimMessage]) -> MessageColumns:
        """``messages`` as columns."""
        columns = cls()
        for message in messages:
            columns.append(message.src_task, message.dst_task, message.nbytes, message.route,
                           message.multicast)
        return columns

    def __len__(self) -> int:
        return len(self.src_task)

    def __getitem__(self, index: int) -> SimMessage:
        return SimMessage(self.src_task[index], self.dst_task[index], self.nbytes[index],
                          self.route[index], self.multicast[index])


class SimulationStalledError(RuntimeError):
    """Raised when tasks remain that can never start (they wait on each other)."""


@dataclass(frozen=True, eq=False)
class SimResult:
    """Timing of one simulation. Times are in cycles; arrays are float64.

    Attributes
    ----------
    network : str
        Network model used.
    batches : int
        Number of times the task graph was streamed.
    task_names : tuple[str, ...]
        Names of the tasks, indexing the second axis of the task arrays.
    total_cycles : float
        End of the last task.
    task_start, task_end : np.ndarray
        ``[batches, tasks]`` start and end of every task instance.
    message_arrival : np.ndarray
        ``[batches, messages]`` time every message reached its destination.
    cluster_busy_cycles, cluster_wait_cycles, cluster_idle_cycles : np.ndarray
        ``[clusters]``: running a task; having a next task whose inputs had not arrived; the
        rest (``total - busy - wait``, e.g. after the cluster's last task).
    cluster_utilisation : np.ndarray
        ``[clusters]`` busy / total.
    link_bytes : np.ndarray
        ``[links]`` bytes carried over all batches.
    link_busy_cycles : np.ndarray
        ``[links]`` time with at least one message transferring over the link.
    link_utilisation : np.ndarray
        ``[links]`` busy / total.
    latency_per_batch : np.ndarray
        ``[batches]`` end of the batch's last task minus start of its first task.
    throughput_per_cycle : float
        Batches per cycle in steady state: ``(batches - 1) / (end of last batch - end of first
        batch)`` when ``batches > 1``, else ``1 / latency``; ``inf`` when that span is zero.
    """

    network: str
    batches: int
    task_names: tuple[str, ...]
    total_cycles: float
    task_start: np.ndarray
    task_end: np.ndarray
    message_arrival: np.ndarray
    cluster_busy_cycles: np.ndarray
    cluster_wait_cycles: np.ndarray
    cluster_idle_cycles: np.ndarray
    cluster_utilisation: np.ndarray
    link_bytes: np.ndarray
    link_busy_cycles: np.ndarray
    link_utilisation: np.ndarray
    latency_per_batch: np.ndarray
    throughput_per_cycle: float

    def per_second(self, frequency_hz: float) -> float | None:
        """:attr:`throughput_per_cycle` in batches per second; None when the run takes no
        device time (a plan without device tasks), which JSON cannot hold as infinity."""
        rate = float(self.throughput_per_cycle)
        return rate * frequency_hz if math.isfinite(rate) else None

    @staticmethod
    def seconds(cycles: float | np.ndarray, frequency_hz: float) -> float | np.ndarray:
        """Convert cycles to seconds at ``frequency_hz`` (e.g. ``result.seconds(result.total_cycles,
        1e9)``)."""
        if not frequency_hz > 0 or not math.isfinite(frequency_hz):
            raise ValueError(
                f"frequency_hz must be a positive finite number of cycles per second, "
                f"got {frequency_hz!r}"
            )
        return cycles / frequency_hz


def simulate(
    tasks: Sequence[SimTask],
    messages: Sequence[SimMessage] | MessageColumns,
    link_bandwidth: Sequence[float] | np.ndarray,
    link_latency: Sequence[float] | np.ndarray,
    num_clusters: int,
    batches: int = 1,
    network: str = "flow",
    flit_params: FlitParams | None = None,
    progress: Callable[[float], object] | None = None,
    *,
    skip_dead_cycles: bool = True,
) -> SimResult:
    """Simulate ``batches`` streamed runs of a task graph with the C++ timing core.

    The C++ core runs in slices of about 0.2 s of wall time. Between slices Python calls
    ``progress`` and handles signals, so Ctrl-C (``KeyboardInterrupt``) stops a long run cleanly:
    the C++ state is freed and the library stays usable.

    Parameters
    ----------
    tasks : Sequence[SimTask]
        The tasks; each cluster runs its tasks in list order. Without tasks (a model with no
        compute op) nothing runs: zero cycles, zero utilisation, infinite throughput.
    messages : Sequence[SimMessage] or MessageColumns
        Dependencies with their payloads and routes; they must form an acyclic graph.
    link_bandwidth : array-like of float
        Bytes per cycle of every link, indexed by link id (> 0).
    link_latency : array-like of float
        Cycles of every link, indexed by link id (>= 0).
    num_clusters : int
        Number of clusters (>= 1).
    batches : int
        Number of times the task graph is streamed (>= 1).
    network : str
        One of :data:`SIMULATE_NETWORK_MODELS`.
    flit_params : FlitParams, optional
        Router parameters of the ``"flit"`` network (default ``FlitParams()``); only with it.
    progress : callable, optional
        Called after every slice with the fraction of task instances finished so far (a float
        in ``[0, 1]``, never decreasing), and with ``1.0`` at the end of a complete run.
        Whatever it raises (e.g. ``KeyboardInterrupt``) stops the simulation and propagates.
    skip_dead_cycles : bool
        ``"flit"`` only: jump over cycles in which no flit can move (an idle network, flits
        waiting for link latency or credits). Results are bit-identical either way; ``False``
        steps every cycle and exists for checking that.

    Returns
    -------
    SimResult
        Start and end of every task instance, message arrivals, cluster and link statistics.

    Raises
    ------
    ValueError
        For invalid inputs; the message names the offending value.
    RuntimeError
        From the ``"flit"`` network when its routes deadlock (the message names the links).
    SimulationStalledError
        When some tasks can never start, e.g. a task waits for a message from a task that comes
        later on the same cluster.
    RuntimeError
        When the C++ library has not been built.
    """
    if flit_params is not None and network != "flit":
        raise ValueError(
            f"flit_params only applies to network='flit', got network={network!r}; drop "
            f"flit_params or choose the flit network"
        )
    problem = _prepare(
        tasks, messages, link_bandwidth, link_latency, num_clusters, batches, network
    )
    batches_, num_tasks = problem.batches, len(problem.task_names)
    timeline = _Timeline(
        task_start=np.full((batches_, num_tasks), np.nan),
        task_end=np.full((batches_, num_tasks), np.nan),
        message_arrival=np.full((batches_, len(problem.message_src)), np.nan),
        link_busy=np.zeros(len(problem.link_bandwidth)),
    )
    if progress is not None and not callable(progress):
        raise TypeError(
            f"progress must be a callable taking the finished fraction, got {progress!r}"
        )
    params = flit_params or FlitParams()
    stepper = _core()(
        problem.task_cluster,
        problem.task_cycles,
        problem.num_clusters,
        problem.message_src,
        problem.message_dst,
        problem.message_bytes,
        problem.route_offsets,
        problem.route_links,
        problem.message_leader,
        problem.link_bandwidth,
        problem.link_latency,
        problem.batches,
        problem.network,
        params.int_array(),
        params.resolved_flit_bytes(problem.link_bandwidth) if network == "flit" else 1.0,
        bool(skip_dead_cycles),
        timeline.task_start,
        timeline.task_end,
        timeline.message_arrival,
        timeline.link_busy,
    )
    total = batches_ * num_tasks
    try:
        while True:
            done, finished, _ = stepper(_SLICE_SECONDS)
            if progress is not None:
                progress(1.0 if finished >= total else finished / total)
            if done:
                break
    finally:
        # Free the C++ simulation now, not when a traceback that holds this frame goes away.
        del stepper
    return _summarise(problem, timeline)


@functools.lru_cache(maxsize=1)
def _core():
    """Load the C++ library once and return its ``chiplet.sim.start`` function."""
    import tvm_ffi  # loaded before the library, which links against it

    package = importlib.import_module("tvm_chiplet.runtime")
    library = _find_library([Path(folder) for folder in package.__path__])
    ctypes.CDLL(str(library), ctypes.RTLD_GLOBAL)
    return tvm_ffi.get_global_func("chiplet.sim.start")


def _find_library(folders: Sequence[Path]) -> Path:
    """The simulator library in the first folder that has it (editable installs put it in
    site-packages, not in the source tree)."""
    for folder in folders:
        if (folder / _LIBRARY_NAME).is_file():
            return folder / _LIBRARY_NAME
    searched = ", ".join(str(folder) for folder in folders)
    raise RuntimeError(
        f"the simulator library {_LIBRARY_NAME} was not found in {searched}; it is built by pip: "
        f"run `pip install .` (or `pip install -e .`) in the tvm-chiplet repository"
    )


def _native_network_models() -> tuple[str, ...]:
    """Network models the loaded C++ library implements."""
    import tvm_ffi

    _core()
    return tuple(str(name) for name in tvm_ffi.get_global_func("chiplet.sim.network_models")())


@dataclass(frozen=True, eq=False)
class _Problem:
    """Validated inputs as flat arrays (the layout the C++ core reads)."""

    task_names: tuple[str, ...]
    task_cluster: np.ndarray  # int64 [tasks]
    task_cycles: np.ndarray  # float64 [tasks]
    message_src: np.ndarray  # int64 [messages]
    message_dst: np.ndarray  # int64 [messages]
    message_bytes: np.ndarray  # float64 [messages]
    route_offsets: np.ndarray  # int64 [messages + 1]; message m uses route_links[o[m]:o[m+1]]
    route_links: np.ndarray  # int64
    message_leader: np.ndarray  # int64 [messages]: first message of its multicast, or itself
    link_bandwidth: np.ndarray  # float64 [links]
    link_latency: np.ndarray  # float64 [links]
    num_clusters: int
    batches: int
    network: str


@dataclass(frozen=True, eq=False)
class _Timeline:
    """Raw event times of one run; NaN where the simulation never got."""

    task_start: np.ndarray
    task_end: np.ndarray
    message_arrival: np.ndarray
    link_busy: np.ndarray


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _first_bad_integer(values: list, low: int, high: float) -> int | None:
    """Index of the first value that is not an integer in ``[low, high)``, or None."""
    array = np.array(values)
    if array.dtype.kind in "iu":
        bad = np.flatnonzero((array < low) | (array >= high))
        return int(bad[0]) if bad.size else None
    return next((i for i, v in enumerate(values) if not (_is_int(v) and low <= v < high)), None)


def _prepare(
    tasks: Sequence[SimTask],
    messages: Sequence[SimMessage] | MessageColumns,
    link_bandwidth: Sequence[float] | np.ndarray,
    link_latency: Sequence[float] | np.ndarray,
    num_clusters: int,
    batches: int,
    network: str,
) -> _Problem:
    if network not in SIMULATE_NETWORK_MODELS:
        valid = ", ".join(repr(name) for name in SIMULATE_NETWORK_MODELS)
        raise ValueError(f"unknown network model {network!r}; expected one of {valid}")
    if not _is_int(batches) or batches < 1:
        raise ValueError(
            f"batches must be an integer >= 1 (micro-batches to stream), got {batches!r}"
        )
    if not _is_int(num_clusters) or num_clusters < 1:
        raise ValueError(f"num_clusters must be an integer >= 1, got {num_clusters!r}")
    bandwidth, latency = _prepare_links(link_bandwidth, link_latency)

    names = tuple(task.name for task in tasks)
    clusters = [task.cluster for task in tasks]
    index = _first_bad_integer(clusters, 0, num_clusters)
    if index is not None:
        raise ValueError(
            f"task {index} ({names[index]!r}) is on cluster {clusters[index]!r}, but clusters are "
            f"numbered 0..{num_clusters - 1}; fix its placement or raise num_clusters"
        )
    cycles = np.array([task.cycles for task in tasks], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(cycles) | (cycles < 0))
    if bad.size:
        index = int(bad[0])
        raise ValueError(
            f"task {index} ({names[index]!r}) takes {float(cycles[index])} cycles; expected a "
            f"finite number >= 0"
        )

    def label(index: int) -> str:
        message = messages[index]
        return f"message {index} ({message.src_task!r} -> {message.dst_task!r})"

    num_tasks, num_links = len(tasks), len(bandwidth)
    # Every field of every message, read once (a workload has hundreds of thousands).
    if not isinstance(messages, MessageColumns):
        messages = MessageColumns.of(messages)
    sources, destinations, nbytes, routes, multicasts = (
        messages.src_task, messages.dst_task, messages.nbytes, messages.route,
        messages.multicast)
    for ends in (sources, destinations):
        index = _first_bad_integer(ends, 0, num_tasks)
        if index is not None:
            raise ValueError(
                f"{label(index)} names task {ends[index]!r}; tasks are numbered 0..{num_tasks - 1}"
            )
    index = _first_bad_integer(nbytes, 0, math.inf)
    if index is not None:
        raise ValueError(
            f"{label(index)} carries {nbytes[index]!r} bytes; expected an integer >= 0"
        )

    route_lengths = np.array([len(route) for route in routes], dtype=np.int64)
    route_offsets = np.concatenate([[0], np.cumsum(route_lengths)]).astype(np.int64)
    links = [link for route in routes for link in route]
    position = _first_bad_integer(links, 0, num_links)
    if position is not None:
        index = int(np.searchsorted(route_offsets, position, side="right")) - 1
        raise ValueError(
            f"{label(index)} routes over unknown link {links[position]!r}; links are numbered "
            f"0..{num_links - 1} (the length of link_bandwidth)"
        )
    route_links = np.array(links, dtype=np.int64)
    route_owner = np.repeat(np.arange(len(messages)), route_lengths)
    order = np.lexsort((route_links, route_owner))
    owner, link = route_owner[order], route_links[order]
    repeated = np.flatnonzero((owner[1:] == owner[:-1]) & (link[1:] == link[:-1]))
    if repeated.size:
        index = int(owner[repeated[0]])
        raise ValueError(
            f"{label(index)} crosses a link twice on route {list(routes[index])}; routes must "
            "be paths"
        )

    leaders = _multicast_leaders(sources, nbytes, multicasts, label, network)
    problem = _Problem(
        task_names=names,
        task_cluster=np.array(clusters, dtype=np.int64),
        task_cycles=cycles,
        message_src=np.array(sources, dtype=np.int64),
        message_dst=np.array(destinations, dtype=np.int64),
        message_bytes=np.array(nbytes, dtype=np.float64),
        route_offsets=route_offsets,
        route_links=route_links,
        message_leader=leaders,
        link_bandwidth=bandwidth,
        link_latency=latency,
        num_clusters=int(num_clusters),
        batches=int(batches),
        network=network,
    )
    _check_acyclic(problem)
    return problem


def _multicast_leaders(sources: list, nbytes: list, multicasts: list, label,
                       network: str) -> np.ndarray:
    """Per message, the first message of its multicast (itself when unicast, and always with
    the ``flit`` network, whose routers do not replicate packets)."""
    leaders = np.arange(len(sources), dtype=np.int64)
    if network == "flit":
        return leaders
    first: dict = {}
    members = [index for index, multicast in enumerate(multicasts) if multicast is not None]
    for index in members:
        leaders[index] = first.setdefault(multicasts[index], index)
    if members:
        members = np.array(members)
        lead = leaders[members]
        sent, size = np.asarray(sources), np.asarray(nbytes)
        bad = np.flatnonzero((sent[members] != sent[lead]) | (size[members] != size[lead]))
        if bad.size:
            index, lead = int(members[bad[0]]), int(lead[bad[0]])
            raise ValueError(
                f"{label(index)} is in multicast {multicasts[index]!r} with {label(lead)}, but "
                f"carries {nbytes[index]} B from task {sources[index]} against "
                f"{nbytes[lead]} B from task {sources[lead]}; a multicast sends the same bytes "
                f"from one task"
            )
    return leaders


def _prepare_links(
    link_bandwidth: Sequence[float] | np.ndarray, link_latency: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    bandwidth = np.array(link_bandwidth, dtype=np.float64).reshape(-1)
    latency = np.array(link_latency, dtype=np.float64).reshape(-1)
    if bandwidth.shape != latency.shape:
        raise ValueError(
            f"link_bandwidth has {bandwidth.size} entries but link_latency has {latency.size}; "
            f"both are indexed by link id and need one entry per link"
        )
    bad = np.flatnonzero(~np.isfinite(bandwidth) | (bandwidth <= 0))
    if bad.size:
        link = int(bad[0])
        raise ValueError(
            f"link_bandwidth[{link}] = {float(bandwidth[link])} bytes/cycle; every link needs a "
            f"positive finite bandwidth (remove a dead link from the routes instead)"
        )
    bad = np.flatnonzero(~np.isfinite(latency) | (latency < 0))
    if bad.size:
        link = int(bad[0])
        raise ValueError(
            f"link_latency[{link}] = {float(latency[link])} cycles; expected a finite value >= 0"
        )
    return bandwidth, latency


def _check_acyclic(problem: _Problem) -> None:
    """Raise if the messages form a dependency cycle, naming the tasks on one cycle."""
    if acyclic(len(problem.task_names), problem.message_src, problem.message_dst):
        return
    num_tasks = len(problem.task_names)
    src, dst = problem.message_src.tolist(), problem.message_dst.tolist()
    successors: list[list[int]] = [[] for _ in range(num_tasks)]
    predecessors: list[list[int]] = [[] for _ in range(num_tasks)]
    in_degree = [0] * num_tasks
    for s, d in zip(src, dst, strict=True):
        successors[s].append(d)
        predecessors[d].append(s)
        in_degree[d] += 1
    ready = [task for task in range(num_tasks) if in_degree[task] == 0]
    while ready:
        task = ready.pop()
        for successor in successors[task]:
            in_degree[successor] -= 1
            if in_degree[successor] == 0:
                ready.append(successor)
    stuck = [task for task in range(num_tasks) if in_degree[task] > 0]
    if not stuck:
        return
    # Every stuck task has a stuck predecessor: walking predecessors must revisit a task.
    walk, seen, task = [], {}, stuck[0]
    while task not in seen:
        seen[task] = len(walk)
        walk.append(task)
        task = next(p for p in predecessors[task] if in_degree[p] > 0)
    cycle = list(reversed(walk[seen[task] :]))
    names = " -> ".join(repr(problem.task_names[t]) for t in [*cycle, cycle[0]])
    raise ValueError(
        f"the task graph has a dependency cycle: {names}; messages must form an acyclic graph "
        f"(remove or reverse one of these messages)"
    )


def acyclic(num_tasks: int, src: np.ndarray, dst: np.ndarray) -> bool:
    """Whether the edges ``src -> dst`` between tasks ``0 .. num_tasks - 1`` form an acyclic
    graph: at once when every edge goes forward in task order, else Kahn's algorithm, a level
    of ready tasks at a time, in numpy (a workload has hundreds of thousands of messages)."""
    if np.all(src < dst):
        return True  # task index order is a topological order
    order = np.argsort(src, kind="stable")
    targets = dst[order]
    offsets = np.searchsorted(src[order], np.arange(num_tasks + 1))
    in_degree = np.bincount(dst, minlength=num_tasks)
    ready, removed = np.flatnonzero(in_degree == 0), 0
    while ready.size:
        removed += ready.size
        counts = offsets[ready + 1] - offsets[ready]
        total = int(counts.sum())
        if not total:
            break
        # The out-edges of every ready task: positions offsets[t] .. offsets[t + 1] - 1.
        starts = np.repeat(offsets[ready] - np.cumsum(counts) + counts, counts)
        reached, hits = np.unique(targets[starts + np.arange(total)], return_counts=True)
        in_degree[reached] -= hits
        ready = reached[in_degree[reached] == 0]
    return removed == num_tasks


def _summarise(problem: _Problem, timeline: _Timeline) -> SimResult:
    if np.isnan(timeline.task_end).any():
        raise SimulationStalledError(_stall_message(problem, timeline))
    start, end = timeline.task_start, timeline.task_end
    batches = start.shape[0]
    total = float(end.max()) if end.size else 0.0  # no tasks: every batch is done at cycle 0

    # Cluster order is (batch, task); instance ids b * tasks + t already sort that way.
    instance_cluster = np.tile(problem.task_cluster, batches)
    order = np.argsort(instance_cluster, kind="stable")
    cluster = instance_cluster[order]
    starts, ends = start.ravel()[order], end.ravel()[order]
    previous_end = np.concatenate([[0.0], ends[:-1]])
    previous_end[np.concatenate([[True], cluster[1:] != cluster[:-1]])] = 0.0
    wait = np.bincount(cluster, weights=starts - previous_end, minlength=problem.num_clusters)
    busy = batches * np.bincount(
        problem.task_cluster, weights=problem.task_cycles, minlength=problem.num_clusters
    )
    idle = np.maximum(total - busy - wait, 0.0)

    num_links = len(problem.link_bandwidth)
    # A multicast's bytes cross each link of the union of its routes once.
    route_leader = np.repeat(problem.message_leader, np.diff(problem.route_offsets))
    crossings = np.unique(route_leader * num_links + problem.route_links)
    link_bytes = batches * np.bincount(
        crossings % num_links, weights=problem.message_bytes[crossings // num_links],
        minlength=num_links,
    )

    batch_end = end.max(axis=1) if end.size else np.zeros(batches)
    latency = batch_end - (start.min(axis=1) if start.size else 0.0)
    span = batch_end[-1] - batch_end[0] if batches > 1 else latency[0]
    throughput = (max(batches - 1, 1) / span) if span > 0 else math.inf

    def per_cycle(values: np.ndarray) -> np.ndarray:
        return values / total if total > 0 else np.zeros_like(values)

    return SimResult(
        network=problem.network,
        batches=batches,
        task_names=problem.task_names,
        total_cycles=total,
        task_start=start,
        task_end=end,
        message_arrival=timeline.message_arrival,
        cluster_busy_cycles=busy,
        cluster_wait_cycles=wait,
        cluster_idle_cycles=idle,
        cluster_utilisation=per_cycle(busy),
        link_bytes=link_bytes,
        link_busy_cycles=timeline.link_busy,
        link_utilisation=per_cycle(timeline.link_busy),
        latency_per_batch=latency,
        throughput_per_cycle=float(throughput),
    )


def _stall_message(problem: _Problem, timeline: _Timeline) -> str:
    """Name, per cluster, the first task instance that never started and what it waits for."""
    names = problem.task_names
    blocked = []
    for cluster in range(problem.num_clusters):
        for batch, task in _cluster_sequence(problem, cluster):
            if not np.isnan(timeline.task_start[batch, task]):
                continue
            missing = [
                repr(names[problem.message_src[m]])
                for m in np.flatnonzero(problem.message_dst == task)
                if np.isnan(timeline.message_arrival[batch, m])
            ]
            blocked.append(
                f"{names[task]!r} (task {task}, batch {batch}, cluster {cluster}) waits for "
                f"{', '.join(missing)}"
            )
            break
    listed = "; ".join(blocked[:_MAX_BLOCKED_LISTED])
    more = len(blocked) - _MAX_BLOCKED_LISTED
    if more > 0:
        listed += f"; and {more} more"
    finished = int(np.count_nonzero(~np.isnan(timeline.task_end)))
    return (
        f"the simulation cannot make progress after {finished} of {timeline.task_end.size} task "
        f"instances: {listed}. Each cluster runs its tasks in list order, so a task must not wait "
        f"for a task placed later on the same cluster; order the tasks topologically"
    )


def _cluster_sequence(problem: _Problem, cluster: int) -> list[tuple[int, int]]:
    """The (batch, task) instances a cluster runs, in order."""
    tasks = np.flatnonzero(problem.task_cluster == cluster).tolist()
    return [(batch, task) for batch in range(problem.batches) for task in tasks]

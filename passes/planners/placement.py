"""The result of planning: one cluster and one stage per op (no TVM here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import tvm_ffi

from tvm_chiplet.targets.workload import DRAM_POLICIES, pool_groups


@tvm_ffi.register_error
class PlanningError(ValueError):
    """A strategy cannot place this model on this system."""


SPLIT_DIMS = {
    "conv2d": ("out_channels", "in_channels", "rows", "batch"),
    "conv2d_transpose": ("out_channels", "batch"),
    "conv3d": ("out_channels", "batch"),
    "matmul": ("cols", "reduction", "rows", "batch"),
}
"""Split dimensions of each anchor kind, the weight-splitting one first."""

WEIGHT_DIMS = ("out_channels", "in_channels", "cols", "reduction")
"""Dimensions whose split also splits the weights (each part holds 1/k of them)."""

REPLICATED_DIMS = ("rows", "batch")
"""Dimensions whose parts each hold all the weights: replicas, which pool them where their
clusters stream (:func:`~tvm_chiplet.targets.workload.replica_groups`)."""

REDUCTION_DIMS = ("in_channels", "reduction")
"""Dimensions whose parts produce partial sums, combined by additions."""

TILES = "tiles"
"""A 2-D split of a conv2d or of a matmul with weights: ``"tiles/n"`` cuts its output rows
(a matmul's rows: tokens) into ``k / n`` bands and each band's output channels (a matmul's
columns) into ``n`` slices, part ``p`` (band ``p // n``, slice ``p % n``) on the ``p``-th
cluster. A part reads its band of input rows (with the halo a conv's kernel needs) in every
channel and ``1 / n`` of the weights: against a row split, ``1 / n`` of the weights per
cluster; against an output-channel split, ``n / k`` of the input. A depthwise conv's part reads
only its own channels of the band: after another 2-D split, its own tile and the halo."""


BLOCKS = "blocks"
"""A 2-D split of a conv2d's or a matmul's weights: ``"blocks/n"`` cuts its input channels (a
matmul's reduction) into ``k / n`` groups and its output channels (columns) into ``n`` slices,
part ``p`` holding the block of group ``p // n`` and slice ``p % n`` (or, transposed, group
``p % (k / n)`` and slice ``p // (k / n)``, as DistributeTensors picks to read its input where
it lies). A part reads ``n / k`` of the input (its group's channels, which its group's ``n``
parts share) and holds ``1 / k`` of the weights; each slice's ``k / n`` partial sums are
reduce-scattered among the parts that made them, leaving the output sharded along the channels
over all ``k``. Against an output-channel split over ``k``, each part reads ``n / k`` of the
input instead of all of it, for a reduce-scatter of ``1 / n`` of the output inside each slice
(SUMMA's 2-D matrix products, as Megatron's 2-D and Alpa's 2-D mesh shardings make them)."""


def _by(dim: str | None, kind: str) -> int | None:
    if dim is None or not dim.startswith(kind + "/"):
        return None
    by = dim[len(kind) + 1:]
    return int(by) if by.isdigit() else None


def weight_replicas(dim: str | None, parts: int) -> int:
    """How many of ``parts`` parts along ``dim`` hold each slice of the op's weights: all of
    them along :data:`REPLICATED_DIMS`, a ``"tiles/n"`` split's row bands, else one."""
    by = tiles_by(dim)
    return parts // by if by is not None else parts if dim in REPLICATED_DIMS else 1


def tiles_by(dim: str | None) -> int | None:
    """``n`` of a ``"tiles/n"`` split dimension (output-channel slices per row band), else
    None."""
    return _by(dim, TILES)


def blocks_by(dim: str | None) -> int | None:
    """``n`` of a ``"blocks/n"`` split dimension (output-channel slices per input-channel
    group), else None."""
    return _by(dim, BLOCKS)


def block_dims(dims) -> tuple[str, str] | None:
    """The (input, output) dimensions a :data:`BLOCKS` split of an op with split dimensions
    ``dims`` cuts its weights along: a plain conv2d's input and output channels, a matmul's
    reduction and columns; None when it has no such pair (a depthwise conv, a matmul without
    weights)."""
    for pair in (("in_channels", "out_channels"), ("reduction", "cols")):
        if all(dim in dims for dim in pair):
            return pair
    return None


def tile_channels(dims) -> str | None:
    """The dimension a 2-D split of an op with split dimensions ``dims`` slices each row band
    along: a conv2d's output channels (plain, whose tiles read every input channel of their
    band, or grouped: no input-channel split, a tile reads only its groups' channels), a matmul's
    columns; None when the op has no 2-D split (no rows)."""
    if "rows" not in dims:
        return None
    return next((dim for dim in ("out_channels", "cols") if dim in dims), None)


def tileable(dims) -> bool:
    """Whether an op with split dimensions ``dims`` has 2-D splits (:func:`tile_channels`)."""
    return tile_channels(dims) is not None


def grouped_conv(dims) -> bool:
    """Whether an op with split dimensions ``dims`` is a grouped conv2d (depthwise or not):
    output channels and rows but no input-channel split (each group of output channels reads
    its own input channels). A transposed conv or a conv3d, split by output channels or batch
    only, is costed as reading every input channel (a grouped transposed conv's part reads
    only its groups' channels: an overestimate of its input's move)."""
    return "out_channels" in dims and "rows" in dims and "in_channels" not in dims


def tiles_dim(by: int) -> str:
    """The split dimension of a 2-D split with ``by`` output-channel slices per row band."""
    return f"{TILES}/{by}"


def blocks_dim(by: int) -> str:
    """The split dimension of a :data:`BLOCKS` split with ``by`` output-channel slices per
    input-channel group."""
    return f"{BLOCKS}/{by}"


def part_bytes(input_bytes: float, output_bytes: float, weight_bytes: float, dim: str | None,
               parts: int, partial_scale: float = 1.0) -> tuple[float, float, float]:
    """``(input, output, weight)`` bytes of one of ``parts`` parts of an op split along ``dim``.

    Along a weight dimension a part holds ``1/k`` of the weights and reads the whole input;
    along an activation dimension (rows, batch) it reads ``1/k`` of the input and holds all
    the weights; along a reduction dimension it reads ``1/k`` of both and writes a whole-size
    partial sum, ``partial_scale`` times the output's size in bytes
    (:attr:`~tvm_chiplet.targets.system.ChipletSystem.partial_sum_scale`). ``dim=None``
    (with ``parts=1``) is the whole op.
    """
    by = tiles_by(dim)
    if by is not None:  # a band of the input (its halo left out), 1 / by of the weights
        return input_bytes * by / parts, output_bytes / parts, weight_bytes / by
    by = blocks_by(dim)
    if by is not None:  # a channel group of the input, a slice's partial sum, 1 / k weights
        return input_bytes * by / parts, output_bytes * partial_scale / by, weight_bytes / parts
    reduction = dim in REDUCTION_DIMS
    weights = weight_bytes / parts if dim in WEIGHT_DIMS else weight_bytes
    reads_all = dim in WEIGHT_DIMS and not reduction
    part_in = input_bytes if reads_all else input_bytes / parts
    part_out = output_bytes * partial_scale if reduction else output_bytes / parts
    return part_in, part_out, weights


@dataclass(frozen=True)
class OpSplit:
    """One op split into parts along ``dim``, part ``p`` on ``clusters[p]``.

    The parts' results are combined (concatenated, or added for a reduction dimension) on the
    op's own cluster in :attr:`Placement.op_cluster`.
    """

    op_id: int
    dim: str
    clusters: tuple[int, ...]

    def __post_init__(self) -> None:
        known = {d for dims in SPLIT_DIMS.values() for d in dims}
        by, unit = tiles_by(self.dim), "row bands"
        if by is None:
            by, unit = blocks_by(self.dim), "input-channel groups"
        if self.dim not in known and by is None:
            raise PlanningError(f"unknown split dim {self.dim!r}; valid: {sorted(known)}, "
                                f"{TILES}/n (n output-channel or column slices per row "
                                f"band) and {BLOCKS}/n (n output-channel or column slices per "
                                "input-channel or reduction group)")
        if len(self.clusters) < 2:
            raise PlanningError(f"a split of op {self.op_id} needs >= 2 parts, "
                                f"got clusters {list(self.clusters)}")
        if by is not None and (by < 2 or len(self.clusters) % by or len(self.clusters) == by):
            raise PlanningError(
                f"a {self.dim} split of op {self.op_id} over {len(self.clusters)} clusters "
                f"needs at least 2 {unit} of {by} clusters each: give a multiple of {by} "
                "clusters, at least twice as many")

    @property
    def parts(self) -> int:
        return len(self.clusters)


@dataclass(frozen=True)
class Placement:
    """Where every op of the reduced ``main`` runs.

    Attributes
    ----------
    strategy : str
        Name of the planner that made it.
    op_cluster : tuple[int, ...]
        Cluster id of each op, indexed by ``op_id``.
    op_stage : tuple[int, ...]
        Pipeline stage of each op (0 for strategies without stages).
    stage_clusters : tuple[int, ...]
        Cluster that runs each stage.
    objective_cycles : float
        The planner's own estimate of what it minimised (bottleneck stage cycles for pipeline).
    notes : dict
        Planner-specific facts worth reporting (gap, candidates, ...).
    splits : tuple of OpSplit
        Ops split across several clusters (tensor-parallel); realised by DistributeTensors.
    dram_policy : str
        Where streamed weights live in DRAM: ``"interleave"`` over every controller,
        ``"nearest"``: in the controller nearest the cluster that reads them, or
        ``"balanced"``: as :attr:`dram_shares` says.
    dram_shares : tuple of (cluster, controller, fraction)
        For ``"balanced"``: the fraction of a cluster's streamed bytes each controller holds.
    replicas : tuple of tuples of (cluster, copy cluster)
        Extra copies of the whole placement for input-level data parallelism: with ``R - 1``
        copies, input ``b`` runs on copy ``b mod R``, where copy ``r >= 1`` puts the work of
        each cluster ``c`` on ``dict(replicas[r - 1])[c]``. Every copy maps every cluster the
        placement uses (ops and split parts) to clusters no other copy uses.
    sram_loans : tuple of (borrower, lender, bytes)
        Streamed weights of cluster ``borrower`` held in the spare SRAM of cluster ``lender``:
        each batch, ``bytes`` of what ``borrower`` streams come from ``lender`` over the network
        instead of from DRAM (see :mod:`tvm_chiplet.targets.workload`). With ``replicas``,
        every copy has the same loans between its own clusters.
    weight_pool : bool
        With ``replicas``: the copies keep one set of weights between them, each group of
        clusters that run the same work in every copy striping it over their SRAM, and every
        input fetches the other members' stripes instead of streaming from DRAM
        (:func:`~tvm_chiplet.targets.workload.pool_groups`).
    microbatch : int
        Inputs every op runs back to back per fetch of its streamed weights (batching; see
        :func:`~tvm_chiplet.targets.workload.microbatch_items`): 1 runs inputs one by one.
        The microbatch's activations take SRAM from the weights each cluster keeps resident.
    even_rows : bool
        How DistributeTensors bounds the row bands of a conv or pool whose input lies in row
        bands on the same clusters: False centres each output row on the band holding its
        window's centre (each band reads its own rows and halos), True splits them evenly, as
        every other row split.
    """

    strategy: str
    op_cluster: tuple[int, ...]
    op_stage: tuple[int, ...]
    stage_clusters: tuple[int, ...]
    objective_cycles: float = 0.0
    notes: dict = field(default_factory=dict)
    splits: tuple[OpSplit, ...] = ()
    dram_policy: str = "interleave"
    dram_shares: tuple[tuple[int, int, float], ...] = ()
    replicas: tuple[tuple[tuple[int, int], ...], ...] = ()
    sram_loans: tuple[tuple[int, int, int], ...] = ()
    weight_pool: bool = False
    microbatch: int = 1
    even_rows: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.microbatch, bool) or not isinstance(self.microbatch, int) \
                or self.microbatch < 1:
            raise PlanningError(
                f"microbatch must be an integer >= 1 (inputs per weight fetch), found "
                f"{self.microbatch!r}")
        if self.dram_policy not in DRAM_POLICIES:
            raise PlanningError(
                f"dram_policy must be one of {DRAM_POLICIES}, found {self.dram_policy!r}"
            )
        if len(self.op_cluster) != len(self.op_stage):
            raise PlanningError(
                f"placement has {len(self.op_cluster)} clusters but {len(self.op_stage)} stages"
            )
        used = self.clusters_used()
        taken = set(used)
        for number, mapping in enumerate(self.replicas, start=1):
            sources = [c for c, _ in mapping]
            targets = {d for _, d in mapping}
            if sorted(sources) != used or len(targets) != len(sources) or taken & targets:
                raise PlanningError(
                    f"replica {number} must map each used cluster {used} to a distinct cluster "
                    f"no other copy uses; found {[list(pair) for pair in mapping]}"
                )
            taken |= targets
        if self.weight_pool and (not self.replicas or self.sram_loans):
            raise PlanningError(
                "a weight pool is one set of weights shared by the copies of a placement: it "
                "needs replicas and no SRAM loans (the pool holds the streamed weights)")

    @property
    def copies(self) -> int:
        """How many copies of the placement run inputs side by side (1 without replicas)."""
        return 1 + len(self.replicas)

    @property
    def copy_maps(self) -> list[dict[int, int]]:
        """The cluster map of each extra copy (``replicas`` as dicts)."""
        return [dict(mapping) for mapping in self.replicas]

    def copied_onto(self, tiles: Sequence[Sequence[int]]) -> Placement:
        """This placement (planned on ``tiles[0]``) with a copy on each other tile: the
        ``i``-th cluster of every tile is at one place in it (congruent tiles, as
        :meth:`~tvm_chiplet.targets.topology.Topology.tilings` cuts the grid)."""
        position = {c: i for i, c in enumerate(tiles[0])}
        return replace(self, replicas=tuple(
            tuple((c, tile[position[c]]) for c in self.clusters_used()) for tile in tiles[1:]))

    def pool(self) -> list[tuple[int, ...]]:
        """The weight pool's groups (:func:`~tvm_chiplet.targets.workload.pool_groups`), or
        none without :attr:`weight_pool`."""
        if not self.weight_pool:
            return []
        return pool_groups(self.clusters_used(), self.copy_maps)

    def without_loans(self) -> Placement:
        """This placement lending no SRAM (:attr:`sram_loans` empty), its copies mapping only the
        clusters it still uses (a lender of nothing else drops out of every copy)."""
        if not self.sram_loans:
            return self
        bare = replace(self, sram_loans=(), replicas=())
        used = set(bare.clusters_used())
        return replace(bare, replicas=tuple(
            tuple(pair for pair in mapping if pair[0] in used) for mapping in self.replicas))

    def clusters_used(self) -> list[int]:
        """The clusters the placement's ops and split parts run on, and the clusters lending
        them SRAM (one copy), sorted."""
        used = set(self.op_cluster) | {lender for _, lender, _ in self.sram_loans}
        for split in self.splits:
            used.update(split.clusters)
        return sorted(used)

    def check_fits(self, num_ops: int, num_clusters: int, system_name: str) -> None:
        """Raise :class:`PlanningError` unless the placement covers ``num_ops`` ops and every
        op, split part, copy and loan is on a cluster of the system (``0..num_clusters-1``);
        the error names the op or group that does not fit."""
        valid = f"system {system_name!r} has clusters 0..{num_clusters - 1}"
        if len(self.op_cluster) != num_ops:
            raise PlanningError(f"the {self.strategy!r} placement covers "
                                f"{len(self.op_cluster)} ops, but the graph has {num_ops}")
        for op_id, cluster in enumerate(self.op_cluster):
            if not 0 <= cluster < num_clusters:
                raise PlanningError(f"op {op_id} is placed on cluster {cluster}, but {valid}")
        for split in self.splits:
            if not 0 <= split.op_id < num_ops:
                raise PlanningError(f"a split names op {split.op_id}, but the graph has ops "
                                    f"0..{num_ops - 1}")
            outside = [c for c in split.clusters if not 0 <= c < num_clusters]
            if outside:
                raise PlanningError(
                    f"op {split.op_id} is split along {split.dim} over the group "
                    f"{list(split.clusters)}, but {valid}: {outside} do not exist; give every "
                    "part a cluster of the system"
                )
        for mapping in self.replicas:
            outside = [d for _, d in mapping if not 0 <= d < num_clusters]
            if outside:
                raise PlanningError(f"a copy of the placement uses clusters {outside}, but "
                                    f"{valid}")
        for borrower, lender, _ in self.sram_loans:
            if not (0 <= borrower < num_clusters and 0 <= lender < num_clusters):
                raise PlanningError(f"an SRAM loan joins clusters {borrower} and {lender}, "
                                    f"but {valid}")

    def to_dict(self) -> dict:
        return {
            "strategy": self.strategy,
            "op_cluster": list(self.op_cluster),
            "op_stage": list(self.op_stage),
            "stage_clusters": list(self.stage_clusters),
            "objective_cycles": self.objective_cycles,
            "notes": dict(self.notes),
            "splits": [
                {"op_id": s.op_id, "dim": s.dim, "clusters": list(s.clusters)}
                for s in self.splits
            ],
            "dram_policy": self.dram_policy,
            "dram_shares": [list(share) for share in self.dram_shares],
            "replicas": [[list(pair) for pair in mapping] for mapping in self.replicas],
            "sram_loans": [list(loan) for loan in self.sram_loans],
            "weight_pool": self.weight_pool,
            "microbatch": self.microbatch,
            "even_rows": self.even_rows,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Placement:
        return cls(
            strategy=data["strategy"],
            op_cluster=tuple(data["op_cluster"]),
            op_stage=tuple(data["op_stage"]),
            stage_clusters=tuple(data["stage_clusters"]),
            objective_cycles=float(data.get("objective_cycles", 0.0)),
            notes=dict(data.get("notes", {})),
            splits=tuple(
                OpSplit(s["op_id"], s["dim"], tuple(s["clusters"]))
                for s in data.get("splits", [])
            ),
            dram_policy=data.get("dram_policy", "interleave"),
            dram_shares=tuple(tuple(share) for share in data.get("dram_shares", [])),
            replicas=tuple(tuple((int(c), int(d)) for c, d in mapping)
                           for mapping in data.get("replicas", [])),
            sram_loans=tuple(tuple(int(v) for v in loan) for loan in data.get("sram_loans", [])),
            weight_pool=bool(data.get("weight_pool", False)),
            microbatch=int(data.get("microbatch", 1)),
            even_rows=bool(data.get("even_rows", False)),
        )

"""DistributeTensors: split ops across clusters and keep their parts distributed.

A split op's parts stay on their clusters. Every value of ``main`` gets a layout:

- **whole** on one cluster (or, for model inputs and constants, wherever it is read);
- **sharded** along one axis, part ``p`` (a range of that axis) on cluster ``clusters[p]``;
- **partial**: one full-shape partial sum per cluster, to be added (an input-channel or
  reduction split's result); a blocks split's (input-channel groups by output-channel slices)
  partial sums are reduce-scattered slice by slice as it is made, leaving it sharded along the
  channels;
- **tiled**: row bands by channel slices (a 2-D split's output: of an NCHW tensor, or of a
  matmul's rows and columns). Elementwise ops and max pools follow it tile by tile; a global
  pool (a mean, sum, max or min over the rows, not the channels) reduces each tile where it
  lies and combines each channel slice's bands on one member, leaving the result sharded along
  the channels; an op that keeps the rows but not the channels (a layer norm over the
  columns) reads it re-cut along the rows, each band's rows shared among the band's members;
  a reshape of a matmul's columns into attention's heads keeps it tiled, each band's slices
  re-cut at whole heads, and transposes, softmax and the matmuls of attention follow those
  tiles (query rows by heads, each fetching its heads' keys and values from every band); a
  reshape that does not keep the rows reads it sharded along the channels over the first
  band's members, each slice gathered from every band.

Ops that work element by element (activations, binary ops with broadcast, bias adds, residual
adds), pools and reductions over other axes, softmax and layer norm over other axes, transposes
and reshapes that keep the split axis whole, and strided slices (each part keeping its own
terms) follow their input's layout: part ``p`` runs on
``clusters[p]`` and reads its local part with no communication. A consumer that needs another
layout gets a **redistribution**, built as explicit ops on the parts: every region a cluster
needs is cut where it lies (``strided_slice`` on the sender) and assembled where it is needed
(``concat`` for all-gather, all-to-all and halo exchange, ``add`` for reduce and reduce-scatter),
so only the bytes needed cross a link. The executor runs these ops; the simulator times their
messages on the system's routes. While the rewritten module is legalized and fused, a value read
on another cluster goes through an identity marker, and the assembling ops that read many
remote values (a gather's concat, a ring reduce-scatter's slice-and-add step) are single opaque
calls that need none: a ``k``-way all-gather is ``k`` bindings, not ``k^2`` markers. Each becomes
its kernel afterwards.

A model input that leads through such ops to the rows of a split matmul (token ids, through
an embedding lookup and its layer norm) is cut into that matmul's row bands
(:meth:`_Distributor.shard_inputs`). An op that only rearranges an uncut model input (a reshape,
permute, expand_dims or squeeze: torch's sequence-first inputs flattened to a matmul's rows, a
1-D conv's input given a unit axis) runs on each cluster that reads it, as the input is read
there, rather than on one cluster that sends it.

A conv or pool split into row bands over the clusters that hold its input's row bands takes
the output rows centred on each band's own (:func:`_centred_rows`), unless the placement bounds
rows evenly (``centred_rows`` False).

A matmul of two activations (attention's scores and context) follows a sharded operand on a
batch axis (the heads: both operands are cut alike, so every head stays local), the left's rows
or the right's columns, or a left operand tiled by its rows and heads (each tile fetching its
heads of the right operand). An elementwise op whose distributed operand is already gathered
where it is placed runs whole there, when that moves fewer bytes than cutting its whole
operands.

Why not ``relax.distributed``: its ``DeviceMesh``/``Placement`` types describe one SPMD program
over a mesh, lowered to collective calls for the disco runtime, with even shards. Our executor
and simulator run each part as its own binding on one cluster (one VM per cluster), with uneven
parts, halos and partial sums, so layouts live in this pass rather than in the types.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import tvm
from tvm import relax, te

from tvm_chiplet.passes import resize_rows
from tvm_chiplet.passes.analysis.batch_axis import elementwise
from tvm_chiplet.passes.attrs import ATTR_IN_PLACE, PARTIAL_SUM
from tvm_chiplet.passes.fold_constant_calls import FoldConstantCalls
from tvm_chiplet.passes.legalize_once import LegalizeOnce
from tvm_chiplet.passes.planners.placement import (
    REDUCTION_DIMS,
    PlanningError,
    blocks_by,
    tiles_by,
)
from tvm_chiplet.passes.reduce_graph import ReduceGraph
from tvm_chiplet.passes.rewrite_calls import is_view, kernel_context, with_functions
from tvm_chiplet.passes.split_operators import (
    AnchorInfo,
    AnchorSplit,
    anchor_bindings,
    check_split,
    conv2d_like,
    conv2d_transpose_like,
    conv3d_part,
    even_bounds,
    group_channels,
    group_slices,
    matmul_batch_operands,
    part_name,
    static_shape,
)
from tvm_chiplet.targets.collectives import reduce_ring
from tvm_chiplet.targets.topology import Topology

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_CONV2D_TRANSPOSE = tvm.ir.Op.get("relax.nn.conv2d_transpose")
_CONV3D = tvm.ir.Op.get("relax.nn.conv3d")
_MATMUL = tvm.ir.Op.get("relax.matmul")
_PURE_PACKED = tvm.ir.Op.get("relax.call_pure_packed")

BOUNDARY = "chiplet.boundary"
"""Packed function name of the identity that marks a value crossing clusters while the module is
reduced, so that FuseOps never fuses ops of two clusters into one kernel. Removed afterwards."""

GATHER = "chiplet.gather"
"""Packed function name of a concat (pieces..., axis, reading cluster) of pieces of which some lie
on other clusters, while the module is reduced: opaque to FuseOps as a :data:`BOUNDARY` marker
is, without a marker per piece. Replaced by a concat kernel afterwards."""

SLICED_ADD = "chiplet.sliced_add"
"""Packed function name of ``a + b[begin:...]`` along an axis (a, b, axis, begin, cluster), a
reduce-scatter's step, while the module is reduced: opaque to FuseOps, without markers.
Replaced by a kernel afterwards."""

SHARE_ROWS = 2
"""Fewest rows of a share of a tiled value's row band when an op reads every channel of a row
(a layer norm after a matmul's 2-D split): each share is fetched from every slice of its band
and every later tile reads its rows from the shares, so small shares multiply small messages
(BERT-base's 128 tokens in one-row shares over 64 slices: 8 192 pieces per residual add).
BERT-base int8 batch 1 on the 16x16 mesh, by rows per share (measured while its query, key and
value projections had 1-D splits): 1: 251 k cycles, planned in 128 s; 2: 264 k, 76 s; 4: 286 k,
55 s (spreading the shares over the band instead of its first members: 290 k)."""

RECUT_TILES = 128
"""Tiles past which a re-cut along the rows makes its shares larger: its pieces are tiles x
shares per band, each a binding to realise and a message to send, so each share holds at least
``SHARE_ROWS x ceil(tiles / RECUT_TILES)`` rows (256 tiles: 4 rows). BERT-base int8 batch 1 on
the 16x16 mesh, one plan (2-D projections, attention by bands and heads) realised and
simulated with at least 2, 4 and 8 rows per share: 127 340 cycles realised in 100 s, 127 094
in 77 s, 128 439 in 61 s. On the 8x8 mesh (64 tiles) 4 rows per share simulated 3 % slower
than 2 (BERT-base 1.89x -> 1.95x the bound)."""

_IMAGE_OPS = frozenset(("relax.nn.max_pool2d", "relax.nn.avg_pool2d",
                        "relax.nn.adaptive_avg_pool2d", "relax.image.resize2d"))
"""Ops on the image of each channel of each sample on its own: of an NCHW value, they follow a
split along the batch or the channels (not the rows: a window or a resize reads across them)."""
_REDUCE_OPS = frozenset(
    ("relax.mean", "relax.sum", "relax.max", "relax.min", "relax.prod", "relax.variance")
)
_AXIS_OPS = frozenset(("relax.nn.softmax", "relax.nn.log_softmax"))


@dataclass(frozen=True)
class DistributedSplit:
    """Split anchor ``anchor`` (see :func:`~.split_operators.find_anchors`) along ``dim``, part
    ``p`` on cluster ``clusters[p]``."""

    anchor: int
    dim: str
    clusters: tuple[int, ...]


@dataclass(frozen=True)
class _Whole:
    var: relax.Expr
    cluster: int | None  # None: a model input or a constant, read from where it is needed


@dataclass(frozen=True)
class _Sharded:
    axis: int
    bounds: tuple[tuple[int, int], ...]
    parts: tuple[relax.Var, ...]
    clusters: tuple[int, ...]


_CHANNELS, _ROWS = 1, 2  # axes of an NCHW tensor


@dataclass(frozen=True)
class _Tiled:
    """Row bands (along ``row_axis``) by channel slices (along ``channel_axis``) of a 2-D
    split's output: part ``p`` is band ``p // n`` (rows ``rows[p // n]``) and slice ``p % n``
    (channels ``channels[p % n]``), ``n = len(channels)``, on ``clusters[p]``. A conv2d's
    NCHW output has its rows on axis 2 and channels on axis 1; a matmul's its rows and columns
    on the last two axes."""

    rows: tuple[tuple[int, int], ...]
    channels: tuple[tuple[int, int], ...]
    parts: tuple[relax.Var, ...]
    clusters: tuple[int, ...]
    row_axis: int = _ROWS
    channel_axis: int = _CHANNELS

    def box(self, p: int) -> dict[int, tuple[int, int]]:
        """Part ``p``'s region: ``{axis: (begin, end)}``."""
        n = len(self.channels)
        return {self.row_axis: self.rows[p // n], self.channel_axis: self.channels[p % n]}

    @property
    def nchw(self) -> bool:
        """Whether this is a conv2d's NCHW output (pools and reductions over rows follow it)."""
        return (self.row_axis, self.channel_axis) == (_ROWS, _CHANNELS)


def _overlapping(spans: tuple[tuple[int, int], ...], box: tuple[int, int] | None) -> range:
    """The indices of ``spans`` (a layout's bands or slices) that may overlap ``box`` (all of
    them for None): found by bisection where the spans ascend, as they do, since a value cut
    into hundreds of tiles is read region by region (tens of thousands of regions)."""
    if box is None:
        return range(len(spans))
    starts, ends = _edges(spans)
    if starts is None:
        return range(len(spans))
    return range(bisect.bisect_right(ends, box[0]), bisect.bisect_left(starts, box[1]))


@functools.cache
def _edges(spans: tuple[tuple[int, int], ...]) -> tuple[list[int] | None, list[int] | None]:
    """The starts and ends of ``spans``, or None when either does not ascend."""
    starts, ends = [b for b, _ in spans], [e for _, e in spans]
    ascending = all(a <= b for a, b in itertools.pairwise(starts)) and all(
        a <= b for a, b in itertools.pairwise(ends))
    return (starts, ends) if ascending else (None, None)


@dataclass(frozen=True)
class _Partial:
    parts: tuple[relax.Var, ...]
    clusters: tuple[int, ...]


@dataclass(frozen=True)
class _TupleOf:
    fields: tuple[relax.Expr, ...]  # operands of the original main, each with its own layout


def _shape(expr: relax.Expr) -> list[int]:
    return list(_static(expr))


@functools.lru_cache(maxsize=1 << 16)
def _static(expr: relax.Expr) -> tuple[int, ...]:
    """``expr``'s static shape, looked up once: a 256-way split reads the shapes of its parts
    over a million times, and each look-up walks the type through the FFI."""
    shape = static_shape(expr)
    if shape is None or None in shape:
        raise PlanningError(
            f"DistributeTensors needs static shapes; {getattr(expr, 'name', expr)} has "
            f"{shape if shape is not None else 'no tensor shape'}"
        )
    return tuple(shape)


def _nbytes(expr: relax.Expr) -> int:
    shape = static_shape(expr)
    if shape is None or None in shape:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * tvm.DataType(str(expr.ty.dtype)).bits // 8


class _Distributor:
    """Rebuild ``main`` binding by binding, each new binding on one cluster."""

    def __init__(self, splits: dict[relax.Var, tuple[str, tuple[int, ...]]],
                 placed: dict[relax.Var, int], home: int, topology: Topology | None = None,
                 centred_rows: bool = True, params: Sequence[relax.Var] = ()) -> None:
        self.bb = relax.BlockBuilder()
        self.splits = splits
        self.placed = placed
        self.home = home
        self.topology = topology
        self.centred_rows = centred_rows
        self._rings: dict[tuple[int, ...], tuple[int, ...] | None] = {}
        self.layout: dict[relax.Var, object] = {}
        self.alias: dict[relax.Var, relax.Expr] = {}  # a tuple's field read by TupleGetItem
        self.cluster_of: dict[relax.Var, int] = {}
        self._crossing: dict[tuple[relax.Var, int], relax.Var] = {}
        self._whole: dict[tuple[relax.Var, int], relax.Expr] = {}
        self._sliced: dict[relax.Var, tuple[relax.Var, relax.Call]] = {}  # slice: (data, call)
        self._cuts: dict[tuple, relax.Expr] = {}  # (var, box): its slice, cut once
        self._constant_cuts: dict[tuple, tvm.ir.expr.Constant] = {}  # (constant, box)
        self._arrays: dict[tvm.ir.expr.Constant, np.ndarray] = {}  # a cut constant's values
        self._by_rows: dict[relax.Var, _Sharded] = {}  # a tiled value re-cut along its rows
        self.users: dict[relax.Var, list[relax.VarBinding]] = {}  # the bindings reading a Var
        self.inputs: set[relax.Var] = set()  # model inputs given a layout (:meth:`shard_inputs`)
        # Values that only rearrange a model input that has no layout (torch's sequence-first
        # transpose, a flatten to a matmul's rows): run on each cluster that reads them, from
        # the input there, rather than on one cluster that sends them.
        self.views: dict[relax.Var, relax.Call] = {}
        self.params = set(params)  # the model inputs

    # -- emitting ------------------------------------------------------------------------------

    def emit(self, expr: relax.Expr, name: str, cluster: int) -> relax.Var:
        var = self.bb.emit(expr, name)
        self.cluster_of[var] = cluster
        return var

    def use(self, expr: relax.Expr, cluster: int) -> relax.Expr:
        """``expr`` as read by an op on ``cluster``: a value of another cluster, or a model
        input, goes through a boundary marker (one per value and reading cluster), which runs
        on the reading cluster."""
        if not isinstance(expr, relax.Var) or self.cluster_of.get(expr) == cluster:
            return expr
        key = (expr, cluster)
        if key not in self._crossing:
            marker = relax.op.call_pure_packed(BOUNDARY, expr, relax.prim_value(cluster),
                                               ty_args=expr.ty)
            # Bound to a Var, not a DataflowVar: the same fusion (a marker is opaque), but
            # FuseOps takes time superlinear in the values it can fuse across, and the markers
            # cut those: ResNet-50 split 32 ways (63k bindings), FuseOps 27 s -> 3 s. Passes
            # may bind it to a new Var: the marker names its cluster.
            var = self.bb.emit_output(marker, f"{expr.name}_to{cluster}")
            self.cluster_of[var] = cluster
            self._crossing[key] = var
        return self._crossing[key]

    # -- layouts -------------------------------------------------------------------------------

    def resolve(self, value: relax.Expr) -> relax.Expr:
        while isinstance(value, relax.Var) and value in self.alias:
            value = self.alias[value]
        return value

    def whole(self, value: relax.Expr, cluster: int) -> relax.Expr:
        """The whole of ``value`` (an operand of the original ``main``) on ``cluster``."""
        value = self.resolve(value)
        if isinstance(value, relax.Tuple):
            return relax.Tuple([self.whole(v, cluster) for v in value.fields])
        if value in self.views:
            key = (value, cluster)
            if key not in self._whole:
                call = self.views[value]
                self._whole[key] = self.emit(relax.Call(call.op, [
                    self.whole(call.args[0], cluster), *call.args[1:]], call.attrs),
                    f"{value.name}_at{cluster}", cluster)
            return self._whole[key]
        layout = self.layout.get(value) if isinstance(value, relax.Var) else None
        if layout is None or value in self.inputs:  # constants, shapes, values, model inputs
            return self.use(value, cluster) if isinstance(value, relax.Var) else value
        if isinstance(layout, _TupleOf):
            return relax.Tuple([self.whole(v, cluster) for v in layout.fields])
        if isinstance(layout, _Whole):
            return self.use(layout.var, cluster)
        key = (value, cluster)
        source = self._sliced.get(value)
        if key not in self._whole and source is not None and (source[0], cluster) in self._whole:
            # A strided slice whose input is already whole here (gathered for another
            # reader: a layer's input, read by its block and, sliced, by the shortcut) is cut
            # from that copy, not gathered again.
            data, call = source
            self._whole[key] = self.emit(
                relax.Call(call.op, [self._whole[data, cluster], *call.args[1:]], call.attrs),
                f"{value.name}_whole", cluster)
        if key not in self._whole:
            if isinstance(layout, _Sharded):
                size = layout.bounds[-1][1]
                self._whole[key] = self.region(value, layout.axis, 0, size, cluster)
            elif isinstance(layout, _Tiled):
                self._whole[key] = self._tiled_region(layout, value.name, {}, cluster)
            else:
                self._whole[key] = self._sum(
                    [self.use(p, cluster) for p in layout.parts], value.name, cluster
                )
        return self._whole[key]

    def region(self, value: relax.Expr, axis: int, lo: int, hi: int, cluster: int) -> relax.Expr:
        """``value[lo:hi]`` along ``axis`` on ``cluster``, cut where its parts lie."""
        value = self.resolve(value)
        name = getattr(value, "name", "const")
        if isinstance(value, tvm.ir.expr.Constant):
            return self._constant_cut(value, {axis: (lo, hi)})
        if value in self.views:  # rearranged where it is read, then cut
            return self._slice(self.whole(value, cluster), axis, lo, hi, f"{name}_cut", cluster)
        layout = self.layout.get(value) if isinstance(value, relax.Var) else None
        if value in self.inputs:  # a model input, read where it is needed: its own part there
            own = zip(layout.parts, layout.bounds, layout.clusters, strict=True)
            part = next((p for p, span, c in own if (c, span) == (cluster, (lo, hi))), None)
            if axis == layout.axis and part is not None:
                return part
        if layout is None or value in self.inputs:
            return self._slice(self.use(value, cluster), axis, lo, hi, f"{name}_cut", cluster)
        if isinstance(layout, _Whole):  # cut once for every reader of the same rows
            return self.use(self._cut(layout.var, {axis: (lo, hi)}, f"{name}_cut",
                                      layout.cluster), cluster)
        if isinstance(layout, _Partial):
            return self._summed(layout.parts, layout.clusters, {axis: (lo, hi)}, name, cluster)
        if isinstance(layout, _Tiled):
            return self._tiled_region(layout, name, {axis: (lo, hi)}, cluster)
        return self._sharded_box(layout, name, {axis: (lo, hi)}, cluster)

    def _sharded_box(self, layout: _Sharded, name: str, box: dict[int, tuple[int, int]],
                     cluster: int) -> relax.Expr:
        """The region ``box`` (``{axis: (begin, end)}``, other axes whole) of a sharded value
        on ``cluster``: each part's share cut where it lies, along every axis of ``box``, and
        gathered along the sharded axis."""
        lo, hi = box.get(layout.axis, (0, layout.bounds[-1][1]))
        pieces = []
        for part, (begin, end), c in zip(layout.parts, layout.bounds, layout.clusters,
                                         strict=True):
            b, e = max(lo, begin), min(hi, end)
            if b < e:
                own = {**box, layout.axis: (b - begin, e - begin)}
                pieces.append(self._cut(part, own, f"{name}_cut", c))
        if len(pieces) == 1:
            return self.use(pieces[0], cluster)
        return self._gather(pieces, layout.axis, f"{name}_gathered", cluster)

    def _tiled_region(self, layout: _Tiled, name: str, box: dict[int, tuple[int, int]],
                      cluster: int) -> relax.Expr:
        """The region ``box`` (``{axis: (begin, end)}``, other axes whole) of a tiled value on
        ``cluster``: each band's slices cut where they lie and gathered along the channels,
        then the bands along the rows."""
        def within(axis: int, span: tuple[int, int]) -> tuple[int, int] | None:
            """The part of ``box`` along ``axis`` inside ``span``, relative to its start."""
            lo, hi = box.get(axis, span)
            lo, hi = max(lo, span[0]), min(hi, span[1])
            return (lo - span[0], hi - span[0]) if lo < hi else None

        n = len(layout.channels)
        row_axis, channel_axis = layout.row_axis, layout.channel_axis
        bands = []
        for i in _overlapping(layout.rows, box.get(row_axis)):
            rows = within(row_axis, layout.rows[i])
            if rows is None:
                continue
            cells = []
            for j in _overlapping(layout.channels, box.get(channel_axis)):
                slice_ = layout.channels[j]
                channels = within(channel_axis, slice_)
                if channels is None:
                    continue
                own = {**box, row_axis: rows, channel_axis: channels}
                p = i * n + j
                cells.append(self._cut(layout.parts[p], own, f"{name}_cut", layout.clusters[p]))
            bands.append(cells[0] if len(cells) == 1
                         else self._gather(cells, channel_axis, f"{name}_band", cluster))
        if len(bands) == 1:
            return self.use(bands[0], cluster)
        return self._gather(bands, row_axis, f"{name}_gathered", cluster)

    def _cut(self, var: relax.Var, box: dict[int, tuple[int, int]], name: str, cluster: int
             ) -> relax.Expr:
        """The region ``box`` of ``var`` (on ``cluster``), as one slice made once however many
        clusters read it."""
        shape = _shape(var)
        box = {axis: span for axis, span in sorted(box.items()) if span != (0, shape[axis])}
        if not box:
            return var
        key = (var, tuple(box.items()))
        if key not in self._cuts:
            self._cuts[key] = self.emit(relax.op.strided_slice(
                var, axes=list(box), begin=[b for b, _ in box.values()],
                end=[e for _, e in box.values()]), name, cluster)
        return self._cuts[key]

    def _operand_box(self, operand: relax.Expr, out_rank: int, box: dict[int, tuple[int, int]],
                     cluster: int) -> relax.Expr:
        """The part of an elementwise operand that the output region ``box`` reads (axes it
        broadcasts along are read whole)."""
        shape = static_shape(operand) or []
        own = {axis - (out_rank - len(shape)): span for axis, span in box.items()}
        own = {axis: span for axis, span in own.items() if axis >= 0 and shape[axis] != 1}
        if not own:
            return self.whole(operand, cluster)
        value = self.resolve(operand)
        layout = self.layout.get(value) if isinstance(value, relax.Var) else None
        if isinstance(layout, _Tiled):
            return self._tiled_region(layout, value.name, own, cluster)
        if isinstance(layout, _Sharded) and layout.axis in own and value not in self.inputs:
            return self._sharded_box(layout, value.name, own, cluster)
        (axis, (lo, hi)), *rest = own.items()
        piece = self.region(operand, axis, lo, hi, cluster)
        if isinstance(piece, tvm.ir.expr.Constant):
            return self._constant_cut(piece, dict(rest))
        return self._cut(piece, {other: span for other, span in rest},
                         f"{getattr(value, 'name', 'const')}_cut", cluster) if rest else piece

    def _constant_cut(self, value: tvm.ir.expr.Constant, box: dict[int, tuple[int, int]]
                      ) -> tvm.ir.expr.Constant:
        """The region ``box`` of a constant (:func:`_constant_box`), cut once however many
        parts read it (a bias slice read by every band of a 2-D split)."""
        key = (value, tuple(sorted(box.items())))
        if key not in self._constant_cuts:
            if value not in self._arrays:  # copied out once, not once per part
                self._arrays[value] = value.value.numpy()
            self._constant_cuts[key] = _constant_box(self._arrays[value], box,
                                                     str(value.ty.dtype))
        return self._constant_cuts[key]

    def _gather(self, pieces: list[relax.Var], axis: int, name: str, cluster: int) -> relax.Var:
        """``pieces`` concatenated along ``axis`` on ``cluster``, as one :data:`GATHER` call
        (opaque to FuseOps, as a marker is) instead of a marker per remote piece and a concat:
        a 64-way all-gather is 64 bindings, not 4096. Also when every piece is local (the
        bands of a tiled value, each gathered first): its kernel assembles in place too."""
        concat = relax.op.concat(pieces, axis=axis)
        ty = self.bb.normalize(concat).ty
        call = relax.op.call_pure_packed(GATHER, *pieces, relax.prim_value(axis),
                                         relax.prim_value(cluster), ty_args=ty)
        var = self.bb.emit_output(call, name)  # a Var, as a marker's (see use)
        self.cluster_of[var] = cluster
        return var

    def _slice(self, var: relax.Expr, axis: int, lo: int, hi: int, name: str, cluster: int
               ) -> relax.Expr:
        if (lo, hi) == (0, _shape(var)[axis]):
            return var
        return self.emit(
            relax.op.strided_slice(var, axes=[axis], begin=[lo], end=[hi]), name, cluster
        )

    def _summed(self, parts: Sequence[relax.Var], clusters: Sequence[int],
                box: dict[int, tuple[int, int]], name: str, cluster: int) -> relax.Expr:
        """The region ``box`` of partial sums ``parts`` (on ``clusters``) summed on
        ``cluster``: each part cut where it lies and sent."""
        return self._sum([self.use(self._cut(p, box, f"{name}{PARTIAL_SUM}_cut", c), cluster)
                          for p, c in zip(parts, clusters, strict=True)], name, cluster)

    def _sum(self, pieces: list[relax.Expr], name: str, cluster: int) -> relax.Expr:
        total = pieces[0]
        for piece in pieces[1:]:
            total = self.emit(relax.op.add(total, piece), f"{name}_sum", cluster)
        return total

    def reduce_scatter(self, value: relax.Var) -> _Sharded:
        """A partial value summed into parts sharded over its own clusters: along the channels
        of an NCHW tensor, else the last axis, unless the ops that follow it cannot follow that
        axis and can follow another (:meth:`_scatter_axis`). Around a ring of the clusters
        where the topology makes that cheaper (:func:`~tvm_chiplet.targets.collectives.
        reduce_ring`, :meth:`_ring_sums`), else every part sums the slices sent to it."""
        layout = self.layout[value]
        shape = _shape(layout.parts[0])
        axis = self._scatter_axis(value, shape)
        k = min(len(layout.clusters), shape[axis])
        bounds = tuple(even_bounds(shape[axis], k))
        clusters = layout.clusters[:k]
        ring = self._ring(layout.clusters) if k == len(layout.clusters) else None
        if ring is not None:
            parts = self._ring_sums(layout, axis, bounds, ring, value.name)
        else:
            parts = tuple(self.region(value, axis, b, e, c)
                          for (b, e), c in zip(bounds, clusters, strict=True))
        sharded = _Sharded(axis, bounds, parts, clusters)
        self.layout[value] = sharded
        return sharded

    def _ring(self, clusters: tuple[int, ...]) -> tuple[int, ...] | None:
        if self.topology is None or len(set(clusters)) != len(clusters):
            return None
        if clusters not in self._rings:
            self._rings[clusters] = reduce_ring(self.topology, clusters)
        return self._rings[clusters]

    def _ring_sums(self, layout: _Partial, axis: int, bounds: tuple[tuple[int, int], ...],
                   ring: tuple[int, ...], name: str) -> tuple[relax.Expr, ...]:
        """The parts of a reduce-scatter of ``layout`` around ``ring``: the slice ``j`` of
        every partial is summed on its way to ``layout.clusters[j]`` from both sides of the
        ring, each member adding its own slice to its neighbour's running sum and sending it
        on, so that only ring neighbours talk and each hop carries one slice per part. Emitted
        step by step over all parts (every member's first additions, then its second, ...), as
        a ring reduce-scatter runs."""
        k = len(ring)
        part_of = dict(zip(layout.clusters, layout.parts, strict=True))
        position = {c: i for i, c in enumerate(ring)}

        def piece(cluster: int, j: int) -> relax.Expr:
            b, e = bounds[j]
            return self._slice(part_of[cluster], axis, b, e, f"{name}{PARTIAL_SUM}_cut", cluster)

        sides = (((k - 1) // 2, -1), (k - 1 - (k - 1) // 2, 1))  # (members, direction)
        running: dict[tuple[int, int], relax.Expr] = {}
        for step in range(sides[1][0]):
            for j, c in enumerate(layout.clusters):
                for side, (length, direction) in enumerate(sides):
                    if step >= length:
                        continue
                    x = ring[(position[c] + direction * (length - step)) % k]
                    running[j, side] = piece(x, j) if step == 0 else self._sliced_add(
                        running[j, side], part_of[x], axis, bounds[j][0],
                        f"{name}{PARTIAL_SUM}_run", x)
        parts = []
        for j, c in enumerate(layout.clusters):
            total = self._sliced_add(running[j, 0], part_of[c], axis, bounds[j][0],
                                     f"{name}{PARTIAL_SUM if (j, 1) in running else ''}_sum", c)
            if (j, 1) in running:
                total = self._sliced_add(total, running[j, 1], axis, 0, f"{name}_sum", c)
            parts.append(total)
        return tuple(parts)

    def _sliced_add(self, total: relax.Expr, part: relax.Expr, axis: int, begin: int, name: str,
                    cluster: int) -> relax.Var:
        """``total + part[begin:begin + n]`` along ``axis`` (``n``: ``total``'s size there;
        ``part`` whole when the shapes match) on ``cluster``, as one :data:`SLICED_ADD` call:
        opaque to FuseOps, so neither operand needs a marker; a ring step is one binding, not
        a marker, a slice and an add."""
        call = relax.op.call_pure_packed(SLICED_ADD, total, part, relax.prim_value(axis),
                                         relax.prim_value(begin), relax.prim_value(cluster),
                                         ty_args=total.ty)
        var = self.bb.emit_output(call, name)  # a Var, as a marker's (see use)
        self.cluster_of[var] = cluster
        return var

    def _scatter_axis(self, value: relax.Var, shape: list[int]) -> int:
        """The axis to scatter ``value`` along: the preferred one (channels of an NCHW tensor,
        else the last), or else the first axis from the last whose consumers keep it
        (:meth:`_kept`, e.g. a layer norm after a residual add keeps the rows, not the last
        axis it normalises)."""
        rank = len(shape)
        preferred = 1 if rank == 4 else rank - 1
        for axis in (preferred, *range(rank - 1, -1, -1)):
            if shape[axis] > 1 and self._kept(value, axis, rank, depth=8):
                return axis
        return preferred

    def _op_users(self, var: relax.Var):
        """``(binding, call)`` of each binding that reads ``var`` in a call of an op."""
        for user in self.users.get(var, ()):
            call = user.value
            if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op):
                yield user, call

    def _kept(self, var: relax.Var, axis: int, rank: int, depth: int) -> bool:
        """Whether every consumer of ``var`` (sharded along ``axis``) can follow that layout,
        through chains of elementwise ops up to ``depth`` deep."""
        if depth == 0:
            return True
        for user, call in self._op_users(var):
            if user.var in self.splits or call.op.name in ("relax.matmul", "relax.split"):
                continue  # anchors cut what they read; activation matmuls follow or gather;
                # a split follows a sharded value (_follow_split)
            out = static_shape(user.var)
            if out is None or None in out:
                return False
            if elementwise(call):
                followed = axis + len(out) - rank
            elif call.op.name == "relax.reshape":
                continue
            elif rank == 4 and axis == _ROWS and (_reduced_rows(call) is not None or call.op.name
                                                  in ("relax.nn.pad", "relax.image.resize2d")):
                continue  # reduced, padded or resized band by band where the bands lie
            else:
                followed = self._followed_axis(call, axis, rank)
            if followed is None or not self._kept(user.var, followed, len(out), depth - 1):
                return False
        return True

    # -- model inputs --------------------------------------------------------------------------

    def shard_inputs(self, params: Sequence[relax.Var]) -> None:
        """Cut each model input that leads, through ops that keep one of its axes, to the rows
        of a split matmul (token ids through an embedding lookup, position embeddings and a
        layer norm, to the first layer's projections) into that matmul's row bands, each on
        its band's first member: the ops before it then run band by band where the bands are
        read, not whole on one cluster that scatters their result (BERT-base int8 batch 1 on
        the 16x16 mesh: the embeddings and their layer norm took 3.1 k cycles on one cluster,
        and cutting their output 1.5 k more, before the first layer's bands were sent)."""
        for param in params:
            shape = static_shape(param)
            if not shape or None in shape or any(u.var in self.splits
                                                 for u in self.users.get(param, ())):
                continue  # a split op reads it directly, each part its share where it runs
            for axis in range(len(shape) - 1, -1, -1):
                bands = self._leading_bands(param, axis, len(shape), depth=8) \
                    if shape[axis] > 1 else None
                if bands is None:
                    continue
                bounds, clusters = bands
                parts = tuple(self._slice(self.use(param, c), axis, b, e, f"{param.name}_cut", c)
                              for (b, e), c in zip(bounds, clusters, strict=True))
                self.layout[param] = _Sharded(axis, bounds, parts, clusters)
                self.inputs.add(param)
                break

    def _leading_bands(self, var: relax.Var, axis: int, rank: int, depth: int
                       ) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]] | None:
        """The row bands (bounds along ``axis`` of ``var``, one cluster each) of the first
        split matmul (in binding order) that reads ``var``'s ``axis`` as its rows, through
        ops that keep that axis, up to ``depth`` ops deep; None if there is none, or if an
        op on the way reads it along another axis (its rows there are not the matmul's)."""
        if depth == 0:
            return None
        for user, call in self._op_users(var):
            out = static_shape(user.var)
            if out is None or None in out:
                return None
            if user.var in self.splits:
                return self._row_bands(user.var, call, var, axis)
            name = call.op.name
            if elementwise(call):
                followed = axis + len(out) - rank
            elif name == "relax.take" and self.resolve(call.args[1]).same_as(var):
                followed = _looked_up_axis(call, axis)
            elif self.resolve(call.args[0]).same_as(var):
                followed = self._followed_axis(call, axis, rank)
            else:
                followed = None
            if followed is None:
                return None
            found = self._leading_bands(user.var, followed, len(out), depth - 1)
            if found is not None:
                return found
        return None

    def _row_bands(self, var: relax.Var, call: relax.Call, data: relax.Var, axis: int
                   ) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]] | None:
        """The row bands along ``axis`` of ``data`` that the split matmul ``var`` reads, each
        on its band's first member; None unless it is a matmul split by rows, or in tiles,
        reading ``data`` as its left operand with its rows on ``axis``."""
        dim, clusters = self.splits[var]
        if not (call.op.same_as(_MATMUL) and self.resolve(call.args[0]).same_as(data)
                and axis == len(_shape(data)) - 2):
            return None
        by = tiles_by(dim)
        if by is not None:
            band = len(clusters) // by
            return tuple(even_bounds(_shape(data)[axis], band)), clusters[::by]
        if dim != "rows":
            return None
        return tuple(even_bounds(_shape(data)[axis], len(clusters))), clusters

    # -- rules ---------------------------------------------------------------------------------

    def visit(self, binding: relax.VarBinding) -> None:
        var, value = binding.var, binding.value
        if isinstance(value, relax.Tuple):
            self.layout[var] = _TupleOf(tuple(value.fields))
            return
        if isinstance(value, relax.TupleGetItem):
            source = self.resolve(value.tuple_value)
            layout = self.layout.get(source) if isinstance(source, relax.Var) else None
            if isinstance(layout, _TupleOf):
                self.alias[var] = layout.fields[value.index]
                return
            if isinstance(source, relax.Tuple):
                self.alias[var] = source.fields[value.index]
                return
        if var in self.splits:
            self.layout[var] = self._anchor(var, value, *self.splits[var])
            return
        if self._view_of_input(value):
            self.views[var] = value
            return
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            layout = self._follow(var, value)
            if layout is not None:
                self.layout[var] = layout
                return
        cluster = self.placed.get(var)
        if cluster is None:
            cluster = self._where(value)
        rebuilt = _map_operands(value, lambda v: self.whole(v, cluster))
        self.layout[var] = _Whole(self.emit(rebuilt, var.name, cluster), cluster)

    def _view_of_input(self, value: relax.Expr) -> bool:
        """Whether ``value`` only rearranges a model input that has no layout (or such a
        rearrangement of one): :attr:`views`."""
        if not is_view(value):
            return False
        data = self.resolve(value.args[0])
        return isinstance(data, relax.Var) and (data in self.views or (
            data in self.params and data not in self.layout))

    def _where(self, value: relax.Expr) -> int:
        """Cluster holding most of ``value``'s operand bytes (the home cluster on ties)."""
        held: dict[int, int] = {}
        for v in relax.analysis.free_vars(value):
            layout = self.layout.get(v)
            if isinstance(layout, _Whole) and layout.cluster is not None:
                held[layout.cluster] = held.get(layout.cluster, 0) + _nbytes(v)
            elif isinstance(layout, (_Sharded, _Partial, _Tiled)):
                for part, c in zip(layout.parts, layout.clusters, strict=True):
                    held[c] = held.get(c, 0) + _nbytes(part)
        if not held:
            return self.home
        return max(held, key=lambda c: (held[c], c == self.home, -c))

    def _follow(self, var: relax.Var, call: relax.Call) -> _Sharded | _Tiled | _Whole | None:
        """The layout of ``call`` when it can follow a distributed operand's layout, else None."""
        name = call.op.name
        if name == "relax.concat":
            return self._follow_concat(var, call)
        if name == "relax.split":
            return self._follow_split(var, call)
        args = [self.resolve(a) for a in call.args]
        tensors = [a for a in args if isinstance(a, relax.Var)
                   and isinstance(self.layout.get(a), (_Whole, _Sharded, _Partial, _Tiled))]
        if not any(isinstance(self.layout[a], (_Sharded, _Partial, _Tiled)) for a in tensors):
            return None
        out = static_shape(var)
        if out is None or None in out:
            return None
        if name == "relax.nn.prelu":
            return self._follow_prelu(var, call, args)
        if elementwise(call):
            # The distributed operand in the most parts whose layout the ops after it keep (a
            # residual add of a stream split by channels and a block's output tiled by rows,
            # before a layer norm: the rows; of a layer's output tiled over the grid and its
            # input in a few row bands: the tiles), the first on ties, else the first
            # distributed one.
            spread = [a for a in tensors
                      if isinstance(self.layout[a], (_Sharded, _Partial, _Tiled))]
            kept = max((a for a in spread if self._stays_distributed(var, a, len(out))),
                       key=lambda a: len(self.layout[a].parts),
                       default=None) if len(spread) > 1 else None
            source = spread[0] if kept is None else kept
            layout = self.layout[source]
            # Every operand was asked already when there are several: none is kept.
            if self._gather_is_cheaper(var, call, tensors) and kept is None and (
                    len(spread) > 1 or not self._stays_distributed(var, source, len(out))):
                return None
            if isinstance(layout, _Tiled):
                return self._follow_tiles(var, call, args, layout, source)
            if isinstance(layout, _Partial):
                layout = self.reduce_scatter(source)
            axis = layout.axis + len(out) - len(_shape(source))
            if _shape(source)[layout.axis] != out[axis]:
                return None
            return self._parts(var, call, args, axis, layout.bounds, layout,
                               lambda a, b, e, c: self._operand_region(a, len(out), axis, b, e, c))
        if name == "relax.strided_slice":
            return self._follow_slice(var, call, args[0])
        indices = args[1] if name == "relax.take" else None
        if isinstance(self.layout.get(indices), _Sharded) and not (
                isinstance(args[0], relax.Var) and args[0] in tensors):
            # A lookup of sharded indices in a whole table (an embedding's token ids): each
            # part looks up its share of the indices.
            layout = self.layout[indices]
            axis = _looked_up_axis(call, layout.axis)
            return self._parts(var, call, args, axis, layout.bounds, layout, lambda a, b, e, c: (
                self.region(a, layout.axis, b, e, c) if a.same_as(indices) else self.whole(a, c)))
        tiled = self.layout.get(args[0])
        if isinstance(tiled, _Sharded) and tiled.axis == _ROWS and len(_shape(args[0])) == 4:
            # Row bands (a row split's output, a concat of such): pooled or reduced band by
            # band, as a 2-D split's tiles of one channel slice.
            bands = _Tiled(tiled.bounds, ((0, _shape(args[0])[_CHANNELS]),), tiled.parts,
                           tiled.clusters)
            if name in _BAND_OPS:
                done = getattr(self, _BAND_OPS[name])(var, call, args[0], bands)
                return None if done is None else _Sharded(_ROWS, done.rows, done.parts,
                                                          done.clusters)
            if _reduced_rows(call) is not None:
                reduced = self._reduce_tiles(var, call, args[0], bands)
                return _Whole(reduced.parts[0], reduced.clusters[0])  # one channel slice
        if isinstance(tiled, _Tiled) and tiled.nchw:
            if name in _BAND_OPS:
                return getattr(self, _BAND_OPS[name])(var, call, args[0], tiled)
            if _reduced_rows(call) is not None:
                return self._reduce_tiles(var, call, args[0], tiled)
        if isinstance(tiled, _Tiled) and name != "relax.matmul":
            kept = self._follow_tile_axes(var, call, args, args[0])
            if kept is not None:
                return kept
            rows = self._follow_tile_rows(var, call, args, args[0])
            if rows is not None or name != "relax.reshape":
                return rows
        elif isinstance(tiled, _Tiled):
            return self._follow_tiled_matmul(var, call, args, args[0])
        elif any(isinstance(self.layout[a], _Tiled) for a in tensors):
            return None  # read whole, gathered where the op runs
        if name == "relax.matmul":
            return self._follow_matmul(var, call, args, len(out))
        data = args[0]
        if not (isinstance(data, relax.Var) and data in tensors):
            return None
        layout = self.layout[data]
        if isinstance(layout, _Whole):
            return None
        if isinstance(layout, _Partial):
            layout = self.reduce_scatter(data)
        if isinstance(layout, _Tiled):
            # A reshape that does not keep the rows (a matmul's columns read as attention's
            # heads) reads the value as sharded along its channels over the first band's
            # members, each gathering its slice from every band (a region of the tiles).
            n = len(layout.channels)
            layout = _Sharded(layout.channel_axis, layout.channels, layout.parts[:n],
                              layout.clusters[:n])
        rank = len(_shape(data))
        if name == "relax.reshape":
            mapped = _reshape_bounds(_shape(data), layout.axis, layout.bounds, out)
            if mapped is None:
                # Parts that cut through an output row (768 channels in 16 parts of 48, read
                # as 12 heads of 64) are re-cut at whole rows over the same clusters: each part
                # fetches its rows from the one or two parts holding them, not a gather.
                aligned = _aligned_bounds(_shape(data), layout.axis, len(layout.bounds), out)
                if aligned is None:
                    return None
                cut, (axis, bounds) = aligned
                layout = _Sharded(layout.axis, cut, layout.parts[:len(cut)],
                                  layout.clusters[:len(cut)])
            else:
                axis, bounds = mapped
        else:
            axis, bounds = self._followed_axis(call, layout.axis, rank), layout.bounds
            if axis is None and name == "relax.nn.layer_norm":
                return self._norm_across_parts(var, call, args, layout)
            if axis is None and name == "relax.take":
                return self._take_from_part(var, call, args, layout)
            if axis is None:
                return None
        return self._parts(var, call, args, axis, bounds, layout, lambda a, b, e, c: (
            self.region(a, layout.axis, b, e, c) if a.same_as(data) else self.whole(a, c)))

    def _take_from_part(self, var: relax.Var, call: relax.Call, args: list[relax.Expr],
                        layout: _Sharded) -> _Whole | None:
        """A take of constant indices along the sharded axis that all lie in one part (a
        classifier's class token, ``x[:, 0]``): taken on that part's cluster, from it alone,
        where the whole value was gathered for it before. None (gathered) for indices in
        several parts."""
        indices = args[1]
        if not isinstance(indices, tvm.ir.expr.Constant) or call.attrs.axis is None:
            return None
        wanted = indices.value.numpy()
        if not wanted.size or wanted.min() < 0 or wanted.max() >= _shape(args[0])[layout.axis]:
            return None  # the op's mode says what such indices read
        for (b, e), part, c in zip(layout.bounds, layout.parts, layout.clusters, strict=True):
            if b <= wanted.min() and wanted.max() < e:
                local = relax.const(wanted - b, str(indices.ty.dtype))
                taken = relax.op.take(part, local, axis=layout.axis, mode=call.attrs.mode)
                return _Whole(self.emit(taken, var.name, c), c)
        return None

    def _norm_across_parts(self, var: relax.Var, call: relax.Call, args: list[relax.Expr],
                           layout: _Sharded) -> _Sharded:
        """A layer norm over the axis its input is sharded along (features cut by a matmul's
        columns), part by part where they lie: each part sums its share of every normalised
        row, the sums are added on the first part's cluster and the mean sent back; then the
        same for the squared deviations from it (two passes, exact as one pass of sums of
        squares is not). Only one value per normalised row crosses a link each way, not the
        tensor; each part scales and shifts by its own features' gamma and beta."""
        data, gamma, beta = args
        shape = _shape(data)
        axes = sorted(int(a) % len(shape) for a in call.attrs.axes)
        own = axes.index(layout.axis)  # gamma and beta span the normalised axes
        dtype = str(var.ty.dtype)
        count = int(np.prod([shape[a] for a in axes]))
        home = layout.clusters[0]
        # The parts as the bands of one slice: their sums added on the first part's cluster.
        bands = _Tiled(layout.bounds, ((0, 1),), layout.parts, layout.clusters)

        def across(values: list[relax.Expr]) -> relax.Var:
            return self._combine_bands(var, bands, values, relax.op.add, count)[0]

        mean = across([relax.op.sum(part, axis=axes, keepdims=True) for part in layout.parts])
        deviations = [self.emit(relax.op.subtract(part, self.use(mean, c)), f"{var.name}_dev{p}",
                                c)
                      for p, (part, c) in enumerate(zip(layout.parts, layout.clusters,
                                                        strict=True))]
        variance = across([relax.op.sum(relax.op.square(d), axis=axes, keepdims=True)
                           for d in deviations])
        scale = self.emit(relax.op.rsqrt(relax.op.add(
            variance, relax.const(float(call.attrs.epsilon), dtype))), f"{var.name}_rstd", home)
        parts = []
        for p, ((b, e), d, c) in enumerate(zip(layout.bounds, deviations, layout.clusters,
                                               strict=True)):
            normed = relax.op.multiply(relax.op.multiply(d, self.use(scale, c)),
                                       self.region(gamma, own, b, e, c))
            parts.append(self.emit(relax.op.add(normed, self.region(beta, own, b, e, c)),
                                   f"{var.name}_p{p}", c))
        return dataclasses.replace(layout, parts=tuple(parts))

    def _follow_prelu(self, var: relax.Var, call: relax.Call, args: list[relax.Expr]
                      ) -> _Sharded | _Tiled | None:
        """A PReLU of a sharded or tiled value: elementwise, with one slope per channel along its
        ``axis``. Each part reads the slopes of its own channels, or all of them when the value
        is split along another axis."""
        data, slopes = args
        layout = self.layout.get(data) if isinstance(data, relax.Var) else None
        if not isinstance(layout, (_Sharded, _Tiled)):
            return None
        axis = int(call.attrs.axis) % len(_shape(data))

        def own(span: tuple[int, int] | None, cluster: int) -> relax.Expr:
            if span is None:
                return self.whole(slopes, cluster)
            return self.region(slopes, 0, *span, cluster)

        if isinstance(layout, _Tiled):
            return self._per_tile(var, call, layout, lambda p, c: [
                layout.parts[p], own(layout.box(p).get(axis), c)])
        return self._parts(var, call, args, layout.axis, layout.bounds, layout,
                           lambda a, b, e, c: self.region(a, layout.axis, b, e, c)
                           if a.same_as(data) else own((b, e) if layout.axis == axis else None, c))

    def _follow_split(self, var: relax.Var, call: relax.Call) -> _TupleOf | None:
        """A split of a sharded value, part by part where it lies (a GPT-2 block's query, key
        and value cut from one projection split by its columns), or of a tiled one re-cut along
        its rows (:meth:`_tile_rows`); None for other layouts (the split then runs whole on one
        cluster). Along another axis, each part splits its own
        piece; along the sharded axis, each section keeps the parts that overlap it, cut to
        it. Each field of the result is a value of its own with that layout."""
        data = self.resolve(call.args[0])
        layout = self.layout.get(data) if isinstance(data, relax.Var) else None
        if isinstance(layout, _Partial):
            layout = self.reduce_scatter(data)
        if isinstance(layout, _Tiled) and isinstance(var.ty, tvm.ir.TupleType):
            # Tiles (a rotary embedding's halves of a 2-D split projection): re-cut along their
            # rows inside each band, then split row by row.
            layout = self._tile_rows(data, layout)
        if not isinstance(layout, _Sharded) or not isinstance(var.ty, tvm.ir.TupleType):
            return None
        axis = int(call.attrs.axis) % len(_shape(data))
        fields = [relax.Var(f"{var.name}_{i}", ty) for i, ty in enumerate(var.ty.fields)]
        if axis != layout.axis:
            pieces = [self.emit(relax.Call(call.op, [part], call.attrs), f"{var.name}_p{p}", c)
                      for p, (part, c) in enumerate(zip(layout.parts, layout.clusters,
                                                        strict=True))]
            for i, field in enumerate(fields):
                parts = tuple(self.emit(relax.TupleGetItem(piece, i), f"{field.name}_p{p}", c)
                              for p, (piece, c) in enumerate(zip(pieces, layout.clusters,
                                                                 strict=True)))
                self.layout[field] = _Sharded(layout.axis, layout.bounds, parts,
                                              layout.clusters)
            return _TupleOf(tuple(fields))
        begin = 0
        for field in fields:
            end = begin + _shape(field)[axis]
            bounds, parts, clusters = [], [], []
            for (b, e), part, c in zip(layout.bounds, layout.parts, layout.clusters,
                                       strict=True):
                lo, hi = max(b, begin), min(e, end)
                if lo < hi:
                    parts.append(self._slice(part, axis, lo - b, hi - b,
                                             f"{field.name}_p{len(parts)}", c))
                    bounds.append((lo - begin, hi - begin))
                    clusters.append(c)
            self.layout[field] = _Sharded(axis, tuple(bounds), tuple(parts), tuple(clusters))
            begin = end
        return _TupleOf(tuple(fields))

    def _follow_concat(self, var: relax.Var, call: relax.Call) -> _Sharded | _Tiled | None:
        """A concat of distributed values (a Fire or Inception module's branches, a U-Net's
        skip), without gathering them; None when no input is distributed, or when they lie
        in layouts it cannot join (the concat then runs whole on one cluster):

        - inputs sharded along the axis it joins (channels of output-channel splits), or tiled
          in the same row bands and joined along their channels: no op at all, the output's
          parts are the inputs' parts, their spans shifted (a cluster may hold several);
        - else one concat per part of the largest input split along another axis (the rows of
          row splits; a tiled input re-cut along its rows), where it lies, reading the same
          share of every input from wherever it lies."""
        fields = self.resolve(call.args[0])
        if isinstance(fields, relax.Var) and isinstance(self.layout.get(fields), _TupleOf):
            fields = relax.Tuple(self.layout[fields].fields)
        if not isinstance(fields, relax.Tuple):
            return None
        fields = [self.resolve(f) for f in fields.fields]
        layouts = [self.layout.get(f) if isinstance(f, relax.Var) else None for f in fields]
        out = static_shape(var)
        if (out is None or None in out
                or not any(isinstance(lay, (_Sharded, _Partial, _Tiled)) for lay in layouts)):
            return None
        layouts = [self.reduce_scatter(f) if isinstance(lay, _Partial) else lay
                   for f, lay in zip(fields, layouts, strict=True)]
        axis = int(call.attrs.axis) % len(out)
        sizes = [_shape(f)[axis] for f in fields]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        first = layouts[0]
        if all(isinstance(lay, _Tiled) and axis == lay.channel_axis
               and (lay.rows, lay.row_axis) == (first.rows, first.row_axis) for lay in layouts):
            channels, parts, clusters = [], [], []
            for i in range(len(first.rows)):
                for lay in layouts:
                    n = len(lay.channels)
                    parts += lay.parts[i * n:(i + 1) * n]
                    clusters += lay.clusters[i * n:(i + 1) * n]
            for lay, offset in zip(layouts, offsets, strict=False):
                channels += [(b + offset, e + offset) for b, e in lay.channels]
            return _Tiled(first.rows, tuple(channels), tuple(parts), tuple(clusters),
                          first.row_axis, first.channel_axis)
        if all(isinstance(lay, _Sharded) and lay.axis == axis for lay in layouts):
            bounds, parts, clusters = [], [], []
            for lay, offset in zip(layouts, offsets, strict=False):
                bounds += [(b + offset, e + offset) for b, e in lay.bounds]
                parts += lay.parts
                clusters += lay.clusters
            return _Sharded(axis, tuple(bounds), tuple(parts), tuple(clusters))
        # Else one concat per part of the largest input split along another axis (a tiled one
        # re-cut along its rows), each reading the same share of every input wherever it lies:
        # a U-Net's skip (row bands) joined to an upsampling split by channels exchanges
        # shares, where gathering both whole on one cluster funnels every byte through it.
        shares = []
        for f, lay in zip(fields, layouts, strict=True):
            if isinstance(lay, _Tiled) and lay.row_axis != axis:
                lay = self._tile_rows(f, lay)
            if isinstance(lay, _Sharded) and lay.axis != axis:
                shares.append((-_nbytes(f), len(shares), lay))
        if not shares:
            return None
        first = min(shares)[2]
        parts = []
        for p, ((b, e), c) in enumerate(zip(first.bounds, first.clusters, strict=True)):
            pieces = [self.region(f, first.axis, b, e, c) for f in fields]
            parts.append(self.emit(relax.op.concat([self.use(piece, c) for piece in pieces],
                                                   axis=axis), f"{var.name}_p{p}", c))
        return _Sharded(first.axis, first.bounds, tuple(parts), first.clusters)

    def _follow_slice(self, var: relax.Var, call: relax.Call, data: relax.Expr
                      ) -> _Sharded | _Tiled | None:
        """A strided slice of a sharded or tiled value (the pixels a strided 1x1 conv reads:
        SliceStridedConvs; an LSTM's gates): each part slices its own elements where it lies, a
        part along a sliced axis keeping its own terms of the progression (parts left with none
        drop out). None, to gather it, for a slice along a tiled value's channels, of a partial
        sum, or with no terms."""
        slices = _slice_spec(call, len(_shape(data)))
        layout = self.layout.get(data)
        if slices is None or not isinstance(layout, (_Sharded, _Tiled)):
            return None
        cut = layout.axis if isinstance(layout, _Sharded) else layout.row_axis
        if isinstance(layout, _Tiled) and layout.channel_axis in slices:
            return None
        self._sliced[var] = (data, call)

        def piece(part: relax.Var, cluster: int, span: tuple[int, int]):
            """``part`` (holding ``span`` of the cut axis) sliced, and its output span."""
            local, out = dict(slices), span
            if cut in slices:
                begin, end, stride = slices[cut]
                start = max(span[0], begin)  # the progression's first term in the span
                first = begin + -(-(start - begin) // stride) * stride
                last = min(span[1], end)
                if first >= last:
                    return None
                local[cut] = (first - span[0], last - span[0], stride)
                out = ((first - begin) // stride, (last - begin - 1) // stride + 1)
            axes = sorted(local)
            sliced = relax.op.strided_slice(
                part, axes=axes, begin=[local[a][0] for a in axes],
                end=[local[a][1] for a in axes], strides=[local[a][2] for a in axes])
            return self.emit(sliced, f"{var.name}_p{cluster}", cluster), out

        if isinstance(layout, _Sharded):
            kept = [(done, c) for part, c, span in zip(layout.parts, layout.clusters,
                                                       layout.bounds, strict=True)
                    if (done := piece(part, c, span)) is not None]
            if not kept:
                return None
            return _Sharded(cut, tuple(out for (_, out), _ in kept),
                            tuple(p for (p, _), _ in kept), tuple(c for _, c in kept))
        n = len(layout.channels)
        rows, parts, clusters = [], [], []
        for i, band in enumerate(layout.rows):
            done = [piece(layout.parts[p], layout.clusters[p], band)
                    for p in range(i * n, i * n + n)]
            if done[0] is None:
                continue
            rows.append(done[0][1])
            parts += [p for p, _ in done]
            clusters += layout.clusters[i * n:i * n + n]
        if not rows:
            return None
        return dataclasses.replace(layout, rows=tuple(rows), parts=tuple(parts),
                                   clusters=tuple(clusters))

    def _follow_tiles(self, var: relax.Var, call: relax.Call, args: list[relax.Expr],
                      layout: _Tiled, source: relax.Var) -> _Tiled | None:
        """An elementwise op following a tiled operand: one call per tile, each reading its
        region of every operand (the tile itself of an operand tiled alike)."""
        out, shape = _shape(var), _shape(source)
        if len(out) != len(shape) or any(out[a] != shape[a]
                                         for a in (layout.row_axis, layout.channel_axis)):
            return None
        return self._per_tile(var, call, layout, lambda p, c: [
            self._operand_box(a, len(out), layout.box(p), c)
            if isinstance(a, (relax.Var, tvm.ir.expr.Constant)) else a for a in args])

    def _per_tile(self, var: relax.Var, call: relax.Call, layout: _Tiled, operands,
                  row_axis: int | None = None, channel_axis: int | None = None) -> _Tiled:
        """``call`` once per tile of ``layout``, on the tile's cluster, with the operands
        ``operands(p, cluster)`` of tile ``p``: the output tiled alike, its rows and channels
        on ``row_axis`` and ``channel_axis`` (default: the same axes)."""
        parts = tuple(self.emit(relax.Call(call.op, operands(p, c), call.attrs, call.ty_args),
                                f"{var.name}_p{p}", c)
                      for p, c in enumerate(layout.clusters))
        return dataclasses.replace(
            layout, parts=parts,
            row_axis=layout.row_axis if row_axis is None else row_axis,
            channel_axis=layout.channel_axis if channel_axis is None else channel_axis)

    def _follow_tile_axes(self, var: relax.Var, call: relax.Call, args: list[relax.Expr],
                          data: relax.Var) -> _Tiled | None:
        """An op that keeps both a tiled operand's rows and its channels (a transpose, a
        softmax over another axis) follows it tile by tile; a reshape of the axes after the
        rows that splits the channels into heads or merges heads back (attention's
        ``[.., 768] <-> [.., 12, 64]``) too (:meth:`_reshape_tiles`). None otherwise."""
        layout = self.layout[data]
        if call.op.name == "relax.reshape":
            return self._reshape_tiles(var, data, layout)
        shape, out = _shape(data), _shape(var)
        row_axis = self._followed_axis(call, layout.row_axis, len(shape))
        channel_axis = self._followed_axis(call, layout.channel_axis, len(shape))
        if row_axis is None or channel_axis is None or any(
                isinstance(self.layout.get(a), (_Sharded, _Partial, _Tiled))
                for a in args[1:]):
            return None
        if any(out[axis] != shape[source] for axis, source in (
                (row_axis, layout.row_axis), (channel_axis, layout.channel_axis))):
            return None
        if call.op.name == "relax.broadcast_to":
            return self._per_tile(var, call, layout, lambda p, c: [
                layout.parts[p], _broadcast_part(call, layout.parts[p])], row_axis, channel_axis)
        return self._per_tile(var, call, layout, lambda p, c: [layout.parts[p]] + [
            self.whole(a, c) if isinstance(a, relax.Var) else a for a in args[1:]],
            row_axis, channel_axis)

    def _reshape_tiles(self, var: relax.Var, data: relax.Var, layout: _Tiled) -> _Tiled | None:
        """A reshape of a tiled value that only inserts or removes unit axes (torch's
        sequence-first ``[tokens, 1, 768]``: :meth:`_reshape_unit_axes`), or that keeps its rows
        and the axes between them and the channels, and turns each channel slice into whole
        rows of one output axis (heads of 64 columns merged back into 768): each tile reshaped
        where it lies. When the slices cut through those rows (768 columns in slices of 24,
        read as 12 heads of 64), each band's slices are re-cut at whole rows (at most one group
        of rows per slice), each group on the member holding its first columns, fetching the
        rest from the next one or two slices of its band: attention then runs on every band's
        members, its heads by its rows, not on one cluster per head."""
        shape, out = _shape(data), _shape(var)
        row_axis, channel_axis = layout.row_axis, layout.channel_axis
        kept = [a for a, size in enumerate(shape) if size != 1]
        if [shape[a] for a in kept] == [size for size in out if size != 1]:
            return self._reshape_unit_axes(var, layout, dict(zip(
                kept, (a for a, size in enumerate(out) if size != 1), strict=True)))
        if not row_axis < channel_axis or shape[row_axis] == 1:
            return None
        n = len(layout.channels)
        mapped = _reshape_bounds(shape, channel_axis, layout.channels, out)
        if mapped is not None:
            axis, channels = mapped
            recut = None
        else:
            aligned = _aligned_bounds(shape, channel_axis, n, out)
            if aligned is None:
                return None
            recut, (axis, channels) = aligned
        # The axes before the channels are kept but for unit ones (torch's sequence-first
        # [tokens, 1, heads, 64] merged into [tokens, 768]): the rows are the same output axis.
        lead = [a for a in range(channel_axis) if shape[a] != 1]
        out_lead = [a for a in range(axis) if out[a] != 1]
        if [shape[a] for a in lead] != [out[a] for a in out_lead]:
            return None
        out_rows = out_lead[lead.index(row_axis)]
        # Each group on the member holding the first of its channels: the groups spread over
        # the band as the slices do, and each reads most of its channels where it runs.
        starts = list(range(len(channels))) if recut is None else [
            next(s for s, (_, end) in enumerate(layout.channels) if lo < end) for lo, _ in recut]
        if len(set(starts)) < len(starts):
            starts = list(range(len(channels)))
        parts, clusters = [], []
        for i, band in enumerate(layout.rows):
            for j, slice_ in enumerate(channels):
                p, c = i * n + starts[j], layout.clusters[i * n + starts[j]]
                piece = layout.parts[p] if recut is None else self._tiled_region(
                    layout, data.name, {row_axis: band, channel_axis: recut[j]}, c)
                part_shape = list(out)
                part_shape[out_rows] = band[1] - band[0]
                part_shape[axis] = slice_[1] - slice_[0]
                parts.append(self.emit(relax.op.reshape(piece, part_shape),
                                       f"{var.name}_p{len(parts)}", c))
                clusters.append(c)
        return _Tiled(layout.rows, tuple(channels), tuple(parts), tuple(clusters), out_rows,
                      axis)

    def _reshape_unit_axes(self, var: relax.Var, layout: _Tiled, place: dict[int, int]
                           ) -> _Tiled:
        """A reshape of ``layout`` that inserts or removes unit axes only, each tile reshaped
        where it lies; ``place``: each axis of more than one element -> its output axis."""
        rows, channels = place[layout.row_axis], place[layout.channel_axis]
        parts = []
        for p, (part, c) in enumerate(zip(layout.parts, layout.clusters, strict=True)):
            part_shape = _shape(var)
            for axis, (b, e) in layout.box(p).items():
                part_shape[place[axis]] = e - b
            parts.append(self.emit(relax.op.reshape(part, part_shape), f"{var.name}_p{p}", c))
        return dataclasses.replace(layout, parts=tuple(parts), row_axis=rows,
                                   channel_axis=channels)

    def _follow_tiled_matmul(self, var: relax.Var, call: relax.Call, args: list[relax.Expr],
                             left: relax.Var) -> _Tiled | None:
        """A matmul of activations whose left operand is tiled by its rows and a batch axis
        (attention's scores and context over query bands by heads): each tile multiplies its
        rows by its heads of the right operand, fetched whole along the other axes (the keys
        or values of its heads, from every band); None for other tilings."""
        layout = self.layout[left]
        a, out = _shape(left), _shape(var)
        if (any(isinstance(arg, tvm.ir.expr.Constant) for arg in args) or len(a) < 3
                or len(_shape(args[1])) < 2 or layout.row_axis != len(a) - 2
                or layout.channel_axis >= len(a) - 2):
            return None
        rank = len(out)
        row_axis, channel_axis = (axis + rank - len(a) for axis in (layout.row_axis,
                                                                     layout.channel_axis))
        n = len(layout.channels)
        return self._per_tile(var, call, layout, lambda p, c: [layout.parts[p], self._operand_box(
            args[1], rank, {channel_axis: layout.channels[p % n]}, c)], row_axis, channel_axis)

    def _follow_tile_rows(self, var: relax.Var, call: relax.Call, args: list[relax.Expr],
                          data: relax.Var) -> _Sharded | None:
        """An op that keeps a tiled operand's rows but reads every channel of them (a layer
        norm over a matmul's columns): the operand re-cut along its rows over the same
        clusters (:meth:`_tile_rows`), the op following that part by part; None when the op
        does not keep the rows."""
        layout = self.layout[data]
        axis = self._followed_axis(call, layout.row_axis, len(_shape(data)))
        if axis is None:
            return None
        rows = self._tile_rows(data, layout)
        pieces = dict(zip(zip(rows.bounds, rows.clusters, strict=True), rows.parts, strict=True))
        return self._parts(var, call, args, axis, rows.bounds, rows, lambda a, b, e, c: (
            pieces[(b, e), c] if a.same_as(data) else self.whole(a, c)))

    def _tile_rows(self, value: relax.Var, layout: _Tiled) -> _Sharded:
        """``value`` (tiled as ``layout``) sharded along its rows over the same clusters, made
        once: each band's rows shared among the first of the band's members (at least
        :data:`SHARE_ROWS` rows each, more past :data:`RECUT_TILES` tiles, where the band has
        that many), each fetching its rows from every slice of its band (an all-to-all inside
        each band)."""
        if value not in self._by_rows:
            n = len(layout.channels)
            least = SHARE_ROWS * -(-len(layout.parts) // RECUT_TILES)
            bounds, parts, clusters = [], [], []
            for i, (begin, end) in enumerate(layout.rows):
                # A band of a concat's tiles holds several slices per member.
                members = list(dict.fromkeys(layout.clusters[i * n:(i + 1) * n]))
                shares = even_bounds(end - begin,
                                     max(1, min(len(members), (end - begin) // least)))
                for (lo, hi), c in zip(shares, members[:len(shares)], strict=True):
                    rows = (begin + lo, begin + hi)
                    bounds.append(rows)
                    parts.append(self._tiled_region(layout, value.name,
                                                    {layout.row_axis: rows}, c))
                    clusters.append(c)
            self._by_rows[value] = _Sharded(layout.row_axis, tuple(bounds), tuple(parts),
                                            tuple(clusters))
        return self._by_rows[value]

    def _pool_tiles(self, var: relax.Var, call: relax.Call, data: relax.Var, layout: _Tiled
                    ) -> _Tiled | None:
        """A max or average pool (NCHW) of ``data`` tiled as ``layout``, tile by tile: each
        part pools its band of output rows from its band of input rows and the halo, in its
        channels, as a row split's convolution reads them (padding rows only at the input's
        edges, as the pool's own). In ceil mode, the last window's rows and columns past the
        input are padding too: each part pools in floor mode with that much more padding,
        which a max and an average without padding in its count ignore; an average counting
        its padding is then not followed (gathered). With fewer output rows than bands (a
        VGG's last pool of 7 rows over 8 bands), the first bands' members pool one row each."""
        attrs = call.attrs
        out, (height, width) = _shape(var), _shape(data)[_ROWS:]
        if str(attrs.layout) != "NCHW":
            return None
        top, left, bottom, right = (int(p) for p in attrs.padding)
        stride, dilation = int(attrs.strides[0]), int(attrs.dilation[0])
        extent = (int(attrs.pool_size[0]) - 1) * dilation + 1
        extent_w = (int(attrs.pool_size[1]) - 1) * int(attrs.dilation[1]) + 1
        overhang = max(right, (out[_ROWS + 1] - 1) * int(attrs.strides[1]) + extent_w - width
                       - left)
        average = call.op.name == "relax.nn.avg_pool2d"
        counted = average and bool(attrs.count_include_pad)
        rows = self._centred(layout.rows, out[_ROWS], stride, top, extent, height) or tuple(
            even_bounds(out[_ROWS], min(len(layout.rows), out[_ROWS])))
        bands = [_band_rows(b, e, stride, extent, top, height) for b, e in rows]
        if counted and (overhang > right or bands[-1][1][1] > bottom):
            return None
        n = len(layout.channels)
        clusters = layout.clusters[:len(rows) * n]
        parts = []
        for p, c in enumerate(clusters):
            read, (pad_top, pad_bottom) = bands[p // n]
            piece = self._tiled_region(layout, data.name,
                                       {_ROWS: read, _CHANNELS: layout.channels[p % n]}, c)
            options = {"pool_size": attrs.pool_size, "strides": attrs.strides,
                       "padding": [pad_top, left, pad_bottom, overhang],
                       "dilation": attrs.dilation, "layout": "NCHW"}
            pool = (relax.op.nn.avg_pool2d(piece, count_include_pad=counted, **options)
                    if average else relax.op.nn.max_pool2d(piece, **options))
            parts.append(self.emit(pool, f"{var.name}_p{p}", c))
        return dataclasses.replace(layout, rows=rows, parts=tuple(parts), clusters=clusters)

    def _resize_tiles(self, var: relax.Var, call: relax.Call, data: relax.Var, layout: _Tiled
                      ) -> _Tiled | None:
        """A ``resize2d`` (NCHW) of ``data`` tiled as ``layout`` (an FPN's or a U-Net's
        upsampling), band by band. One that scales the rows by a whole factor ``r`` in a
        coordinate mode that shifts with the bands (half-pixel, asymmetric): each part resizes
        its band of input rows with the halo the method reads (one row, two for cubic) and keeps
        its own band of output rows, ``r`` times its input's (nearest only by a power of two,
        whose source rows float32 computes exactly, and without ties to round to the even
        row). Any other linear resize (one aligning the corners, or by no whole factor): each
        part resizes its band's input rows along the columns only, then weighs them into its
        output rows by its rows of the resize's interpolation matrix
        (:func:`~.resize_rows.linear_rows`). Else None (gathered)."""
        attrs = call.attrs
        height, out_height = _shape(data)[_ROWS], _shape(var)[_ROWS]
        size, method = call.args[1], str(attrs.method)
        mode = str(attrs.coordinate_transformation_mode)
        if str(attrs.layout) != "NCHW" or not isinstance(size, relax.ShapeExpr):
            return None
        scale = 0 if out_height % height else out_height // height
        nearest = method == "nearest_neighbor"
        if not scale or mode not in _SHIFTED_RESIZES or method not in _RESIZE_HALO or (
                nearest and scale & (scale - 1)) or (
                nearest and str(attrs.rounding_method) == "round"
                and resize_rows.rounds_ties(height, out_height, mode)):
            if method == "linear" and mode in resize_rows.LINEAR_MODES:
                return self._interpolate_tiles(var, call, data, layout)
            return None
        halo, width = _RESIZE_HALO[method], size.values[1]
        n = len(layout.channels)
        parts = []
        for p, c in enumerate(layout.clusters):
            begin, end = layout.rows[p // n]
            lo, hi = max(begin - halo, 0), min(end + halo, height)
            piece = self._tiled_region(layout, data.name,
                                       {_ROWS: (lo, hi), _CHANNELS: layout.channels[p % n]}, c)
            resized = self.emit(relax.Call(call.op, [piece, relax.ShapeExpr(
                [scale * (hi - lo), width])], attrs), f"{var.name}_p{p}", c)
            parts.append(self._slice(resized, _ROWS, scale * (begin - lo), scale * (end - lo),
                                     f"{var.name}_band{p}", c))
        return dataclasses.replace(layout, rows=tuple((scale * b, scale * e)
                                                      for b, e in layout.rows),
                                   parts=tuple(parts))

    def _pad_tiles(self, var: relax.Var, call: relax.Call, data: relax.Var, layout: _Tiled
                   ) -> _Tiled | None:
        """An ``nn.pad`` (constant or reflecting) of ``data`` tiled as ``layout`` along its rows
        and columns, tile by tile: every tile pads its columns, the first band's its top rows
        and the last band's its bottom rows. A band thinner than the rows it reflects reads the
        rows it mirrors from the bands below (or above) it, then keeps its own. Padding the
        batch or the channels, cropping (a negative width) or another mode is not followed
        (gathered)."""
        attrs = call.attrs
        widths = [int(w) for w in attrs.pad_width]
        mode = str(attrs.pad_mode)
        if len(widths) != 8 or any(widths[:4]) or min(widths) < 0 or mode not in (
                "constant", "reflect"):
            return None  # a negative width crops: a band may hold fewer rows than it loses
        top, bottom = widths[2 * _ROWS], widths[2 * _ROWS + 1]
        rows, height = layout.rows, _shape(data)[_ROWS]
        if mode == "reflect" and max(top, bottom) >= height:
            return None
        n, last = len(layout.channels), len(rows) - 1
        parts = []
        for p, (part, c) in enumerate(zip(layout.parts, layout.clusters, strict=True)):
            band = p // n
            own = list(widths)
            own[2 * _ROWS] = top if band == 0 else 0
            own[2 * _ROWS + 1] = bottom if band == last else 0
            begin, end = rows[band]
            lo, hi = begin, end
            if mode == "reflect":  # the rows a band's reflection mirrors, if it lacks them
                hi = max(end, top + 1) if band == 0 else end
                lo = min(begin, height - bottom - 1) if band == last else begin
            if (lo, hi) != (begin, end):
                part = self._tiled_region(layout, data.name,
                                          {_ROWS: (lo, hi), _CHANNELS: layout.channels[p % n]},
                                          c)
            padded = self.emit(relax.op.nn.pad(part, own, pad_mode=mode,
                                               pad_value=float(attrs.pad_value)),
                               f"{var.name}_p{p}", c)
            keep = (begin - lo, own[2 * _ROWS] + end - lo + own[2 * _ROWS + 1])
            parts.append(self._slice(padded, _ROWS, *keep, f"{var.name}_band{p}", c))
        shifted = tuple((0 if i == 0 else b + top, e + top + (bottom if i == last else 0))
                        for i, (b, e) in enumerate(rows))
        return dataclasses.replace(layout, rows=shifted, parts=tuple(parts))

    def _interpolate_tiles(self, var: relax.Var, call: relax.Call, data: relax.Var,
                           layout: _Tiled) -> _Tiled | None:
        """A linear resize of ``data`` tiled as ``layout`` band by band, as a resize of each
        part's input rows along the columns and a matmul by its output rows' interpolation
        weights: band ``i`` of the output holds the rows whose source lies in input band ``i``
        (:func:`~.resize_rows.band_bounds`), and reads the input rows their weights name."""
        height, out_height = _shape(data)[_ROWS], _shape(var)[_ROWS]
        mode = str(call.attrs.coordinate_transformation_mode)
        rows = resize_rows.band_bounds(height, out_height, mode, layout.rows)
        if rows is None or height < 2:
            return None
        weights = resize_rows.linear_rows(height, out_height, mode)
        width, dtype = call.args[1].values[1], str(var.ty.dtype)
        n = len(layout.channels)
        parts = []
        for p, c in enumerate(layout.clusters):
            begin, end = rows[p // n]
            read = np.flatnonzero(weights[begin:end].any(axis=0))
            # Two rows at least: TVM's resize of one row to one aligning the corners divides
            # by zero.
            lo = min(int(read[0]), height - 2)
            hi = max(int(read[-1]) + 1, lo + 2)
            piece = self._tiled_region(layout, data.name,
                                       {_ROWS: (lo, hi), _CHANNELS: layout.channels[p % n]}, c)
            if int(width) != _shape(data)[_ROWS + 1]:
                piece = self.emit(relax.Call(call.op, [piece, relax.ShapeExpr([hi - lo, width])],
                                             call.attrs), f"{var.name}_cols{p}", c)
            band = relax.const(weights[begin:end, lo:hi], dtype)
            parts.append(self.emit(relax.op.matmul(band, piece), f"{var.name}_p{p}", c))
        return dataclasses.replace(layout, rows=rows, parts=tuple(parts))

    def _reduce_tiles(self, var: relax.Var, call: relax.Call, data: relax.Var, layout: _Tiled
                      ) -> _Sharded:
        """A reduction over the rows but not the channels of ``data`` tiled as ``layout`` (a
        global average pool, an instance norm's mean or variance): each part reduces its tile,
        and each channel slice's bands are combined on the slice's member of the first band, so
        the value is sharded along the channels over those members instead of gathered whole on
        one cluster. A variance takes two passes: the slice's mean, sent back to its tiles,
        then the sum of each tile's squared deviations from it (exact, as one pass of sums of
        squares is not)."""
        shape = _shape(data)
        axes, keepdims, mean = _reduced_rows(call)
        name = call.op.name
        count = int(np.prod([shape[a] for a in axes]))
        n = len(layout.channels)
        if name != "relax.variance":
            reduce, combine = _TILE_REDUCES["relax.sum" if mean else name]
            partials = [reduce(part, axis=axes, keepdims=keepdims) for part in layout.parts]
            parts = self._combine_bands(var, layout, partials, combine, count if mean else None)
        else:
            sums = [relax.op.sum(part, axis=axes, keepdims=True) for part in layout.parts]
            means = self._combine_bands(var, layout, sums, relax.op.add, count)
            partials = []
            for p, (part, c) in enumerate(zip(layout.parts, layout.clusters, strict=True)):
                deviation = self.emit(relax.op.subtract(part, self.use(means[p % n], c)),
                                      f"{var.name}_dev{p}", c)
                partials.append(relax.op.sum(relax.op.square(deviation), axis=axes,
                                             keepdims=keepdims))
            parts = self._combine_bands(var, layout, partials, relax.op.add, count)
        axis = _CHANNELS if keepdims else _CHANNELS - sum(a < _CHANNELS for a in axes)
        return _Sharded(axis, layout.channels, tuple(parts), layout.clusters[:n])

    def _combine_bands(self, var: relax.Var, layout: _Tiled, partials: list[relax.Expr],
                       combine, count: int | None) -> list[relax.Var]:
        """Each tile's ``partials`` (a reduction of it, emitted on its cluster), combined over
        the bands of each channel slice on the slice's member of the first band, and divided by
        ``count`` when one is given (a mean)."""
        tag = PARTIAL_SUM if combine is relax.op.add else "_p"  # sums; a max is no partial sum
        partials = [self.emit(value, f"{var.name}{tag}{p}", c)
                    for p, (value, c) in enumerate(zip(partials, layout.clusters, strict=True))]
        n = len(layout.channels)
        parts = []
        for j, c in enumerate(layout.clusters[:n]):
            total = partials[j]
            for i in range(1, len(layout.rows)):
                total = self.emit(combine(total, self.use(partials[i * n + j], c)),
                                  f"{var.name}_sum", c)
            if count is not None:
                total = self.emit(relax.op.divide(total, relax.const(count, str(var.ty.dtype))),
                                  f"{var.name}_mean", c)
            parts.append(total)
        return parts

    def _follow_matmul(self, var: relax.Var, call: relax.Call, args: list[relax.Expr],
                       rank: int) -> _Sharded | None:
        """A matmul of activations (e.g. attention's scores and context) that follows a sharded
        operand: on a batch axis (heads) both operands are cut alike, so parts stay local; on
        the left's rows or the right's columns the other operand is read whole. A matmul with a
        constant weight is an anchor, split only as the plan says."""
        if any(isinstance(a, tvm.ir.expr.Constant) for a in args):
            return None
        for side, source in enumerate(args):
            layout = self.layout.get(source)
            if not isinstance(layout, _Sharded):
                continue
            own = len(_shape(source))
            other = len(_shape(args[1 - side]))
            if own < 2 or layout.axis == own - 1 - side:  # the reduction axis: not followed
                return None
            if other == 1:
                # A 1-D operand adds no batch axes; its side's axis of the other leaves the
                # output (the right's rows, or the left's columns, before the right's columns).
                axis = layout.axis - (1 if side == 1 and layout.axis == own - 1 else 0)
            else:
                axis = layout.axis + rank - own
            batch = layout.axis < own - 2

            def operand(arg, b, e, c, source=source, layout=layout, axis=axis, batch=batch):
                if arg.same_as(source):
                    return self.region(arg, layout.axis, b, e, c)
                if batch:
                    return self._operand_region(arg, rank, axis, b, e, c)
                return self.whole(arg, c)

            return self._parts(var, call, args, axis, layout.bounds, layout, operand)
        return None

    def _gather_is_cheaper(self, var: relax.Var, call: relax.Call,
                           tensors: list[relax.Var]) -> bool:
        """Whether running an elementwise ``call`` whole moves fewer bytes than following its
        distributed operands: it does when their whole is already gathered where the op is
        placed (e.g. a residual add of a gathered value and a whole one)."""
        target = self.placed.get(var)
        if target is None:
            target = self._where(call)
        gather = scatter = 0
        for a in tensors:
            layout = self.layout[a]
            if isinstance(layout, _Whole):
                scatter += _nbytes(a)
            elif (a, target) not in self._whole:
                gather += sum(_nbytes(p) for p, c in zip(layout.parts, layout.clusters,
                                                         strict=True) if c != target)
        return gather < scatter

    def _stays_distributed(self, var: relax.Var, source: relax.Var, rank: int) -> bool:
        """Whether the ops after an elementwise ``var`` (rank ``rank``) that follows ``source``
        keep its layout (:meth:`_kept`): then following it is worth scattering a whole operand
        once, where gathering would leave every later op whole on one cluster too (a
        transformer's residual adds and layer norms after a reduce-scatter along the rows)."""
        layout = self.layout[source]
        shape = _shape(source)
        if isinstance(layout, _Tiled):  # its rows, which every later op must keep
            axis = layout.row_axis
        elif isinstance(layout, _Partial):
            axis = self._scatter_axis(source, shape)
        else:
            axis = layout.axis
        return self._kept(var, axis + rank - len(shape), rank, depth=8)

    def _followed_axis(self, call: relax.Call, axis: int, rank: int) -> int | None:
        """Output axis that input axis ``axis`` becomes under ``call``, or None if a part of the
        output needs more than the same part of the input."""
        name, attrs = call.op.name, call.attrs
        if name in _IMAGE_OPS:
            layout = str(attrs.layout)
            return axis if layout == "NCHW" and axis in (0, 1) else None
        if name in _REDUCE_OPS:
            reduced = (range(rank) if attrs.axis is None
                       else [int(a) % rank for a in attrs.axis])
            if axis in reduced:
                return None
            return axis if attrs.keepdims else axis - sum(1 for a in reduced if a < axis)
        if name in _AXIS_OPS:
            return None if int(attrs.axis) % rank == axis else axis
        if name == "relax.nn.prelu":  # its parts read their channels' slopes (_follow_prelu)
            return axis
        if name == "relax.nn.layer_norm":
            return None if axis in {int(a) % rank for a in attrs.axes} else axis
        if name == "relax.nn.pad":  # parts along an axis it does not pad pad alike
            return None if any(int(w) for w in attrs.pad_width[2 * axis:2 * axis + 2]) else axis
        if name == "relax.permute_dims":
            order = (list(range(rank))[::-1] if attrs.axes is None
                     else [int(a) % rank for a in attrs.axes])
            return order.index(axis)
        if name == "relax.squeeze" and attrs.axis is not None:
            removed = {int(a) % rank for a in attrs.axis}
            return None if axis in removed else axis - sum(a < axis for a in removed)
        if name == "relax.broadcast_to" and isinstance(call.args[1], relax.ShapeExpr):
            # The axis moves by the axes added in front (grouped-query attention's keys
            # repeated); a part along an axis that is broadcast (of one element) is not followed.
            out = [int(d) for d in call.args[1].values]
            moved = axis + len(out) - rank
            return moved if out[moved] == _shape(call.args[0])[axis] else None
        if name == "relax.expand_dims":
            out_rank = rank + len(attrs.axis)
            added = {int(a) % out_rank for a in attrs.axis}
            kept = [a for a in range(out_rank) if a not in added]
            return kept[axis]
        if name == "relax.take" and attrs.axis is not None:
            # Constant indices along another axis (torch's attention picking the query, key
            # and value out of one projection): each part takes from its share.
            taken = int(attrs.axis) % rank
            indices = call.args[1]
            if taken == axis or not isinstance(indices, tvm.ir.expr.Constant):
                return None
            return axis if axis < taken else axis - 1 + len(_shape(indices))
        return None

    def _parts(self, var: relax.Var, call: relax.Call, args: list[relax.Expr], axis: int,
               bounds: tuple[tuple[int, int], ...], layout: _Sharded, operand) -> _Sharded:
        """One call per part of ``layout`` (the followed operand's), its output part
        ``bounds[p]`` along ``axis``; ``operand(arg, begin, end, cluster)`` fetches each operand
        for the part ``[begin, end)`` of the followed one."""
        out = _shape(var)
        parts = []
        for p, ((b, e), c) in enumerate(zip(layout.bounds, layout.clusters, strict=True)):
            new_args = [operand(a, b, e, c) if isinstance(a, (relax.Var, tvm.ir.expr.Constant))
                        else a for a in args]
            if call.op.name == "relax.reshape":
                shape = list(out)
                shape[axis] = bounds[p][1] - bounds[p][0]
                new_args[1] = relax.ShapeExpr(shape)
            elif call.op.name == "relax.broadcast_to":
                new_args[1] = _broadcast_part(call, new_args[0])
            new = relax.Call(call.op, new_args, call.attrs, call.ty_args)
            parts.append(self.emit(new, f"{var.name}_p{p}", c))
        return _Sharded(axis, tuple(bounds), tuple(parts), layout.clusters)

    def _operand_region(self, operand: relax.Expr, out_rank: int, axis: int, b: int, e: int,
                        cluster: int) -> relax.Expr:
        """The part of an elementwise operand that output part ``[b, e)`` on ``axis`` reads."""
        shape = static_shape(operand) or []
        own = axis - (out_rank - len(shape))
        if own < 0 or shape[own] == 1:
            return self.whole(operand, cluster)
        return self.region(operand, own, b, e, cluster)

    # -- anchors -------------------------------------------------------------------------------

    def _anchor(self, var: relax.Var, call: relax.Call, dim: str, clusters: tuple[int, ...]):
        by = blocks_by(dim)
        if by is not None:
            return self._blocks(var, call, by, clusters)
        by = tiles_by(dim)
        conv = call.op.same_as(_CONV2D)
        transposed = call.op.same_as(_CONV2D_TRANSPOSE)
        volume = call.op.same_as(_CONV3D)
        part = (self._conv2d_part if conv else self._conv2d_transpose_part if transposed
                else self._conv3d_part if volume else self._matmul_part)
        if by is not None:
            out = _shape(var)
            row_axis, channel_axis = (_ROWS, _CHANNELS) if conv else (len(out) - 2, len(out) - 1)
            bands = [clusters[i:i + by] for i in range(0, len(clusters), by)]
            rows = (self._aligned_rows(call, bands) if conv else None) or tuple(
                even_bounds(out[row_axis], len(bands)))
            unit = group_channels(call)[0] if conv else 1  # slices of whole groups
            channels = tuple((b * unit, e * unit)
                             for b, e in even_bounds(out[channel_axis] // unit, by))
            parts = []
            for p, c in enumerate(clusters):
                (b, e), (c0, c1) = rows[p // by], channels[p % by]
                parts.append(self.emit(part(call, "rows", b, e, c, (c0, c1)),
                                       f"{var.name}_p{p}", c))
            return _Tiled(rows, channels, tuple(parts), clusters, row_axis, channel_axis)
        size = _anchor_size(call, dim)
        bounds = (self._aligned_rows(call, [(c,) for c in clusters]) if conv and dim == "rows"
                  else None) or tuple(even_bounds(size, len(clusters)))
        parts = []
        for p, ((b, e), c) in enumerate(zip(bounds, clusters, strict=True)):
            parts.append(self.emit(part(call, dim, b, e, c), part_name(var.name, dim, p, "_p"),
                                   c))
        if dim in REDUCTION_DIMS:
            return _Partial(tuple(parts), clusters)
        out = _shape(var)
        if (conv or transposed) and dim == "out_channels":  # groups of a grouped conv, as channels
            unit = group_channels(call)[0]
            bounds = tuple((b * unit, e * unit) for b, e in bounds)
        if conv or transposed or volume:
            axis = {"batch": 0, "out_channels": 1, "rows": 2}[dim]
        else:
            b_shape = _shape(call.args[1])
            axis = {"batch": 0, "rows": len(out) - (1 if len(b_shape) == 1 else 2),
                    "cols": len(out) - 1}[dim]
        return _Sharded(axis, bounds, tuple(parts), clusters)

    def _aligned_rows(self, call: relax.Call, bands: list[tuple[int, ...]]
                      ) -> tuple[tuple[int, int], ...] | None:
        """Output row bounds of a conv2d split into row ``bands`` (each band's clusters: one
        of a row split, a 2-D split's slices) whose input lies in row bands on the same
        clusters (sharded along its rows, or tiled): each output row goes to the band that
        holds the input row under its kernel's centre, so a band reads its own rows and only
        the halo from its neighbours. Even bounds (larger parts first) drift from the input's
        after a stride: MobileNetV2 int8 on simba-6x6 split 112 rows into 32 parts, then 56,
        and part 20 of the 56 read the input rows of parts 21 and 22. None when the input
        lies otherwise, when a band would get no row, or when the placement bounds rows evenly
        (:meth:`_centred`)."""
        data = self.resolve(call.args[0])
        layout = self.layout.get(data) if isinstance(data, relax.Var) else None
        if isinstance(layout, _Sharded) and layout.axis == _ROWS:
            spans, holders = layout.bounds, [(c,) for c in layout.clusters]
        elif isinstance(layout, _Tiled) and layout.nchw:
            n = len(layout.channels)
            spans = layout.rows
            holders = [layout.clusters[i:i + n] for i in range(0, len(layout.clusters), n)]
        else:
            return None
        if len(spans) != len(bands) or any(set(h) != set(b) for h, b in zip(holders, bands,
                                                                             strict=True)):
            return None
        extent = (_shape(call.args[1])[2] - 1) * int(call.attrs.dilation[0]) + 1
        return self._centred(spans, _shape(call)[_ROWS], int(call.attrs.strides[0]),
                             int(call.attrs.padding[0]), extent, _shape(data)[_ROWS])

    def _centred(self, spans: tuple[tuple[int, int], ...], rows: int, stride: int, top: int,
                 extent: int, height: int) -> tuple[tuple[int, int], ...] | None:
        """:func:`_centred_rows`, or None when the placement bounds rows evenly
        (``centred_rows`` False: :attr:`~.planners.placement.Placement.even_rows`)."""
        if not self.centred_rows:
            return None
        return _centred_rows(spans, rows, stride, top, extent, height)

    def _blocks(self, var: relax.Var, call: relax.Call, by: int, clusters: tuple[int, ...]
                ) -> _Sharded:
        """A :data:`~.placement.BLOCKS` split: each part multiplies its input-channel group by
        its block of the weights, and each output slice's partial sums are reduce-scattered
        among the parts that made them, so the output is sharded along the channels, slice by
        slice. Each piece is summed where it is kept, from every part's cut of it: around a
        ring (:meth:`reduce_scatter`) ResNet-50 int8 batch 1 on simba-6x6 simulated 1.7 %
        slower (425.6 k cycles against 418.6 k). The parts take their groups in the
        orientation that finds more of the input where they are: an output of another such
        split lies transposed (each slice's pieces on its parts, one group apart), and the
        next split reads it with its groups across them."""
        conv = call.op.same_as(_CONV2D)
        data, weight = call.args
        k, n = len(clusters), by
        m = k // n
        out = _shape(var)
        w_rank = len(_shape(weight))
        in_axis = 1 if conv else len(_shape(data)) - 1
        w_in, w_out = (1, 0) if conv else (w_rank - 2, w_rank - 1)
        axis = 1 if conv else len(out) - 1
        groups = even_bounds(_anchor_size(call, "in_channels" if conv else "reduction"), m)
        slices = even_bounds(out[axis], n)
        block = self._block_order(data, in_axis, groups, n, clusters)
        parts: dict[int, list[relax.Var]] = {s: [] for s in range(n)}
        owners: dict[int, list[int]] = {s: [] for s in range(n)}
        for p, c in enumerate(clusters):
            g, s = block(p)
            x = self.region(data, in_axis, *groups[g], c)
            w = self._operand_box(weight, w_rank, {w_in: groups[g], w_out: slices[s]}, c)
            value = conv2d_like(call, x, w) if conv else relax.Call(call.op, [x, w], call.attrs)
            parts[s].append(self.emit(value, f"{var.name}{PARTIAL_SUM}{p}", c))
            owners[s].append(c)
        bounds, pieces, holders = [], [], []
        for s, (begin, end) in enumerate(slices):
            cuts = even_bounds(end - begin, min(m, end - begin))
            for cut, dst in zip(cuts, owners[s], strict=False):
                pieces.append(self._summed(parts[s], owners[s], {axis: cut}, var.name, dst))
                bounds.append((begin + cut[0], begin + cut[1]))
                holders.append(dst)
        return _Sharded(axis, tuple(bounds), tuple(pieces), tuple(holders))

    def _block_order(self, data: relax.Expr, axis: int, groups: list[tuple[int, int]],
                     n: int, clusters: tuple[int, ...]):
        """``p -> (group, slice)`` of a blocks split's parts: ``(p // n, p % n)``, or
        transposed ``(p % m, p // m)`` when that finds more of each part's input-channel
        group on its own cluster (the input sharded along ``axis``)."""
        m = len(groups)
        orders = ((lambda p: (p // n, p % n)), (lambda p: (p % m, p // m)))
        value = self.resolve(data)
        layout = self.layout.get(value) if isinstance(value, relax.Var) else None
        if not isinstance(layout, _Sharded) or layout.axis != axis:
            return orders[0]
        held = dict(zip(layout.clusters, layout.bounds, strict=True))

        def local(order) -> int:
            total = 0
            for p, c in enumerate(clusters):
                (lo, hi), (b, e) = groups[order(p)[0]], held.get(c, (0, 0))
                total += max(0, min(hi, e) - max(lo, b))
            return total

        return max(orders, key=local)

    def _conv2d_transpose_part(self, call: relax.Call, dim: str, b: int, e: int, c: int
                               ) -> relax.Expr:
        """Part ``[b, e)`` of ``dim`` (batch or output channels) of a transposed conv2d on
        cluster ``c``."""
        data, weight = call.args
        if dim == "batch":
            return conv2d_transpose_like(call, self.region(data, 0, b, e, c),
                                         self.whole(weight, c))
        if int(call.attrs.groups) > 1:  # groups [b, e): their input channels alone
            inputs = group_slices(call, b, e)[0]
            return conv2d_transpose_like(call, self.region(data, 1, *inputs, c),
                                         self.region(weight, 0, *inputs, c), e - b)
        return conv2d_transpose_like(call, self.whole(data, c), self.region(weight, 1, b, e, c))

    def _conv3d_part(self, call: relax.Call, dim: str, b: int, e: int, c: int) -> relax.Expr:
        """Part ``[b, e)`` of ``dim`` (batch, output channels) of a conv3d on cluster ``c``."""
        return conv3d_part(call, dim, b, e,
                           lambda value, axis, lo, hi: self.region(value, axis, lo, hi, c),
                           lambda value: self.whole(value, c))

    def _conv2d_part(self, call: relax.Call, dim: str, b: int, e: int, c: int,
                     channels: tuple[int, int] | None = None) -> relax.Expr:
        """Part ``[b, e)`` of ``dim`` of a conv2d on cluster ``c``; a row band's part only
        computes the output ``channels`` given (a 2-D split's tile), from every input channel
        of its band, or from the input channels of its groups alone for a grouped conv."""
        data, weight = call.args
        groups = int(call.attrs.groups)
        if dim == "batch":
            return conv2d_like(call, self.region(data, 0, b, e, c), self.whole(weight, c))
        if dim == "out_channels" and groups > 1:  # groups [b, e), reading their own channels
            inputs, outputs = group_slices(call, b, e)
            return conv2d_like(call, self.region(data, 1, *inputs, c),
                               self.region(weight, 0, *outputs, c), groups=e - b)
        if dim == "in_channels":
            return conv2d_like(call, self.region(data, 1, b, e, c),
                               self.region(weight, 1, b, e, c))
        if dim == "out_channels":
            kernel = self.region(weight, 0, b, e, c)
            unsliced = self._unsliced(call, c)
            if unsliced is not None:
                return conv2d_like(call, unsliced[0], kernel, strides=unsliced[1])
            return conv2d_like(call, self.whole(data, c), kernel)
        # Output rows [b, e) read input rows [lo, hi) of the padded input: a halo exchange.
        top, left, _, right = (int(p) for p in call.attrs.padding)
        stride, dilation = int(call.attrs.strides[0]), int(call.attrs.dilation[0])
        height = _shape(data)[2]
        extent = (_shape(weight)[2] - 1) * dilation + 1
        read, (pad_top, pad_bottom) = _band_rows(b, e, stride, extent, top, height)
        grouped = channels is not None and groups > 1  # a tile of whole groups (see _anchor)
        if grouped:  # its groups, from its output channels
            first, last = (bound // group_channels(call)[0] for bound in channels)
            inputs = group_slices(call, first, last)[0]
        rows = (self._operand_box(data, 4, {_ROWS: read, _CHANNELS: inputs}, c) if grouped
                else self.region(data, 2, *read, c))
        if pad_top or pad_bottom:
            rows = self.emit(relax.op.nn.pad(rows, [0, 0, 0, 0, pad_top, pad_bottom, 0, 0]),
                             "rows_padded", c)
        kernel = (self.whole(weight, c) if channels is None
                  else self.region(weight, 0, *channels, c))
        changes = {"groups": last - first} if grouped else {}
        return conv2d_like(call, rows, kernel, padding=[0, left, 0, right], **changes)

    def _unsliced(self, call: relax.Call, cluster: int) -> tuple[relax.Expr, list[int]] | None:
        """For a conv2d whose input is a strided slice as SliceStridedConvs makes it (every
        ``s``-th row or column, for a kernel 1 wide there), when the slice's input is already
        whole on ``cluster``: that copy and the strides that read the same pixels from it, so
        no slice is copied out of it; else None."""
        source = self._sliced.get(self.resolve(call.args[0]))
        if source is None or (source[0], cluster) not in self._whole:
            return None
        data, sliced = source
        shape, attrs = _shape(data), call.attrs
        spec = _slice_spec(sliced, len(shape))
        layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
        spatial = {layout.index(dim): i for i, dim in enumerate("HW")}  # axis: attribute index
        if spec is None or set(spec) - set(spatial):
            return None
        kernel, pads = _shape(call.args[1]), [int(p) for p in attrs.padding]
        strides = [int(s) for s in attrs.strides]
        for axis, (begin, end, stride) in spec.items():
            i = spatial[axis]
            if (begin, end, strides[i], pads[i], pads[i + 2],
                    kernel[kernel_layout.index("HW"[i])]) != (0, shape[axis], 1, 0, 0, 1):
                return None
            strides[i] = stride
        return self._whole[data, cluster], strides

    def _matmul_part(self, call: relax.Call, dim: str, b: int, e: int, c: int,
                     cols: tuple[int, int] | None = None) -> relax.Expr:
        """Part ``[b, e)`` of ``dim`` of a matmul on cluster ``c``; a row band's part only
        computes the columns ``cols`` given (a 2-D split's tile), from its band of the left
        operand and those columns of the right."""
        x, w = call.args
        a, bs, out = _shape(x), _shape(w), _shape(call)
        if dim == "batch":
            sliced = matmul_batch_operands(a, bs, out)
            args = [self.region(v, 0, b, e, c) if i in sliced else self.whole(v, c)
                    for i, v in enumerate((x, w))]
        elif dim == "rows":
            args = [self.region(x, len(a) - 2, b, e, c),
                    self.whole(w, c) if cols is None else self.region(w, len(bs) - 1, *cols, c)]
        elif dim == "cols":
            args = [self.whole(x, c), self.region(w, len(bs) - 1, b, e, c)]
        else:
            args = [self.region(x, len(a) - 1, b, e, c),
                    self.region(w, max(len(bs) - 2, 0), b, e, c)]
        return relax.Call(call.op, args, call.attrs)


_BAND_OPS = {"relax.nn.max_pool2d": "_pool_tiles", "relax.nn.avg_pool2d": "_pool_tiles",
             "relax.image.resize2d": "_resize_tiles", "relax.nn.pad": "_pad_tiles"}
"""Ops of an NCHW value that follow its row bands or 2-D tiles band by band, and the method of
:class:`_Distributor` that runs them so."""

_RESIZE_HALO = {"nearest_neighbor": 1, "linear": 1, "cubic": 2}
"""The input rows beyond its own that a band of a resize's output reads, by method."""
_SHIFTED_RESIZES = frozenset(("half_pixel", "pytorch_half_pixel", "asymmetric",
                              "tf_half_pixel_for_nn"))
"""Resize coordinate modes under which a whole-factor resize of a band of rows equals the same
rows of the whole resize: its source coordinates shift with the band."""

_TILE_REDUCES = {
    "relax.sum": (relax.op.sum, relax.op.add),
    "relax.max": (relax.op.max, relax.op.maximum),
    "relax.min": (relax.op.min, relax.op.minimum),
}
"""A reduction a tiled value's parts run tile by tile, and how two bands' results combine."""


def _reduced_rows(call: relax.Call) -> tuple[list[int], bool, bool] | None:
    """``(axes, keepdims, mean)`` of a reduction of a 4-D NCHW value over its rows and not its
    channels (a mean, variance, sum, max or min; or an adaptive average pool to 1x1, as a mean
    over rows and columns), which a tiled value's parts can reduce tile by tile; else None."""
    name, attrs = call.op.name, call.attrs
    if name == "relax.nn.adaptive_avg_pool2d":
        size = [int(s) for s in attrs.output_size] if attrs.output_size is not None else []
        if str(attrs.layout) != "NCHW" or str(attrs.out_layout) != "NCHW" or \
                size not in ([1], [1, 1]):
            return None
        return [_ROWS, _ROWS + 1], True, True
    if name not in ("relax.mean", "relax.variance", *_TILE_REDUCES) or attrs.axis is None:
        return None
    axes = sorted({int(a) % 4 for a in attrs.axis})
    if _ROWS not in axes or _CHANNELS in axes:
        return None
    return axes, bool(attrs.keepdims), name == "relax.mean"


def _slice_spec(call: relax.Call, rank: int) -> dict[int, tuple[int, int, int]] | None:
    """``{axis: (begin, end, stride)}`` of a ``strided_slice`` of a rank-``rank`` value, each
    within the axis' extent; None when not static or a stride is not positive."""
    try:
        axes, begin, end, *strides = ([int(getattr(f, "value", f)) for f in arg.fields]
                                      for arg in call.args[1:5])
    except (AttributeError, TypeError, ValueError):
        return None
    strides = strides[0] if strides else [1] * len(axes)
    shape = _shape(call.args[0])
    spec = {}
    for axis, b, e, s in zip(axes, begin, end, strides, strict=True):
        axis %= rank
        size = shape[axis]
        b, e = (min(max(v + size if v < 0 else v, 0), size) for v in (b, e))
        if s <= 0:
            return None
        spec[axis] = (b, max(b, e), s)
    return spec


def _looked_up_axis(call: relax.Call, axis: int) -> int:
    """The output axis of a ``take`` that axis ``axis`` of its indices becomes: the indices'
    axes replace the table's taken axis (all of them for a flattened table)."""
    table = _shape(call.args[0])
    return (0 if call.attrs.axis is None else int(call.attrs.axis) % len(table)) + axis


def _centred_rows(spans: tuple[tuple[int, int], ...], rows: int, stride: int, top: int,
                  extent: int, height: int) -> tuple[tuple[int, int], ...] | None:
    """Bounds of ``rows`` output rows of a window op (a conv or pool: ``stride``, ``top``
    padding rows, windows ``extent`` rows tall over ``height`` input rows) whose input lies in
    row bands ``spans``: each output row in the band holding the input row at its window's
    centre. None when the spans do not ascend or a band would get no row."""
    starts, _ = _edges(spans)
    if starts is None:
        return None
    centre = (extent - 1) // 2
    owner = [bisect.bisect_right(starts, min(max(o * stride - top + centre, 0), height - 1)) - 1
             for o in range(rows)]
    counts = np.bincount(owner, minlength=len(spans))
    if len(counts) != len(spans) or not counts.all():
        return None
    ends = np.cumsum(counts)
    return tuple((int(e - n), int(e)) for e, n in zip(ends, counts, strict=True))


def _band_rows(b: int, e: int, stride: int, extent: int, top: int, height: int
               ) -> tuple[tuple[int, int], tuple[int, int]]:
    """The input rows ``[lo, hi)`` that output rows ``[b, e)`` of a sliding window (stride,
    extent, top padding) read within an input of ``height`` rows, and the padding rows
    ``(top, bottom)`` beyond its edges."""
    lo, hi = b * stride - top, (e - 1) * stride + extent - top
    return (max(lo, 0), min(hi, height)), (max(0, -lo), max(0, hi - height))


def _constant_box(array: np.ndarray, box: dict[int, tuple[int, int]], dtype: str
                  ) -> tvm.ir.expr.Constant:
    """The region ``box`` (``{axis: (begin, end)}``) of a constant's values ``array``, as a
    constant of ``dtype``."""
    index = [slice(None)] * array.ndim
    for axis, (lo, hi) in box.items():
        index[axis] = slice(lo, hi)
    return relax.const(np.ascontiguousarray(array[tuple(index)]), dtype)


def _anchor_size(call: relax.Call, dim: str) -> int:
    """The size of ``dim`` at an anchor (a matmul operand may be 1-D: only the dims it has are
    looked at)."""
    data, weight = (_shape(x) for x in call.args)
    out = _shape(call)
    if any(call.op.same_as(op) for op in (_CONV2D, _CONV2D_TRANSPOSE, _CONV3D)):
        unit = group_channels(call)[0]  # whole groups of a grouped conv
        sizes = {"batch": lambda: out[0], "out_channels": lambda: out[1] // unit,
                 "in_channels": lambda: data[1], "rows": lambda: out[2]}
    else:
        sizes = {"batch": lambda: out[0], "rows": lambda: data[-2],
                 "cols": lambda: weight[-1], "reduction": lambda: data[-1]}
    return sizes[dim]()


def _broadcast_part(call: relax.Call, part: relax.Expr) -> relax.ShapeExpr:
    """The shape that ``part`` of ``broadcast_to``'s operand is broadcast to: the output's,
    with the part's own size along each axis the whole operand is not broadcast along."""
    data, out = _shape(call.args[0]), [int(d) for d in call.args[1].values]
    own, added = _shape(part), len(out) - len(data)
    return relax.ShapeExpr([own[j - added] if j >= added and data[j - added] == out[j]
                            else out[j] for j in range(len(out))])


def _reshape_bounds(shape: list[int], axis: int, bounds: Sequence[tuple[int, int]],
                    out: list[int]) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """The output axis and part bounds of a reshape of ``shape`` split along ``axis``, when every
    part is a block of whole rows of one output axis (e.g. hidden 768 -> 12 heads x 64, split
    on heads, or [1, 2048, 1, 1] -> [1, 2048]); None otherwise."""
    before, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    for out_axis in range(len(out)):
        out_before, out_inner = int(np.prod(out[:out_axis])), int(np.prod(out[out_axis + 1:]))
        if (out_before != before or out[out_axis] * out_inner != shape[axis] * inner
                or out_inner == 0):
            continue
        if all((b * inner) % out_inner == 0 and (e * inner) % out_inner == 0 for b, e in bounds):
            return out_axis, tuple((b * inner // out_inner, e * inner // out_inner)
                                   for b, e in bounds)
    return None


def _aligned_bounds(shape: list[int], axis: int, parts: int, out: list[int]
                    ) -> tuple[tuple[tuple[int, int], ...],
                               tuple[int, tuple[tuple[int, int], ...]]] | None:
    """Bounds along ``axis`` of at most ``parts`` parts that a reshape of ``shape`` to ``out``
    can follow (each a block of whole rows of one output axis, as :func:`_reshape_bounds`
    needs), and that output axis with the parts' bounds on it: of the output axes made of
    whole rows of ``axis``, the one cut into the most parts (a group norm's [1, 32, H, W] ->
    [1, 8, 4 * H * W] in 9 parts: 8 groups, not its batch of 1); None when there is none or it
    is cut into one part."""
    before, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    best = None
    for out_axis in range(len(out)):
        out_before, out_inner = int(np.prod(out[:out_axis])), int(np.prod(out[out_axis + 1:]))
        if out_before != before or out[out_axis] * out_inner != shape[axis] * inner:
            continue
        if out_inner % inner:
            continue
        unit = out_inner // inner  # elements of ``axis`` per output row
        rows = even_bounds(out[out_axis], min(parts, out[out_axis]))
        if len(rows) > 1 and (best is None or len(rows) > len(best[1][1])):
            best = (tuple((b * unit, e * unit) for b, e in rows), (out_axis, tuple(rows)))
    return best


def _map_operands(value: relax.Expr, fetch) -> relax.Expr:
    """``value`` with every Var operand (also inside tuples) replaced by ``fetch(var)``."""
    if isinstance(value, relax.Var):
        return fetch(value)
    if isinstance(value, relax.Tuple):
        return relax.Tuple([_map_operands(f, fetch) for f in value.fields])
    if isinstance(value, relax.TupleGetItem):
        return relax.TupleGetItem(_map_operands(value.tuple_value, fetch), value.index)
    if isinstance(value, relax.Call):
        args = [_map_operands(a, fetch) for a in value.args]
        return relax.Call(value.op, args, value.attrs, value.ty_args)
    return value


def distribute(mod: tvm.IRModule, splits: Sequence[DistributedSplit],
               placed: dict[relax.Var, int] | None = None, home: int = 0,
               topology: Topology | None = None, centred_rows: bool = True
               ) -> tuple[tvm.IRModule, dict[relax.Var, int]]:
    """Rewrite ``main`` of the high-level ``mod`` with ``splits`` kept distributed.

    Returns the rewritten module (with boundary markers, see :data:`BOUNDARY`) and the cluster
    of every binding it emitted. ``placed`` gives the cluster of bindings of ``mod`` (after
    ``DecomposeOpsForInference``) that run whole; other unsplit ops that do not follow a
    distributed operand run where most of their operand bytes are (``home`` on ties).
    ``topology``: the system's, on which reduce-scatters go around a ring where that is
    cheaper (without it, every part sums the slices sent to it directly). ``centred_rows``: a
    conv or pool whose input lies in row bands on its own clusters takes each output row in
    the band holding its window's centre (see :attr:`~.planners.placement.Placement.even_rows`);
    False bounds its bands evenly.
    """
    return _distribute(prepare_for_splits(mod), splits, placed, home, topology, centred_rows)


def _distribute(mod: tvm.IRModule, splits: Sequence[DistributedSplit],
                placed: dict[relax.Var, int] | None, home: int,
                topology: Topology | None = None, centred_rows: bool = True
                ) -> tuple[tvm.IRModule, dict[relax.Var, int]]:
    """:func:`distribute` on a module :func:`prepare_for_splits` returned."""
    anchors = anchor_bindings(mod)
    infos: list[AnchorInfo] = [info for _, info in anchors]
    plan, seen = {}, set()
    for split in splits:
        check_split(AnchorSplit(split.anchor, split.dim, len(split.clusters)), infos)
        if split.anchor in seen:
            raise PlanningError(f"anchor {split.anchor} is split more than once")
        seen.add(split.anchor)
        if len(split.clusters) > 1:
            plan[anchors[split.anchor][0].var] = (split.dim, tuple(split.clusters))
    main = mod["main"]
    blocks = main.body.blocks
    if len(blocks) != 1 or not isinstance(blocks[0], relax.DataflowBlock):
        raise PlanningError(
            "DistributeTensors needs 'main' as one dataflow block (as from_onnx makes it), "
            f"got {len(blocks)} block(s)"
        )
    dist = _Distributor(plan, placed or {}, home, topology, centred_rows, main.params)
    for binding in blocks[0].bindings:
        for var in relax.analysis.free_vars(binding.value):
            dist.users.setdefault(var, []).append(binding)
    outputs = {}
    attrs = {str(k): v for k, v in main.attrs.items()} if main.attrs else None
    with dist.bb.function("main", list(main.params), attrs=attrs):
        with dist.bb.dataflow():
            dist.shard_inputs(main.params)
            for binding in blocks[0].bindings:
                if not isinstance(binding, relax.VarBinding):
                    raise PlanningError(
                        f"DistributeTensors cannot rewrite the match_cast of {binding.var.name}"
                    )
                dist.visit(binding)
                if not isinstance(binding.var, relax.DataflowVar):
                    source = dist.resolve(binding.var)
                    layout = dist.layout.get(source) if isinstance(source, relax.Var) else None
                    at = getattr(layout, "cluster", None)
                    if isinstance(layout, (_Sharded, _Partial, _Tiled)):
                        at = layout.clusters[0]
                    at = dist.home if at is None else at
                    whole = dist.whole(source, at)
                    outputs[binding.var] = dist.bb.emit_output(whole)
                    dist.cluster_of[outputs[binding.var]] = at
        body = _map_operands(main.body.body, lambda v: outputs.get(v, v))
        dist.bb.emit_func_output(body)
    return _with_main(mod, dist.bb.get()["main"]), dist.cluster_of


def prepare_for_splits(mod: tvm.IRModule) -> tvm.IRModule:
    """Batch norms decomposed and constant subexpressions folded, as ReduceGraph does first, so
    that weights are constants (sliced where they are split) and not values that cross clusters.
    The ops of ``main`` computed from constants only are legalized (:class:`LegalizeOnce`) and
    evaluated (:class:`FoldConstantCalls`), each kernel built once; TVM's ``FoldConstant``
    folds what is left (shapes of constants); every other op stays high-level. Idempotent: a
    prepared module comes back with the same Vars."""
    mod = relax.transform.DecomposeOpsForInference()(mod)
    derived: set[relax.Var] = set()

    def from_constants(call: relax.Call) -> bool:
        operands = relax.analysis.free_vars(call)
        return all(v in derived for v in operands)

    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
                    and from_constants(value)):
                derived.add(binding.var)
    if not derived:
        return mod
    return tvm.transform.Sequential([
        LegalizeOnce(select=from_constants), FoldConstantCalls(),
        relax.transform.FoldConstant(),  # what is left, e.g. shapes of constants
        relax.transform.DeadCodeElimination(["main"]),
    ])(mod)


def _with_main(mod: tvm.IRModule, main: relax.Function) -> tvm.IRModule:
    functions = {gv: (main if gv.name_hint == "main" else f) for gv, f in mod.functions_items()}
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def _packed(value: relax.Expr, name: str) -> bool:
    return (isinstance(value, relax.Call) and value.op.same_as(_PURE_PACKED)
            and str(value.args[0].global_symbol) == name)


def _is_marker(value: relax.Expr) -> bool:
    """Whether ``value`` is a :data:`BOUNDARY` marker (operand, reading cluster)."""
    return _packed(value, BOUNDARY)


def _crossing_cluster(value: relax.Expr) -> int | None:
    """The cluster a :data:`BOUNDARY` marker, a :data:`GATHER` or a :data:`SLICED_ADD` runs
    on (its last argument), else None."""
    if _packed(value, BOUNDARY) or _packed(value, GATHER) or _packed(value, SLICED_ADD):
        return int(value.args[-1].value)
    return None


def lower_crossings(mod: tvm.IRModule, target: str | tvm.target.Target = "llvm"
                    ) -> tvm.IRModule:
    """``mod`` with every :data:`BOUNDARY` marker of ``main`` replaced by its operand, every
    :data:`GATHER` by a ``call_tir`` of a concat kernel (legalized for ``target``) and every
    :data:`SLICED_ADD` by one of a sliced-add kernel, each kernel made once per signature."""
    main = mod["main"]
    replace: dict[relax.Var, relax.Expr] = {}
    kernels: dict[tuple, tvm.ir.GlobalVar] = {}
    context, functions = kernel_context(mod)
    builder = relax.BlockBuilder(context)  # adds the kernels

    def call(key: tuple, make, name: str, args: list[relax.Expr], ty) -> relax.Call:
        if key not in kernels:
            kernels[key] = builder.add_func(make(), name)
        return relax.call_tir(kernels[key], relax.Tuple(args), ty)

    blocks = []
    for block in main.body.blocks:
        bindings = []
        for binding in block.bindings:
            value = binding.value
            if _is_marker(value):
                replace[binding.var] = replace.get(value.args[1], value.args[1])
                continue
            new_value = _map_operands(value, lambda v: replace.get(v, v))
            if _packed(value, GATHER):
                pieces = list(new_value.args[1:-2])
                axis = int(value.args[-2].value)
                key = (tuple(tuple(_shape(p)) for p in pieces), str(pieces[0].ty.dtype), axis)
                new_value = call(key, partial(_concat_kernel, pieces, axis, target),
                                 "concatenate", pieces, binding.var.ty)
            elif _packed(value, SLICED_ADD):
                a, b = new_value.args[1:3]
                axis, begin = (int(v.value) for v in value.args[3:5])
                key = (tuple(_shape(a)), tuple(_shape(b)), str(a.ty.dtype), axis, begin)
                new_value = call(key, partial(_sliced_add_kernel, *key),
                                 "add" if key[0] == key[1] else "fused_strided_slice_add",
                                 [a, b], binding.var.ty)
            bindings.append(relax.VarBinding(binding.var, new_value))
        blocks.append(type(block)(bindings))
    body = relax.SeqExpr(blocks, _map_operands(main.body.body, lambda v: replace.get(v, v)))
    return _with_main(with_functions(builder.get(), functions) if kernels else mod,
                      relax.Function(main.params, body, main.ret_ty, main.is_pure, main.attrs))


def _sliced_add_kernel(shape: tuple[int, ...], part_shape: tuple[int, ...], dtype: str,
                       axis: int, begin: int) -> tvm.tirx.PrimFunc:
    """The PrimFunc of :data:`SLICED_ADD`: a strided slice (in a ``T_strided_slice`` block, as
    TOPI names it, which :func:`~.analysis.extract_op_graph.sliced_fractions` reads as
    sliced) added to the first operand."""
    a = te.placeholder(shape, dtype, "a")
    b = te.placeholder(part_shape, dtype, "b")
    piece = b
    if tuple(part_shape) != tuple(shape):
        piece = te.compute(shape, lambda *i: b(*i[:axis], i[axis] + begin, *i[axis + 1:]),
                           name="T_strided_slice_with_axes")
    total = te.compute(shape, lambda *i: a(*i) + piece(*i), name="T_add")
    func = te.create_prim_func([a, b, total]).without_attr("global_symbol")
    return func.with_attr("op_pattern", 2)  # injective, as AnnotateTIROpPattern finds it


def _concat_kernel(pieces: list[relax.Var], axis: int, target: str | tvm.target.Target
                   ) -> tvm.tirx.PrimFunc:
    """The PrimFunc concatenating tensors shaped as ``pieces`` along ``axis``, as LegalizeOps
    and AnnotateTIROpPattern make it for ``target``, marked :data:`~.attrs.ATTR_IN_PLACE`: on
    the device the pieces are written into the assembled buffer as they arrive (the host runs
    the concat)."""
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", p.ty) for i, p in enumerate(pieces)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.concat(params, axis=axis))
        bb.emit_func_output(out)
    lowering = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern()]
    with tvm.target.Target(target) if isinstance(target, str) else target:
        lowered = tvm.transform.Sequential(lowering)(bb.get())
    (kernel,) = [f for gv, f in lowered.functions_items() if gv.name_hint != "main"]
    return kernel.with_attr(ATTR_IN_PLACE, True).with_attr("estimated_flops", 0)


def planned_clusters(mod: tvm.IRModule, op_cluster: Sequence[int],
                     target: str | tvm.target.Target = "llvm") -> dict[relax.Var, int]:
    """The cluster of every binding of the high-level ``mod`` (as :func:`distribute` prepares
    it: decomposed for inference, constants folded), from ``op_cluster``, the clusters of the
    ops of ``ReduceGraph(mod)``: a binding runs where the fused op holding it runs. Empty when
    the fused ops cannot be matched (their count differs).

    FuseOps renames what it groups, and shares one function between identical groups, so
    bindings are matched by data flow: each binding of a fused op (or of ``main``) is the first
    unmatched binding of ``mod`` that reads the same values.
    """
    lowering = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(), relax.transform.FuseOps()]
    with tvm.target.Target(target) if isinstance(target, str) else target:
        fused = tvm.transform.Sequential(lowering)(mod)
    bindings = [b for block in fused["main"].body.blocks for b in block.bindings]
    returned = fused["main"].body.body

    def is_op(binding: relax.Binding) -> bool:
        """An op of ``ReduceGraph(mod)``: a call, or the tuple ``main`` returns (a PyTorch
        program's outputs, a model's several outputs); FuseTIR folds the other tuples."""
        return isinstance(binding.value, relax.Call) or (
            isinstance(binding.value, relax.Tuple) and binding.var.same_as(returned))

    if sum(map(is_op, bindings)) != len(op_cluster):
        return {}
    high = [b for block in mod["main"].body.blocks for b in block.bindings]
    unmatched = {b.var: frozenset(relax.analysis.free_vars(b.value)) for b in high}
    # a Var of the lowered module -> the Var of mod
    same = dict(zip(fused["main"].params, mod["main"].params, strict=True))

    def match(value: relax.Expr, var: relax.Var) -> relax.Var | None:
        reads = frozenset(same.get(v, v) for v in relax.analysis.free_vars(value)
                          if v not in constant)
        found = next((h for h, r in unmatched.items() if r == reads), None)
        if found is not None:
            del unmatched[found]
            same[var] = found
        return found

    constant: set[relax.Var] = set()  # parameters of fused functions bound to constants
    cluster: dict[relax.Var, int] = {}
    index = -1
    for binding in bindings:
        value = binding.value
        if not is_op(binding):  # tuples of op results, which FuseTIR and DCE drop
            match(value, binding.var)
            continue
        index += 1
        callee = fused[value.op] if isinstance(value, relax.Call) and isinstance(
            value.op, tvm.ir.GlobalVar) else None
        if not isinstance(callee, relax.Function):
            found = match(value, binding.var)
            if found is not None:
                cluster[found] = int(op_cluster[index])
            continue
        for param, arg in zip(callee.params, value.args, strict=True):
            if isinstance(arg, relax.Var):
                same[param] = same.get(arg, arg)
            else:
                constant.add(param)
        for block in callee.body.blocks:
            for inner in block.bindings:
                found = match(inner.value, inner.var)
                if found is not None:
                    cluster[found] = int(op_cluster[index])
        output = callee.body.body
        if isinstance(output, relax.Var) and output in same:
            same[binding.var] = same[output]
    return cluster


def distribute_and_reduce(mod: tvm.IRModule, splits: Sequence[DistributedSplit],
                          op_cluster: Sequence[int] | None = None, home: int = 0,
                          target: str | tvm.target.Target = "llvm",
                          topology: Topology | None = None, centred_rows: bool = True
                          ) -> tuple[tvm.IRModule, list[int]]:
    """:func:`distribute`, then ReduceGraph: the reduced module and the cluster of each binding
    of its ``main``. ``op_cluster`` places the ops of ``ReduceGraph(mod)`` that run whole (see
    :func:`planned_clusters`); a binding FuseOps made anew runs where its first producer runs."""
    mod = prepare_for_splits(mod)
    placed = planned_clusters(mod, op_cluster, target) if op_cluster is not None else {}
    distributed, cluster_of = _distribute(mod, splits, placed, home, topology, centred_rows)
    reduced = ReduceGraph(target)(distributed)
    # FuseOps binds a fused group to a new Var; every group reads a value of its own cluster
    # or a boundary marker, which runs on the reading cluster. Vars are keyed by their node
    # (hash: the handle): the IR hands out a new Python object at every read, and comparing
    # those goes through the FFI (millions of times on a 256-way split).
    where = {hash(var): cluster for var, cluster in cluster_of.items()}
    for block in reduced["main"].body.blocks:
        for binding in block.bindings:
            if hash(binding.var) in where:
                continue
            reader = _crossing_cluster(binding.value)
            if reader is not None:
                where[hash(binding.var)] = reader
                continue
            operands = [hash(v) for v in relax.analysis.free_vars(binding.value)
                        if hash(v) in where]
            where[hash(binding.var)] = where[operands[0]] if operands else home
    reduced = _by_level(lower_crossings(reduced, target), where)
    clusters = [where[hash(b.var)] for block in reduced["main"].body.blocks
                for b in block.bindings]
    return reduced, clusters


def _by_level(mod: tvm.IRModule, cluster_of: dict[int, int]) -> tvm.IRModule:
    """``mod`` with each cluster's bindings of ``main`` in order of their level (the longest
    chain of bindings of the block they depend on), and as few switches between clusters as
    that allows.

    Each cluster runs its ops in binding order. As DistributeTensors emits a redistribution
    part by part, a cluster would cut the pieces it sends for part ``p + 1`` only after its
    own part ``p`` is done, which waits for the others' pieces: every part would wait for the
    one before. By level, every cluster first cuts and sends what the others need, then
    assembles and computes its own part. Between clusters, the bindings are listed one
    cluster at a time for as long as that cluster's next binding is ready (fewer segments);
    the lowest-level next binding of any cluster always is. ``cluster_of`` is keyed by each
    Var's hash (its node).
    """
    main = mod["main"]
    blocks = []
    for block in main.body.blocks:
        # By position in the block: Vars read back from the IR are new Python objects, whose
        # look-ups compare through the FFI (millions of times on a 256-way split).
        bindings = list(block.bindings)
        position: dict[int, int] = {}  # by hash, as cluster_of
        level: list[int] = []
        inputs: list[list[int]] = []  # the positions of the block's values each binding reads
        queues: dict[int, list[int]] = {}
        for i, binding in enumerate(bindings):
            reads = [position[h] for v in relax.analysis.free_vars(binding.value)
                     if (h := hash(v)) in position]
            inputs.append(reads)
            level.append(1 + max((level[j] for j in reads), default=-1))
            position[hash(binding.var)] = i
            queues.setdefault(cluster_of.get(hash(binding.var), -1), []).append(i)
        for queue in queues.values():
            queue.sort(key=level.__getitem__)
            queue.reverse()  # popped from the end
        done = [False] * len(bindings)
        ordered: list[relax.VarBinding] = []
        current = None
        # (level, cluster, position) of each cluster's next binding; an entry whose binding is
        # no longer its cluster's next is stale, and dropped when it comes to the top
        heads = [(level[queue[-1]], c, queue[-1]) for c, queue in queues.items()]
        heapq.heapify(heads)
        while len(ordered) < len(bindings):
            if current is None or not queues[current] or not all(
                    done[j] for j in inputs[queues[current][-1]]):
                while not queues[heads[0][1]] or queues[heads[0][1]][-1] != heads[0][2]:
                    heapq.heappop(heads)
                current = heads[0][1]  # the lowest-level next binding of any cluster
            i = queues[current].pop()
            ordered.append(bindings[i])
            done[i] = True
            if queues[current]:
                heapq.heappush(heads, (level[queues[current][-1]], current,
                                       queues[current][-1]))
        blocks.append(type(block)(ordered))
    body = relax.SeqExpr(blocks, main.body.body)
    return _with_main(mod, relax.Function(main.params, body, main.ret_ty, main.is_pure,
                                          main.attrs))

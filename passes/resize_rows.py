"""Which input rows each output row of a ``resize2d`` reads, and with what weights.

A linear resize is separable: its rows are a matrix of interpolation weights (two non-zero
weights per output row) times the input's rows, after its columns are resized. DistributeTensors
runs a resize of row bands band by band with the band's rows of that matrix when the resize
does not shift with the bands (one that aligns the corners, or scales by no whole factor).
The weights follow TVM's ``topi.image.resize`` in float32: the source coordinate of each output
row by the coordinate mode, its floor and the next row (both clamped to the image), and the
fraction between them.
"""

from __future__ import annotations

import numpy as np

LINEAR_MODES = frozenset(("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"))
"""Coordinate modes of a linear resize whose rows :func:`linear_rows` gives. A resize in any of
them maps an image to its own size as the identity, so its columns can be resized alone."""


def source_rows(height: int, out: int, mode: str) -> np.ndarray:
    """The source coordinate (float32) of each of ``out`` output rows resized from ``height``
    rows, by coordinate mode ``mode`` (one of :data:`LINEAR_MODES`, or
    ``tf_half_pixel_for_nn``)."""
    y = np.arange(out, dtype=np.float32)
    scale = np.float32(height) / np.float32(out)
    if mode == "align_corners":
        return np.float32(height - 1) / np.float32(max(out - 1, 1)) * y
    if mode == "asymmetric":
        return scale * y
    if mode == "pytorch_half_pixel" and out == 1:
        return np.zeros(1, np.float32)
    if mode == "tf_half_pixel_for_nn":
        return (y + np.float32(0.5)) * scale
    return (y + np.float32(0.5)) * scale - np.float32(0.5)


def rounds_ties(height: int, out: int, mode: str) -> bool:
    """Whether a nearest resize rounding to the nearest row meets ties (a source coordinate
    halfway between two rows), which TVM rounds to the even row: a band's own resize, shifted
    by an odd number of rows, would round them the other way."""
    source = source_rows(height, out, mode)
    return bool(np.any(source - np.floor(source) == np.float32(0.5)))


def linear_rows(height: int, out: int, mode: str) -> np.ndarray:
    """The ``(out, height)`` float32 matrix of a linear resize's row weights."""
    source = source_rows(height, out, mode)
    below = np.floor(source)
    fraction = source - below
    weights = np.zeros((out, height), np.float32)
    rows = np.arange(out)
    low = np.clip(below.astype(np.int64), 0, height - 1)
    high = np.clip(below.astype(np.int64) + 1, 0, height - 1)
    np.add.at(weights, (rows, low), np.float32(1) - fraction)
    np.add.at(weights, (rows, high), fraction)
    return weights


def band_bounds(height: int, out: int, mode: str, bands: tuple[tuple[int, int], ...]
                ) -> tuple[tuple[int, int], ...] | None:
    """Output rows for each band of input rows ``bands``: those whose source coordinate lies
    in the band (the first band also takes any above it), or None when a band would get none
    (a resize that shrinks the image)."""
    source = source_rows(height, out, mode)
    starts = [0] + [int(np.searchsorted(source, begin, side="left")) for begin, _ in bands[1:]]
    bounds = tuple(zip(starts, [*starts[1:], out], strict=True))
    return None if any(b >= e for b, e in bounds) else bounds

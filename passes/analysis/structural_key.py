"""StructuralKey: a dict key for IR nodes by structural equality, not by hash alone."""

from __future__ import annotations

import tvm_ffi


class StructuralKey:
    """A dict key for an IR node: hashed by ``tvm_ffi.structural_hash``, equal to another
    key only when their nodes are ``tvm_ffi.structural_equal``.

    The structural hash is a hash, not an identity: distinct nodes share it. In TVM 0.27,
    ``R.Tensor((1, 3, 2, 56), "float32")`` and ``R.Tensor((1, 3, 1, 1), "float32")`` hash
    alike, so a cache keyed by the hash alone hands one's entry to the other.

    Example
    -------
    ``cache[StructuralKey(var.ty)]`` finds the entry of any structurally equal type.
    """

    __slots__ = ("_hash", "node")

    def __init__(self, node: object) -> None:
        self.node = node
        self._hash = tvm_ffi.structural_hash(node)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, StructuralKey) and self._hash == other._hash
                and tvm_ffi.structural_equal(self.node, other.node))

    def __repr__(self) -> str:
        return f"StructuralKey({self.node})"

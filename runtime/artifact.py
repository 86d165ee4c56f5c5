"""ChipletModule: the compiled artifact; export to and load from one ``.tar``."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata

import tvm
import tvm_ffi
from tvm import relax

from tvm_chiplet.runtime.files import atomic_write
from tvm_chiplet.targets.faults import (
    add_random_faults,
    dead_parts,
    fault_table,
    with_faults,
)
from tvm_chiplet.targets.routing import RoutingTables, routing_tables
from tvm_chiplet.targets.system import ChipletSystem

FORMAT_VERSION = 2  # 2: routes.json, the routing tables
MEMBERS = ("lib.so", "plan.json", "system.json", "routes.json")


@tvm_ffi.register_error
class ArtifactError(ValueError):
    """An artifact is missing, truncated, tampered with or from an incompatible version."""


def _versions() -> dict[str, str]:
    def version(dist: str) -> str:
        try:
            return importlib_metadata.version(dist)
        except importlib_metadata.PackageNotFoundError:
            return "unknown"

    return {
        "format": str(FORMAT_VERSION),
        "tvm_chiplet": version("tvm-chiplet"),
        "tvm": tvm.__version__,
        "tvm_ffi": version("apache-tvm-ffi"),
    }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_COPY_BUFFER = 1 << 20
"""Bytes per read when a member streams into the artifact's tar."""


class _HashingReader:
    """A binary file read through, its SHA-256 updated with every byte read."""

    def __init__(self, handle) -> None:
        self._handle = handle
        self._hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self._hash.update(data)
        return data

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _member(name: str, size: int) -> tarfile.TarInfo:
    """A tar member header: ``name``, ``size`` bytes, mtime 0 (artifacts differ only in content)."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    return info


@dataclass(frozen=True)
class InputSpec:
    """Name, static shape and dtype of one model input, as the artifact records it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    index_range: tuple[int, int] | None = None
    """``[low, high)`` of an integer input that indexes a table (an embedding's token ids):
    the values outside it would read past the table, which the compiled lookup does not
    check."""

    def to_dict(self) -> dict:
        spec = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.index_range is not None:
            spec["index_range"] = list(self.index_range)
        return spec

    @classmethod
    def from_dict(cls, data: dict) -> InputSpec:
        bounds = data.get("index_range")
        return cls(data["name"], tuple(data["shape"]), data["dtype"],
                   tuple(bounds) if bounds is not None else None)


@dataclass
class ChipletModule:
    """A model compiled for a chiplet system: one Relax executable plus its plan.

    ``executable`` holds ``main`` and every segment function; ``plan`` is the ``plan.json``
    dictionary (segments, transfers, tasks, messages); ``system`` the chiplet system;
    ``routing`` its routing tables (``routes.json``, derived from the system when not given),
    which the device simulator walks to route messages.
    """

    executable: object
    plan: dict
    system: ChipletSystem
    input_specs: list[InputSpec]
    target: str = ""
    path: str | None = None
    _tmpdir: object = field(default=None, repr=False)
    routing: RoutingTables | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.routing is None:
            self.routing = routing_tables(self.system)

    @property
    def metadata(self) -> dict:
        return {
            "versions": _versions(),
            "target": self.target,
            "inputs": [spec.to_dict() for spec in self.input_specs],
            "num_segments": len(self.plan.get("segments", [])),
        }

    def vm(self) -> relax.VirtualMachine:
        """A fresh VirtualMachine over the executable (one per thread: a VM is not thread-safe)."""
        return relax.VirtualMachine(self.executable, tvm.cpu())

    def export_library(self, path: str | os.PathLike) -> str:
        """Write the artifact ``.tar`` (lib.so, plan.json, system.json, routes.json, metadata.json)
        atomically.

        The file appears complete or not at all: everything is written to a temporary file next to
        ``path`` and renamed into place.
        """
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise ArtifactError(f"cannot write {path!r}: directory {directory!r} does not exist")
        with tempfile.TemporaryDirectory(prefix="chiplet-export-") as work:
            lib_path = os.path.join(work, "lib.so")
            self.executable.export_library(lib_path)
            payload = {
                "plan.json": json.dumps(self.plan, indent=1, sort_keys=True).encode(),
                "system.json": json.dumps(self.system.to_dict(), indent=1).encode(),
                "routes.json": json.dumps(self.routing.to_dict()).encode(),
            }

            def write_tar(tmp_path: str) -> None:
                # The library (the weights: hundreds of MB) streams from its file into the tar
                # and is hashed on the way; metadata.json, with the checksums, comes last.
                checksums = {name: _sha256(data) for name, data in payload.items()}
                with tarfile.open(tmp_path, mode="w", copybufsize=_COPY_BUFFER) as tar, \
                        open(lib_path, "rb") as handle:
                    library = _HashingReader(handle)
                    tar.addfile(_member("lib.so", os.path.getsize(lib_path)), library)
                    checksums["lib.so"] = library.hexdigest()
                    meta = self.metadata
                    meta["checksums"] = checksums
                    members = {**payload,
                               "metadata.json": json.dumps(meta, indent=1, sort_keys=True).encode()}
                    for name, data in members.items():
                        tar.addfile(_member(name, len(data)), io.BytesIO(data))

            atomic_write(path, write_tar)
        self.path = path
        return path

    def check_faults(self, faults: dict | str | None = None,
                     random_faults: dict | str | None = None, seed: int = 0) -> str:
        """Check that the plan runs as compiled on the artifact's system with more parts dead.

        ``faults`` (a ``[faults]`` table or ``tvmc --faults`` text) and ``random_faults``
        (counts, ``"chiplets=2,links=4"``, drawn with ``seed`` among what ``faults`` leaves, as
        ``tvmc compile --random-faults`` draws them) are applied to the artifact's system
        (faults it was compiled with are accepted as they are). When no task, message, weight
        fetch, DRAM controller or route of the plan uses a dead part, the plan runs as
        compiled: its routes avoid them and they carried none of its traffic.

        Returns
        -------
        str
            One line saying what is dead and that the plan does not use it (empty when
            nothing new is dead).

        Raises
        ------
        ArtifactError
            Naming the dead clusters, DRAM controllers and links the plan uses, and the
            ``tvmc compile --faults`` text to recompile with.
        """
        compiled = (self.plan.get("faults") or {}).get("dead", {})
        table = fault_table(faults) if faults else {}
        new = {kind: [i for i in items if i not in compiled.get(kind, [])]
               for kind, items in table.items()}
        new = {kind: items for kind, items in new.items() if items}
        if random_faults:
            new, _ = add_random_faults(self.system, new, random_faults, seed)
        if not new:
            return ""
        faulty, notes = with_faults(self.system, new)
        dead_clusters, dead_links = dead_parts(self.system, faulty)
        names = self.system.clusters
        tasks = self.plan.get("tasks", [])
        fetches = self.plan.get("dram_fetches", [])
        used = (set(self.plan.get("clusters_used", [])) | {t["cluster"] for t in tasks}
                | {f["cluster"] for f in fetches}
                | {f["lender"] for f in fetches if f.get("lender") is not None})
        routes = [m["route"] for m in self.plan.get("messages", [])]
        routes += [f["route"] for f in fetches] + [t["route"] for t in self.plan.get(
            "transfers", [])]
        broken = []
        held = [c for c in dead_clusters if c in used]
        if held:
            broken.append(f"clusters {', '.join(names[c].name for c in held)} hold planned work")
        lost_drams = sorted({f["dram"] for f in fetches if f.get("dram") is not None
                             and self.system.drams[f["dram"]].node in dead_clusters})
        if lost_drams:
            broken.append("weights stream from DRAM controller(s) "
                          + ", ".join(f"{d} on {names[self.system.drams[d].node].name}"
                                      for d in lost_drams))
        crossed = [i for i in dead_links if any(i in route for route in routes)]
        if crossed:
            shown = ", ".join(f"{names[self.system.links[i].src].name}->"
                              f"{names[self.system.links[i].dst].name}" for i in crossed[:6])
            more = f" ({len(crossed)} in all)" if len(crossed) > 6 else ""
            broken.append(f"routes cross dead links {shown}{more}")
        text = _fault_text(new)
        if not broken:
            return (f"faults {text} on {self.system.name}: no task, message, weight fetch or "
                    f"route of the plan uses them ({len(used)} cluster(s), {len(routes)} routes "
                    f"checked); running as compiled"
                    + "".join(f"; {note}" for note in notes))
        every = _fault_text({kind: [*compiled.get(kind, []), *new.get(kind, [])]
                             for kind in (*compiled, *new)})
        where = self.path or "this artifact"
        raise ArtifactError(
            f"{where} was compiled for {self.system.name} without faults {text}, which break "
            f"its plan: "
            f"{'; '.join(broken + notes)}; recompile it for the faulty system "
            f"(tvmc compile ... --faults '{every}', or build(..., faults=...))")

    def run(self, inputs, **options):
        """Run on the host, one worker per cluster; see :class:`tvm_chiplet.runtime.Executor`."""
        from tvm_chiplet.runtime.executor import Executor

        return Executor(self).run(inputs, **options)


def _fault_text(table: dict[str, list]) -> str:
    """``tvmc --faults`` text for a ``[faults]`` table: ``"x1y1,x0y0.k3,x0y0:x1y0"``."""
    return ",".join(":".join(item) if isinstance(item, list) else item
                    for items in table.values() for item in items)


def load_module(path: str | os.PathLike) -> ChipletModule:
    """Load a ``.tar`` written by :meth:`ChipletModule.export_library`, verifying it first.

    Raises
    ------
    ArtifactError
        If the file is missing or not a tar, a member is missing, a checksum does not match
        (names the member), or it was built by an incompatible TVM / format version.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ArtifactError(f"artifact {path!r} does not exist")
    try:
        with tarfile.open(path, mode="r") as tar:
            names = tar.getnames()
            missing = [m for m in ("metadata.json", *MEMBERS) if m not in names]
            if missing:
                raise ArtifactError(
                    f"artifact {path!r} is incomplete: missing {missing}; rebuild it with "
                    "tvmc compile"
                )
            payload = {}
            for name in ("metadata.json", *MEMBERS):
                member = tar.extractfile(name)
                payload[name] = member.read() if member else b""
    except (tarfile.TarError, EOFError, OSError) as err:
        raise ArtifactError(
            f"artifact {path!r} is not a readable tar archive (truncated or corrupt: {err}); "
            "rebuild it with tvmc compile"
        ) from None
    try:
        meta = json.loads(payload["metadata.json"])
    except ValueError:
        raise ArtifactError(f"artifact {path!r}: metadata.json is not valid JSON") from None
    for name in MEMBERS:
        expected = meta.get("checksums", {}).get(name)
        if expected != _sha256(payload[name]):
            raise ArtifactError(
                f"artifact {path!r}: checksum of {name} does not match metadata.json "
                "(the file was modified or corrupted); rebuild it with tvmc compile"
            )
    built, here = meta.get("versions", {}), _versions()
    for key in ("format", "tvm"):
        if built.get(key) != here[key]:
            raise ArtifactError(
                f"artifact {path!r} was built with {key} {built.get(key)}, this installation has "
                f"{here[key]}; rebuild it with this installation"
            )
    tmpdir = tempfile.TemporaryDirectory(prefix="chiplet-load-")
    lib_path = os.path.join(tmpdir.name, "lib.so")
    with open(lib_path, "wb") as handle:
        handle.write(payload["lib.so"])
    executable = tvm.runtime.load_module(lib_path)
    system = ChipletSystem.from_dict(
        json.loads(payload["system.json"]), source=f"{path}:system.json"
    )
    return ChipletModule(
        executable=executable,
        plan=json.loads(payload["plan.json"]),
        system=system,
        input_specs=[InputSpec.from_dict(i) for i in meta.get("inputs", [])],
        target=meta.get("target", ""),
        path=path,
        _tmpdir=tmpdir,
        routing=RoutingTables.from_dict(json.loads(payload["routes.json"])),
    )

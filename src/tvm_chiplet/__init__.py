"""tvm-chiplet: compile DNNs with Apache TVM for chiplet / multi-cluster accelerators.

The public API: :func:`build` compiles a model for a chiplet target into a
:class:`ChipletModule` (``export_library`` writes the ``.tar``), :func:`load_module` loads one
back, :class:`ChipletSystem` describes hardware, and :mod:`tvm_chiplet.passes` holds the IR
passes that drop into any ``tvm.transform.Sequential``.
"""

from tvm_chiplet import passes
from tvm_chiplet.build import build
from tvm_chiplet.runtime.artifact import ChipletModule, load_module
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_toml import list_presets, load_system
from tvm_chiplet.targets.target import parse_target

__version__ = "0.1.0"

__all__ = [
    "ChipletModule",
    "ChipletSystem",
    "build",
    "list_presets",
    "load_module",
    "load_system",
    "parse_target",
    "passes",
]

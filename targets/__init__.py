"""What the hardware is and how to lower for it: systems, topology, cost model, targets."""

from tvm_chiplet.targets.system import ChipletSystem, SystemConfigError
from tvm_chiplet.targets.system_toml import list_presets, load_system
from tvm_chiplet.targets.topology import Topology

__all__ = ["ChipletSystem", "SystemConfigError", "Topology", "list_presets", "load_system"]

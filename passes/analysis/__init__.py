"""Read-only analyses of the IR; each returns plain data and never modifies a module.

``op_graph`` holds the op graph data (``OpGraph``, ``OpNode``); ``extract_op_graph`` builds it
from a reduced module; ``dependency_modules`` cuts it into data-dependency modules;
``lower_bound`` bounds the latency of a plan; ``segments`` reads a partitioned module back.
"""

"""Python's cyclic garbage collector, paused while the project builds millions of objects."""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def collection_paused():
    """Python's cyclic garbage collector paused (if it runs), and resumed after; also a function
    decorator (``@collection_paused()``).

    Each collection walks every object still alive, and the work that builds the most objects
    runs with millions alive: realising a plan (HF-layout BERT-base's plan on the 16x16 mesh
    leaves about 2 million in reference cycles) and building its device workload (ResNet-50's
    plan on the 16x16 mesh sends 1.7 million messages: 4.4 s with the collector running, 1.8 s
    paused). The garbage is collected by the collector's next run after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

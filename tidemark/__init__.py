"""tidemark: exactly-once materialized views of streams on Apache Spark.

``tidemark.materialize`` (:func:`tidemark.spark.api.materialize`), ``tidemark.adopt``
(:func:`tidemark.spark.adopt.adopt`), ``tidemark.reset``
(:func:`tidemark.ops_reset.reset`), ``tidemark.rebuild`` (:func:`tidemark.spark.rebuild.rebuild`), ``tidemark.scale`` and ``tidemark.layout_history`` (:mod:`tidemark.ops`), ``tidemark.open_view`` (:func:`tidemark.drivers.store.query.open_view`) and ``tidemark.RuntimeOptions`` (:mod:`tidemark.options`) are
imported when first used, so that ``import tidemark`` stays cheap (executors import it).
"""

__version__ = "0.1.0"

__all__ = [
    "materialize",
    "adopt",
    "reset",
    "rebuild",
    "scale",
    "layout_history",
    "open_view",
    "RuntimeOptions",
    "__version__",
]

_LAZY = {
    "materialize": ("tidemark.spark.api", "materialize"),
    "adopt": ("tidemark.spark.adopt", "adopt"),  # start a view from an existing table
    "reset": ("tidemark.ops_reset", "reset"),
    "rebuild": ("tidemark.spark.rebuild", "rebuild"),  # change a live view: build a shadow, replace in one transaction
    "scale": ("tidemark.ops", "scale"),  # rescale a running view at its next batch
    "layout_history": ("tidemark.ops", "layout_history"),
    "RuntimeOptions": ("tidemark.options", "RuntimeOptions"),
    "open_view": ("tidemark.drivers.store.query", "open_view"),  # a store view: get(key), scan(prefix)
}


def __getattr__(name):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'tidemark' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

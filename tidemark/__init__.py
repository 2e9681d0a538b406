"""tidemark: exactly-once materialized views of streams on Apache Spark."""

__version__ = "0.1.0"


def materialize(*args, **kwargs):
    """Materialize a collection into an endpoint, exactly once. See :func:`tidemark.spark.api.materialize`."""
    from tidemark.spark.api import materialize as _materialize

    return _materialize(*args, **kwargs)


def reset(*args, **kwargs):
    """Start a view over on purpose (drops its resources and checkpoint). See :func:`tidemark.spark.api.reset`."""
    from tidemark.spark.api import reset as _reset

    return _reset(*args, **kwargs)


def open_view(spec, name, isolation="read-committed", timeout=30.0):
    """Read the ``store`` view ``name`` of ``spec`` (``get(key)``, ``scan(prefix=None)``). See :func:`tidemark.drivers.store.query.open_view`."""
    from tidemark.drivers.store.query import open_view as _open_view

    return _open_view(spec, name, isolation=isolation, timeout=timeout)

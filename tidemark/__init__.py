"""tidemark: exactly-once materialized views of streams on Apache Spark."""

__version__ = "0.1.0"


def materialize(*args, **kwargs):
    """Materialize a collection into an endpoint, exactly once. See :func:`tidemark.spark.api.materialize`."""
    from tidemark.spark.api import materialize as _materialize

    return _materialize(*args, **kwargs)

"""Collections: keys, schema validation, reductions and projections (pure Python).

The spec that names them is :mod:`tidemark.spec`."""

from tidemark.collection.collection import Collection, collection_from_spec

__all__ = ["Collection", "collection_from_spec"]

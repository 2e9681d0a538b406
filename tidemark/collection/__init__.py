"""Collections: spec models, keys, schema validation, reductions and projections (pure Python)."""

from tidemark.collection.collection import Collection, collection_from_spec
from tidemark.collection.spec import (
    BindingConfig,
    CollectionSpec,
    MaterializationSpec,
    SourceSpec,
    TidemarkSpec,
    load_spec,
    parse_spec,
)

__all__ = [
    "BindingConfig",
    "Collection",
    "CollectionSpec",
    "MaterializationSpec",
    "SourceSpec",
    "TidemarkSpec",
    "collection_from_spec",
    "load_spec",
    "parse_spec",
]

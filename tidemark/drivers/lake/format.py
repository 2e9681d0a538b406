"""A table format: what a lake endpoint (Delta, Iceberg) is to the one lake driver
(:class:`~tidemark.drivers.lake.driver.LakeDriver`), which holds the commit pattern.  A plain
class constructed from the endpoint's config: some data (settings, the type mapping, the
properties kept on every table, a dead-letter table) and the operations on its tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, Protocol, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from tidemark.drivers.base import Capabilities
from tidemark.drivers.common.columns import Column
from tidemark.drivers.lake.model import LakeTable
from tidemark.errors import RecoveryError, TidemarkError
from tidemark.policy import RetryPolicy, retry
from tidemark.protocol.messages import BindingSpec, SpecResponse

H = TypeVar("H")  # a format's table handle: delta-rs's DeltaTable, pyiceberg's Table
T = TypeVar("T")


@dataclass(frozen=True)
class Table(Generic[H]):
    """A table as :meth:`TableFormat.open` found it, with what the lake driver reads of it."""

    handle: H
    properties: dict
    columns: dict  # column name -> its type, as ``TableFormat.type_of`` gives them
    document_required: bool  # ``flow_document`` is required: the full form (not lean rows)


@dataclass(frozen=True)
class Staged:
    """Batch ``batch``'s staged files ``names``, under ``base`` in ``fs``."""

    fs: pafs.FileSystem
    base: str
    names: list[str]
    batch: int

    def paths(self, where: str) -> list[str]:
        """Their paths; refuses if one is gone.  Asked only of a table that does not hold the batch."""
        paths = [f"{self.base.rstrip('/')}/{n}" for n in self.names]
        lost = [p for p, info in zip(paths, self.fs.get_file_info(paths)) if info.type != pafs.FileType.File]
        if lost:
            raise RecoveryError(
                f"{where}: batch {self.batch} is in the recovery log but not applied, and its staged files are gone: {lost}"
            )
        return paths


class LakeSettings(Protocol):
    """What the lake driver reads of a format's settings (a frozen dataclass)."""

    @property
    def staging(self) -> str: ...
    @property
    def policy(self) -> RetryPolicy: ...
    def staging_fs(self) -> tuple[pafs.FileSystem, str]: ...  # the staging folder's file system, its base path


class DeadLetters(Protocol):
    """A dead-letter table: a batch's invalid documents, applied with the batch (Delta's)."""

    location: str

    # append the staged quarantine files once (skip a table that holds the batch)
    def apply(self, staged: Staged, owner: tuple[str, str]) -> None: ...
    def read(self, materialization: str) -> list[dict]: ...
    def drop(self, materialization: str) -> list[str]: ...  # what was done
    # a rebuild's cut-over: the shadow's rows become the view's; what was done
    def move(self, shadow: str, materialization: str) -> Optional[str]: ...


class TableFormat(Protocol[H]):
    """A lake endpoint's table format: its data, then its operations."""

    name: str  # the endpoint's: "delta"
    label: str  # how messages name a table: "delta table"
    capabilities: Capabilities
    spec: SpecResponse  # config and resource schemas (a ``path`` resource's shadow is a sibling folder)
    upkeep: dict[str, str]  # properties kept set on every table

    @property
    def settings(self) -> LakeSettings: ...
    @property
    def errors(self) -> tuple[type[BaseException], ...]: ...  # the library's, for ``translate``
    @property
    def type_of(self) -> Callable[[str], Any]: ...  # a column kind -> the format's type
    @property
    def quarantine(self) -> Optional[DeadLetters]: ...  # None: no dead-letter table

    def translate(self, exc: BaseException, where: str) -> TidemarkError: ...
    def model(self, binding: BindingSpec) -> LakeTable: ...  # refuses a bad resource (SpecError)
    def open(self, name: str) -> Optional[Table[H]]: ...  # the table now, or None
    # what a stage records of its checkpoint beside its batch; the last batch of it a table holds (or -1)
    def tag(self, materialization: str, checkpoint_id: Any) -> dict: ...
    def batch(self, table: Table[H], materialization: str, tag: dict) -> int: ...
    # the key columns and ``model.read_names`` of the rows whose key columns hold one of ``values``
    # (a list per key column; may over-select), or of every row (``values`` None)
    def scan(self, table: Table[H], model: LakeTable, values: Optional[list[list]]) -> Optional[pa.Table]: ...
    # refuse (IncompatibleSchema) what the format cannot do to the table beyond the columns the
    # driver checks; ``rebuild``: a cut-over is to replace its schema
    def check(self, model: LakeTable, table: Table[H], rebuild: bool) -> None: ...
    # create the table with ``properties`` (``table`` None), or add ``missing`` and set ``properties``
    def schema(self, model: LakeTable, table: Optional[Table[H]], missing: list[Column], properties: dict) -> None: ...
    # ONE commit of the staged files recording the batch of ``owner`` (the table does not hold it)
    def commit(self, model: LakeTable, table: Table[H], staged: Staged, owner: tuple[str, str]) -> None: ...
    # table ``live`` takes the shadow's rows and schema, recording ``batch`` of ``owner`` and setting
    # ``properties``: in one commit where the format can; idempotent (a kill between two is finished by a re-run)
    def replace(
        self, live: LakeTable, shadow: Table[H], owner: tuple[str, str], batch: int, properties: dict
    ) -> None: ...
    def drop(self, model: LakeTable) -> Optional[str]: ...  # delete the table and its files: what was done
    def close(self) -> None: ...


class FormatClass(Protocol):
    def __call__(self, config: dict) -> TableFormat[Any]: ...
    def resolve_config(self, config: dict, base_dir: str) -> dict: ...  # the config against the spec's folder


def run(fmt: TableFormat[Any], fn: Callable[[], T], what: str, where: str, *, idempotent: bool = True) -> T:
    """Run ``fn`` translating the format's library errors; retry transient ones under the
    endpoint's policy if ``fn`` may run twice (not a write into an open staged file)."""

    def attempt() -> T:
        try:
            return fn()
        except fmt.errors as exc:
            raise fmt.translate(exc, where) from exc

    return retry(attempt, fmt.settings.policy, what=f"{fmt.name} {what}") if idempotent else attempt()

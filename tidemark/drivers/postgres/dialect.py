"""PostgreSQL's SQL: types, identifiers (63 bytes), upserts, advisory locks, catalogs."""

from __future__ import annotations

from typing import Optional, Sequence

from tidemark.collection.decimals import MAX_DIGITS
from tidemark.collection.plan import FieldPlan
from tidemark.collection.sql_plan import KEPT_ORDER, SQL_STRATEGIES
from tidemark.drivers.common.columns import member_kind
from tidemark.drivers.common.datetimes import readable_text
from tidemark.drivers.limits import ValueLimits
from tidemark.drivers.sql import (
    BOOLEAN,
    DOCUMENT_COLUMN,
    INTEGER,
    JSON,
    NUMBER,
    TEXT,
    TIMESTAMP,
    Column,
    Dialect,
    TableModel,
    check_identifier,
)
from tidemark.drivers.sql.dialect import Reduction
from tidemark.drivers.sql.model import IS_DELETE, STAGED_DOCUMENT, STORE_ORDER, WAS_LOADED, scale_of_kind, staged_column
from tidemark.drivers.sql.reduce import LeanInstant, ReduceSql

SQL_TYPES = {
    TEXT: "text",
    INTEGER: "bigint",
    NUMBER: "double precision",
    BOOLEAN: "boolean",
    JSON: "jsonb",
    TIMESTAMP: "timestamp with time zone",
}
MAX_IDENTIFIER_BYTES = 63  # PostgreSQL cuts longer identifiers (NAMEDATALEN - 1) without an error
DDL_LOCK = "SELECT pg_advisory_xact_lock(hashtext('tidemark ddl'))"


class PostgresDialect(Dialect):
    title = "PostgreSQL"
    placeholder = "%s"
    json_placeholder = "%s::jsonb"
    types = SQL_TYPES
    decimal_type = "numeric(38,{scale})"  # as format_type() names it
    document_type = "jsonb"
    document_types = ("jsonb", "json")
    #: text and jsonb hold no U+0000; a primary key's index entry at most 2,704 bytes (its texts: 2,600 here)
    limits = ValueLimits(nul_in_strings=False, max_key_bytes=2600)
    row_id_type = "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    max_identifier_bytes = MAX_IDENTIFIER_BYTES
    schemas = True
    temp_schema = "pg_temp"
    bool_as_int = False
    json_as_text = False  # psycopg reads jsonb as Python values
    ddl_lock = DDL_LOCK  # concurrent DDL races in PostgreSQL's catalogs
    for_update = " FOR UPDATE"
    lean_rows = True
    lean_date_times = True  # timestamptz keeps the instant; the remainder another spelling
    date_time_column = staticmethod(readable_text)  # a leap second with a fraction: read for PostgreSQL
    typed_staging = True
    typed_remainder = True

    def widens(self, existing_type: str, col: Column) -> bool:
        """Whether Apply can change an existing value column to ``col``'s type: every value the
        column holds is still valid under the new schema (integer -> number; anything -> a union
        or object, i.e. jsonb; a date-time string that lost its format -> text).  The column is
        then recomputed from ``flow_document``, which holds each value exactly."""
        return (existing_type, col.kind) in (("bigint", NUMBER), ("timestamp with time zone", TEXT)) or (
            col.kind == JSON
            and existing_type in ("text", "bigint", "double precision", "boolean", "timestamp with time zone")
        )

    def document_text(self, expr: str) -> str:
        return f"{expr}::text"

    def quarantine_extra(self) -> str:
        return ", quarantined_at timestamp with time zone NOT NULL DEFAULT now()"

    def add_column(self, model, col: Column) -> str:
        return (
            f"ALTER TABLE {self.ident(model)} ADD COLUMN IF NOT EXISTS {self.quote(col.name)} {self.column_type(col)}"
        )

    def upsert(self, keys: Sequence[str], columns: Sequence[str]) -> str:
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns)
        return f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}"

    # staging: a Load table emptied by its commit, staging tables without a key (a key stored
    # twice is rare: DISTINCT ON at commit), TRUNCATE, DELETE … USING, UPDATE … FROM
    load_index_type = "integer"
    load_table_options = " ON COMMIT DELETE ROWS"
    order_type, flag_type = "bigint", "boolean"
    flag_true, flag_false = "true", "false"
    staging_keyed = False
    error_aborts_transaction = True

    def empty_table(self, table: str) -> str:
        return f"TRUNCATE {table}"

    def latest_staged(self, staging: str, key_sources: Sequence[str]) -> str:
        kc = ", ".join(key_sources)
        return f"(SELECT DISTINCT ON ({kc}) * FROM {staging} ORDER BY {kc}, {STORE_ORDER} DESC) s"

    def delete_staged(
        self, table: str, source: str, match: str, keys: Sequence[str], key_sources: Sequence[str]
    ) -> str:
        return f"DELETE FROM {table} t USING {source} WHERE s.{IS_DELETE} AND {match}"

    def update_staged(self, table: str, assign: str, source: str, match: str) -> Optional[str]:
        return f"UPDATE {table} t SET {assign} FROM {source} WHERE s.{WAS_LOADED} AND NOT s.{IS_DELETE} AND {match}"

    def out_of_range(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.errors.NumericValueOutOfRange)

    def open_lock(self, schema: str, materialization: str) -> Optional[tuple[str, tuple]]:
        return "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"tidemark open {schema} {materialization}",)

    def exists(self, schema: str, names: Sequence[str]) -> tuple[str, tuple]:
        return "SELECT " + ", ".join(["to_regclass(%s)"] * len(names)), tuple(self.table(schema, n) for n in names)

    def reshape(self, driver, con, live, shadow, live_shape: dict, shadow_shape: dict, columns: list) -> str:
        """In place, in the cut-over's transaction: the same table (its OID, grants, indexes,
        comments, dependent views and policies stay) emptied, changed to the shadow's columns,
        types and key, and filled from the shadow.  A dependent view on a column that goes or
        changes type makes PostgreSQL refuse, and the whole cut-over rolls back."""
        table, quote = self.ident(live), self.quote
        driver.execute(con, f"DELETE FROM {table}")
        pkey = driver.execute(
            con,
            "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'",
            (table,),
        ).fetchone()
        if pkey is not None:
            driver.execute(con, f"ALTER TABLE {table} DROP CONSTRAINT {quote(pkey[0])}")
        steps = []
        for name in live_shape:
            if name not in shadow_shape:
                driver.execute(con, f"ALTER TABLE {table} DROP COLUMN {quote(name)}")
                steps.append(f"dropped column {name}")
            else:
                driver.execute(con, f"ALTER TABLE {table} ALTER COLUMN {quote(name)} DROP NOT NULL")
        for name, (typ, _pk, _required) in shadow_shape.items():
            if name not in live_shape:
                driver.execute(con, f"ALTER TABLE {table} ADD COLUMN {quote(name)} {typ}")
                steps.append(f"added column {name} {typ}")
            elif live_shape[name][0] != typ:
                driver.execute(con, f"ALTER TABLE {table} ALTER COLUMN {quote(name)} TYPE {typ} USING NULL::{typ}")
                steps.append(f"changed column {name} to {typ}")
        for name, (_typ, pk, required) in shadow_shape.items():
            if pk or required:
                driver.execute(con, f"ALTER TABLE {table} ALTER COLUMN {quote(name)} SET NOT NULL")
        keys = [n for n, (_t, pk, _r) in shadow_shape.items() if pk]
        if keys:
            driver.execute(con, f"ALTER TABLE {table} ADD PRIMARY KEY ({', '.join(quote(k) for k in keys)})")
        if keys != [n for n, (_t, pk, _r) in live_shape.items() if pk]:
            steps.append(f"keyed by {', '.join(keys)}")
        names = ", ".join(quote(n) for n in columns)
        driver.execute(con, f"INSERT INTO {table} ({names}) SELECT {names} FROM {self.ident(shadow)}")
        driver.execute(con, f"DROP TABLE {self.ident(shadow)}")
        return f"replaced the rows of {driver.resource_name(live)} in place ({'; '.join(steps)})"

    def columns(self, schema: str, table: str) -> tuple[str, tuple]:
        # required: NOT NULL without a default, not identity or generated
        return (
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), COALESCE(a.attnum = ANY(i.indkey), false), "
            "a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = '' "
            "FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid JOIN pg_namespace n ON c.relnamespace = n.oid "
            "LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary "
            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped",
            (schema, table),
        )


DIALECT = PostgresDialect()


def sql_type(kind: str) -> str:
    return DIALECT.sql_type(kind)


def widens(existing_type: str, col: Column) -> bool:
    return DIALECT.widens(existing_type, col)


def too_long(name: str) -> bool:
    return DIALECT.too_long(name)


def check_name_length(where: str, what: str, name: Optional[str]) -> None:
    """A schema or table name PostgreSQL would cut (and so name another one): a SpecError."""
    check_identifier(DIALECT, where, what, name)


class PostgresReduce(ReduceSql):
    """Reducing in PostgreSQL: ``jsonb`` documents, ``COLLATE "C"`` string order (code
    points, as the Python fold compares), typed values cast from ``jsonb``."""

    REPLACES_WITH_NULL = False  # with_members strips a NULL member (jsonb_strip_nulls)

    null_document = "NULL::jsonb"

    def add(self, old: str, new: str, f) -> str:
        if f.scale is not None:  # an exact decimal: 15 significant digits at its places, else refused
            return f"(({old} + {new})::numeric({MAX_DIGITS}, {f.scale}))"
        return f"({old} + {new})"

    def overflow_query(self, model, staging: str, f, col: Column, typed: bool, within=None) -> str:
        q = self.quote
        match = " AND ".join(f"t.{q(c.name)} = s.{staged_column(j)}" for j, c in enumerate(model.keys))
        keys = ", ".join(f"s.{staged_column(j)}" for j in range(len(model.keys)))
        names = [c.name for c in model.columns]
        if within is None:
            old = f"t.{q(col.name)}" if model.lean else f"(t.{q(DOCUMENT_COLUMN)} -> {literal(f.name)})"
            new = (
                f"s.{staged_column(names.index(col.name))}" if typed else f"(s.{STAGED_DOCUMENT} -> {literal(f.name)})"
            )
        else:  # a member of the object ``within``: its column (lean), else the document's member
            stored = f"(t.{q(DOCUMENT_COLUMN)} -> {literal(within.name)})"
            staged = f"(s.{STAGED_DOCUMENT} -> {literal(within.name)})"
            if within.name in names:
                stored = f"COALESCE(t.{q(within.name)}, {stored})"
                if typed:
                    staged = f"s.{staged_column(names.index(within.name))}"
            inner = "".join(f" -> {literal(m)}" for m in f.name[len(within.name) + 1 :].split("/"))  # nested too
            old, new = (f"({obj}{inner})" for obj in (stored, staged))
        old, new = f"{old}::numeric", f"{new}::numeric"
        beyond = (
            f"> {9223372036854775807 if col.kind == INTEGER else '1.7976931348623157e308'}"
            if f.scale is None
            else f">= 1e{MAX_DIGITS - f.scale}"
        )
        return (
            f"SELECT {keys}, {old}, {new} FROM {staging} s JOIN {DIALECT.ident(model)} t ON {match} "
            f"WHERE abs({old} + {new}) {beyond} LIMIT 1"
        )

    CASTS = {INTEGER: "bigint", NUMBER: "double precision", BOOLEAN: "boolean"}

    def greatest(self, old: str, new: str, f) -> str:
        return self._pick("GREATEST", old, new, f)

    def least(self, old: str, new: str, f) -> str:
        return self._pick("LEAST", old, new, f)

    def precedes(self, a: str, b: str, f) -> str:
        if f.type == "string" and f.schema.get("format") != "date-time":
            return f'({a} COLLATE "C" < {b} COLLATE "C")'
        if isinstance(a, LeanInstant) and isinstance(b, LeanInstant):
            # Columns two seconds or more apart order as their texts do: a column is its text's
            # instant rounded to the microsecond (monotone), except a leap second's, which names
            # the next minute's first second (the text's order lies less than two seconds
            # before it).  Closer than that, by the columns where both are exact, else the texts.
            # The texts' checks cost a third of the statement where every pair ran them.
            apart = "interval '2 seconds'"
            return (
                f"(CASE WHEN {a.column} + {apart} <= {b.column} THEN true "
                f"WHEN {b.column} + {apart} <= {a.column} THEN false "
                f"WHEN {_micro(a.kept)} AND {_micro(b.kept)} THEN {a.column} < {b.column} "
                f"ELSE {super().precedes(a, b, f)} END)"
            )
        return super().precedes(a, b, f)

    def instant(self, text: str) -> tuple[str, str, str]:
        zulu = f"upper(right({text}, 1)) = 'Z'"
        second = f"substr({text}, 18, 2)"
        utc = (
            f"(substr({text}, 1, 10) || ' ' || substr({text}, 12, 6) || "
            f"(CASE WHEN {second} = '60' THEN '59' ELSE {second} END) || "
            f"(CASE WHEN {zulu} THEN '+00:00' ELSE right({text}, 6) END))::timestamp with time zone"
        )
        digits = f"length({text}) - 20 - (CASE WHEN {zulu} THEN 1 ELSE 6 END)"
        fraction = f"(CASE WHEN substr({text}, 20, 1) = '.' THEN rtrim(substr({text}, 21, {digits}), '0') ELSE '' END)"
        return utc, f"({second} = '60')", f'{fraction} COLLATE "C"'

    @staticmethod
    def _pick(fn: str, old: str, new: str, f) -> str:
        if f.type == "string":
            return f'{fn}({old} COLLATE "C", {new} COLLATE "C")'
        return f"{fn}({old}, {new})"

    def concat_arrays(self, old: str, new: str) -> str:
        return f"({old} || {new})"

    merge_documents = concat_arrays  # jsonb ||: the right side's top-level members win, whatever they hold

    def union_arrays(self, old: str, new: str, f: FieldPlan) -> str:
        # jsonb equality groups equal values (1 and 1.0 are one number); the first position
        # of each orders them.  NULL on either side: NULL, without running the sub-select (a
        # third of the statement's time where most keys' batches hold no new array)
        return (
            f"(CASE WHEN {old} IS NOT NULL AND {new} IS NOT NULL THEN "
            f"(SELECT jsonb_agg(u.v ORDER BY u.o) FROM (SELECT e.v, min(e.o) AS o FROM "
            f"jsonb_array_elements({old} || {new}) WITH ORDINALITY AS e(v, o) GROUP BY e.v) AS u) END)"
        )

    def document(self, alias: str) -> str:
        return f"{alias}.{self.quote(DOCUMENT_COLUMN)}::jsonb"

    def member(self, doc: str, name: str) -> str:
        return f"({doc} -> {literal(name)})"

    def typed(self, doc: str, name: str, col: Column) -> str:
        if col.kind in self.CASTS:
            return f"({doc} -> {literal(name)})::{self.CASTS[col.kind]}"
        if col.kind == TIMESTAMP:
            return self.to_timestamp(f"({doc} ->> {literal(name)})")
        if scale_of_kind(col.kind) is not None:  # an exact decimal
            return f"({doc} -> {literal(name)})::numeric"
        return f"({doc} ->> {literal(name)})"

    def typed_or_null(self, doc: str, name: str, col: Column) -> str:
        if col.kind in self.CASTS or scale_of_kind(col.kind) is not None:  # jsonb null casts to nothing
            cast = self.CASTS.get(col.kind, "numeric")
            return f"(NULLIF({doc} -> {literal(name)}, 'null'::jsonb))::{cast}"
        return self.typed(doc, name, col)  # ->> is NULL for null

    KEPT_ORDER_ROWS = True
    #: each kept_order's function and arguments, by its side's call
    kept_calls: dict[str, tuple[str, str]] = {}

    #: the SQL type of a kept order value's function (kept_order), by the order property's kind
    KEPT_TYPES = {"dt": "text", "text": "text", INTEGER: "bigint", BOOLEAN: "boolean"}

    def kept_order(self, last, by, holds, old, new):
        kind = "dt" if by.schema.get("format") == "date-time" else "text" if by.type == "string" else member_kind(by)
        name = f"pg_temp.tidemark_kept_{KEPT_NAMES[kind]}"
        self.prelude = {**self.prelude, name: self._kept_function(name, kind)}  # made in the statement's transaction
        args = ", ".join((str(last).lower(), *holds, *old, *new))
        typ = self.KEPT_TYPES[kind]
        side = f"{name}(0, {args})"
        self.kept_calls = {**self.kept_calls, side: (name, args)}  # kept_member's call of the same function
        return side, f"({name}(1, {args}))::{typ}", f"({name}(2, {args}) = 't')"

    def kept_member(self, kept) -> Optional[str]:
        # one property so ordered (the usual case): its function writes the member's JSON (part 3),
        # where neither row keeps an order value only where the rows' own do not decide
        if len(kept) != 1:
            return None
        (k,) = kept
        name, args = self.kept_calls[k.calls[0]]
        call = f"({name}(3, {args}, {literal(k.f.name)}))::jsonb"
        if k.rows is None:
            return call
        _side, time, null = k.rows
        return f"(CASE WHEN {k.kept} OR {time} IS NOT NULL OR {null} THEN {call} ELSE '{{}}'::jsonb END)"

    def _kept_function(self, name: str, kind: str) -> str:
        """:func:`~tidemark.drivers.sql.reduce.kept_order_rule` in PL/pgSQL: part 0 the side,
        1 the kept order value, 2 ``'t'`` where it is null, 3 the document's member
        ``{"_tidemark": {"order": {prop: …}}}`` (``{}``: none).  Each order value is made a key
        once (a date-time's: its UTC second, a leap second after it, then its fraction's digits,
        as text that sorts as :func:`~tidemark.collection.formats.instant` orders), then the keys
        are compared."""
        typ = self.KEPT_TYPES[kind]
        key_type = "text" if kind in ("dt", "text") else typ

        def key(x: str) -> str:
            if kind != "dt":
                return x
            utc, leap, fraction = self.instant(x)
            # the UTC second, 13 digits from year 1 to 9999
            second = f"lpad((extract(epoch from {utc})::bigint + 100000000000)::text, 13, '0')"
            return f"({second} || (CASE WHEN {leap} THEN '1' ELSE '0' END) || {fraction})"

        collate = ' COLLATE "C"' if key_type == "text" else ""

        def before(a: str, b: str) -> str:  # a side without an order value first
            return f"({b} IS NOT NULL AND ({a} IS NULL OR {a}{collate} < {b}{collate}))"

        # each side's key, and its row's own (the same where the row keeps no order value)
        keys = (
            f"a_old {key_type} := {key('t_old')}; a_new {key_type} := {key('t_new')}; "
            f"r_old {key_type} := CASE WHEN has_old THEN {key('old_at')} ELSE a_old END; "
            f"r_new {key_type} := CASE WHEN has_new THEN {key('new_at')} ELSE a_new END"
        )
        return (
            f"CREATE OR REPLACE FUNCTION {name}(part integer, last boolean, old_holds boolean, new_holds boolean, "
            f"has_old boolean, kept_old {typ}, old_at {typ}, has_new boolean, kept_new {typ}, new_at {typ}, "
            "prop text DEFAULT NULL) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $kept$\n"
            f"DECLARE t_old {typ} := CASE WHEN has_old THEN kept_old ELSE old_at END; "
            f"t_new {typ} := CASE WHEN has_new THEN kept_new ELSE new_at END; {keys}; "
            f"side text; own {key_type}; t {typ}; tk {key_type};\n"
            "BEGIN\n"
            "  IF NOT old_holds AND NOT new_holds THEN RETURN CASE WHEN part = 3 THEN '{}' END; END IF;\n"
            "  IF NOT old_holds OR NOT new_holds THEN side := CASE WHEN old_holds THEN 'o' ELSE 'n' END;\n"
            f"  ELSIF {before('a_new', 'a_old')} THEN side := CASE WHEN last THEN 'o' ELSE 'n' END;\n"
            "  ELSE side := CASE WHEN last THEN 'n' ELSE 'o' END; END IF;\n"
            "  IF part = 0 THEN RETURN side; END IF;\n"
            "  own := CASE WHEN r_old IS NULL THEN r_new WHEN r_new IS NULL THEN r_old "
            f"WHEN (CASE WHEN last THEN {before('r_new', 'r_old')} ELSE {before('r_old', 'r_new')} END) "
            "THEN r_old ELSE r_new END;\n"
            "  t := CASE side WHEN 'o' THEN t_old ELSE t_new END; tk := CASE side WHEN 'o' THEN a_old ELSE a_new END;\n"
            f"  IF (own IS NULL AND tk IS NULL) OR own{collate} = tk{collate} THEN "
            "RETURN CASE part WHEN 2 THEN 'f' WHEN 3 THEN '{}' END; END IF;\n"
            "  IF part = 1 THEN RETURN t::text; END IF;\n"
            "  IF part = 3 THEN RETURN jsonb_build_object('_tidemark', jsonb_build_object('order', "
            "jsonb_build_object(prop, to_jsonb(t))))::text; END IF;\n"
            "  RETURN CASE WHEN t IS NULL THEN 't' ELSE 'f' END;\n"
            "END $kept$"
        )

    # each value once (set_members names each twice: where it is NULL, and the value)
    def object_of(self, members) -> str:
        rows = ", ".join(f"({literal(n)}, to_jsonb({e}), {c})" for n, e, c in members)
        return f"(SELECT jsonb_object_agg(m.n, m.v) FROM (VALUES {rows}) AS m(n, v, z) WHERE m.v IS NOT NULL OR m.z)"

    def with_member(self, doc: str, name: str, member: str) -> str:
        return f"NULLIF((COALESCE({doc}, '{{}}'::jsonb) - {literal(name)}) || {member}, '{{}}'::jsonb)"

    def with_object(self, doc: str, name: str, value: str) -> str:
        return f"NULLIF((COALESCE({doc}, '{{}}'::jsonb) - {literal(name)}) || COALESCE({self.object_of([(name, value, 'false')])}, '{{}}'::jsonb), '{{}}'::jsonb)"

    def remainder(self, doc: str, names) -> str:
        listed = ", ".join(literal(n) for n in names)
        return f"NULLIF({doc} - ARRAY[{listed}]::text[], '{{}}'::jsonb)"

    def canonical_instant(self, expr: str) -> str:
        utc = f"({expr} AT TIME ZONE 'UTC')"
        return (
            f"(to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || "
            f"COALESCE('.' || NULLIF(rtrim(to_char({utc}, 'US'), '0'), ''), '') || 'Z')"
        )

    def to_timestamp(self, text: str) -> str:
        # PostgreSQL reads ``:60`` as the next minute, but refuses it with a fraction: the
        # second before it, and one more (tidemark.drivers.common.datetimes.micros)
        return (
            f"(CASE WHEN substr({text}, 18, 2) = '60' THEN overlay({text} placing '59' from 18 for 2)"
            f"::timestamp with time zone + interval '1 second' ELSE ({text})::timestamp with time zone END)"
        )

    def set_members(self, doc: str, members, nulls=()) -> str:
        out = f"COALESCE({doc}, '{{}}'::jsonb)"
        if members:
            names = ", ".join(literal(n) for n, _ in members)
            out = f"({out} - ARRAY[{names}]::text[])"
        for n, e in members:
            out = f"{out} || CASE WHEN {e} IS NULL THEN '{{}}'::jsonb ELSE jsonb_build_object({literal(n)}, {e}) END"
        for n, where in nulls:
            out = f"{out} || CASE WHEN {where} THEN jsonb_build_object({literal(n)}, NULL) ELSE '{{}}'::jsonb END"
        return f"NULLIF({out}, '{{}}'::jsonb)"

    def to_json(self, expr: str, col: Column) -> str:
        # with_members hands it to jsonb_build_object, which converts a typed value as
        # to_jsonb does (the same conversion): no jsonb is made of each value first
        # (~7 % of the statement, 22k keys)
        return expr

    def with_members(self, doc: str, members, nullable, present=()) -> str:
        out = doc
        for group, strip in ((present, False), (members, True)):
            for i in range(0, len(group), 50):  # a function takes at most 100 arguments
                pairs = ", ".join(f"{literal(k)}, {e}" for k, e in group[i : i + 50])
                built = f"jsonb_build_object({pairs})"
                out = f"{out} || {'jsonb_strip_nulls(' + built + ')' if strip else built}"
        for k, e in nullable:
            out = f"{out} || CASE WHEN {e} IS NULL THEN '{{}}'::jsonb ELSE jsonb_build_object({literal(k)}, {e}) END"
        return out


def _micro(kept: str) -> str:
    """True where a lean date-time's instant is its column's, exactly: no text kept, or one
    without a leap second and with at most six fraction digits."""
    digits = f"length({kept}) - 20 - (CASE WHEN upper(right({kept}, 1)) = 'Z' THEN 1 ELSE 6 END)"
    return f"({kept} IS NULL OR (substr({kept}, 18, 2) <> '60' AND (substr({kept}, 20, 1) <> '.' OR {digits} <= 6)))"


KEPT_NAMES = {"dt": "date_time", "text": "text", INTEGER: "integer", BOOLEAN: "boolean"}


def literal(text: str) -> str:
    """A SQL string literal (quotes doubled; NUL cannot be in a property name PostgreSQL stores)."""
    return "'" + text.replace("'", "''") + "'"


REDUCE = PostgresReduce(DIALECT.quote)
#: the strategies PostgreSQL reduces itself (``Capabilities.endpoint_reduce``)
ENDPOINT_REDUCE = SQL_STRATEGIES | {KEPT_ORDER}


def _reduce_forms(model: TableModel, dialect: Dialect) -> PostgresReduce:
    return PostgresReduce(dialect.quote)  # its own: a statement over typed values sets ``staged_values``


PostgresDialect.reduction = Reduction(ENDPOINT_REDUCE, _reduce_forms)

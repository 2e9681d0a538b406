"""What every endpoint shares (:mod:`tidemark.drivers.common`), without Spark or a server:
the Open rule of fenced checkpoints (a reopened or overlapping range fences its zombies and
inherits the right batch across splits and merges, or is refused), the column model
(what a column holds exactly, coercion, quarantine rows, Arrow columns), the view-identity
record, the document forms, settings and redaction."""

from __future__ import annotations

import decimal
from types import SimpleNamespace

import pytest

from tidemark.drivers.common import columns, forms, identity, redact
from tidemark.drivers.common.fences import CheckpointState, fenced_off, load_checkpoint, plan_open
from tidemark.drivers.common.settings import MASK, Setting, config_schema, read, refuse_unknown
from tidemark.errors import FencedOff, RecoveryError, SpecError
from tidemark.policy import RetryPolicy
from tidemark.protocol.messages import Field, Range

WHOLE = Range()
LEFT, RIGHT = Range.split(2)


def cp(batch: int, checkpoint_id: str = "c1", **more) -> dict:
    return {"checkpoint_id": checkpoint_id, "batch_id": batch, "query_id": "q", "offsets": f"o{batch}", **more}


# ------------------------------------------------------------------ fences: the Open rule


def test_the_first_open_of_a_range_inserts_its_row_with_fence_one_and_no_checkpoint():
    plan = plan_open("m", LEFT, [])
    assert (plan.fence, plan.checkpoint, plan.insert, plan.refresh) == (1, None, True, False)


def test_reopening_a_range_bumps_its_fence_so_the_older_session_is_stale():
    """A retried or speculative task opens the range again: the zombie still holds fence 3,
    the row now holds 4, so the zombie's fenced commit matches no row."""
    zombie_fence = 3
    plan = plan_open("m", LEFT, [CheckpointState(LEFT, zombie_fence, cp(7))])
    assert plan.fence == zombie_fence + 1 != zombie_fence
    assert plan.checkpoint == cp(7) and not plan.insert and not plan.refresh


def test_a_new_range_gets_a_fence_above_every_overlapping_range_it_fences():
    """After a split, the child's fence is above the parent's bumped fence: no session of the
    parent nor of the child can commit with a fence it held before this Open."""
    rows = [CheckpointState(WHOLE, 5, cp(2)), CheckpointState(Range(0, 10), 9, None)]
    plan = plan_open("m", Range(0, 100), rows)
    bumped = [r.fence + 1 for r in rows]
    assert plan.insert and plan.fence > max(bumped)


def test_a_split_inherits_the_parents_checkpoint():
    plan = plan_open("m", RIGHT, [CheckpointState(WHOLE, 2, cp(4))])
    assert plan.checkpoint == cp(4) and plan.insert


def test_the_narrowest_covering_range_wins_when_no_range_inside_holds_a_later_batch():
    half = CheckpointState(LEFT, 1, cp(4, note="half"))
    whole = CheckpointState(WHOLE, 1, cp(4, note="whole"))
    quarter = Range.split(4)[0]
    assert plan_open("m", quarter, [whole, half]).checkpoint["note"] == "half"


def test_a_merge_inherits_the_later_batch_its_parts_agree_on_and_refreshes_the_old_row():
    """Split, commit on the halves, merge back: the whole range's own row holds an older
    batch; the Open takes the halves' later batch (and rewrites the existing row)."""
    rows = [CheckpointState(WHOLE, 1, cp(2)), CheckpointState(LEFT, 1, cp(5)), CheckpointState(RIGHT, 1, cp(5))]
    plan = plan_open("m", WHOLE, rows)
    assert plan.checkpoint == cp(5) and not plan.insert and plan.refresh


def test_a_merge_of_ranges_that_committed_different_batches_is_refused():
    """One half committed batch 5, the other only batch 4 (a stop between the two shards'
    commits) and nothing covers the merged range at batch 5: no checkpoint is right."""
    rows = [CheckpointState(LEFT, 1, cp(5)), CheckpointState(RIGHT, 1, cp(4))]
    with pytest.raises(RecoveryError, match=r"disagree or leave a gap .*batch 5.*batch 4.*tidemark reset SPEC -m m"):
        plan_open("m", WHOLE, rows)


def test_a_merge_over_a_gap_is_refused():
    quarters = Range.split(4)
    rows = [CheckpointState(r, 1, cp(3)) for r in (quarters[0], quarters[1], quarters[3])]  # no third quarter
    with pytest.raises(RecoveryError, match="leave a gap"):
        plan_open("m", WHOLE, rows)


def test_a_merge_of_the_same_batch_number_from_another_run_is_refused():
    rows = [CheckpointState(LEFT, 1, cp(5)), CheckpointState(RIGHT, 1, cp(5, checkpoint_id="other"))]
    with pytest.raises(RecoveryError):
        plan_open("m", WHOLE, rows)


def test_fenced_off_names_the_range_and_the_stale_fence():
    err = fenced_off("m", LEFT, 3)
    assert isinstance(err, FencedOff)
    assert f"range {LEFT.name}: fence 3 is stale" in str(err) and "'m'" in str(err)


@pytest.mark.parametrize(
    "stored, expected",
    [(None, None), ('{"batch_id": 2}', {"batch_id": 2}), (b'{"batch_id": 2}', {"batch_id": 2}), ({"a": 1}, {"a": 1})],
)
def test_a_stored_checkpoint_reads_back_from_text_bytes_or_json(stored, expected):
    assert load_checkpoint(stored) == expected
    if isinstance(stored, bytes):
        assert load_checkpoint(memoryview(stored)) == expected


# ------------------------------------------------------------------ columns


@pytest.mark.parametrize(
    "field, kind",
    [
        (Field("s", "/s", "string"), columns.TEXT),
        (Field("t", "/t", "string", format="date-time"), columns.TIMESTAMP),
        (Field("i", "/i", "integer"), columns.INTEGER),
        (Field("n", "/n", "number"), columns.NUMBER),
        (Field("d", "/d", "number", scale=2), "decimal:2"),
        (Field("b", "/b", "boolean"), columns.BOOLEAN),
        (Field("o", "/o", "object"), columns.JSON),
        (Field("u", "/u", "json"), columns.JSON),
    ],
)
def test_each_field_type_has_its_column_kind(field, kind):
    assert columns.field_kind(field) == kind


def test_decimal_kinds_keep_their_places_and_read_as_numbers_elsewhere():
    assert columns.scale_of_kind(columns.decimal_kind(3)) == 3
    assert columns.scale_of_kind(columns.TEXT) is None
    assert columns.base_kind("decimal:3") == columns.NUMBER and columns.base_kind(columns.TEXT) == columns.TEXT


def test_a_column_holds_a_value_only_where_it_holds_it_exactly():
    assert columns.holds(columns.INTEGER, 2**63 - 1) and not columns.holds(columns.INTEGER, 2**63)
    assert columns.holds(columns.INTEGER, -(2**63)) and not columns.holds(columns.INTEGER, -(2**63) - 1)
    assert columns.holds(columns.INTEGER, 3.0) and not columns.holds(columns.INTEGER, 3.5)
    assert columns.holds(columns.NUMBER, 2**53) and not columns.holds(columns.NUMBER, 2**53 + 1)
    assert columns.holds(columns.TEXT, 2**80)  # text holds anything
    assert columns.held((columns.INTEGER, columns.NUMBER, columns.TEXT), (2**64, 2**60, "x")) == (None, None, "x")


def test_coerce_writes_json_kinds_as_text_and_whole_floats_as_integers():
    assert columns.coerce(columns.JSON, {"a": [1, "é"]}) == '{"a":[1,"é"]}'
    assert columns.coerce(columns.TEXT, [1, 2]) == "[1,2]"  # a structure in a scalar column: its JSON
    assert columns.coerce(columns.INTEGER, 4.0) == 4 and isinstance(columns.coerce(columns.INTEGER, 4.0), int)
    assert columns.coerce(columns.NUMBER, 4.5) == 4.5
    assert columns.coerce(columns.JSON, None) is None


def test_quarantine_rows_carry_the_batch_the_resource_and_the_document():
    row = {"binding": 0, "location": "f.json:3", "key_json": '["k"]', "reason": ValueError("bad"), "value": {"x": 1}}
    kept = columns.quarantine_row("m", 4, "totals", row)
    assert kept == {
        "materialization": "m",
        "batch_id": 4,
        "resource": "totals",
        "location": "f.json:3",
        "key_json": '["k"]',
        "reason": "bad",
        "value": {"x": 1},
    }
    sql = columns.quarantine_rows("m", 4, [{"location": 7, "key_json": ["k"], "reason": "bad", "value": {"x": 1}}, {}])
    assert sql == [("m", 4, "7", '["k"]', "bad", '{"x":1}'), ("m", 4, None, None, "", None)]


def test_arrow_columns_keep_exact_decimals_and_leave_what_they_cannot_hold_null():
    dec = columns.column("decimal:2", [0.1, 12.35, None])
    assert dec.to_pylist() == [decimal.Decimal("0.10"), decimal.Decimal("12.35"), None]
    ints = columns.column(columns.INTEGER, [1, 2**70, 3.0])
    assert ints.to_pylist() == [1, None, 3]
    as_json = columns.column(columns.JSON, [{"a": 1}, None])
    assert as_json.to_pylist() == ['{"a":1}', None]
    scalar_with_object = columns.column(columns.TEXT, ["x", {"o": 1}])
    assert scalar_with_object.to_pylist() == ["x", '{"o":1}']


def test_a_stored_rows_key_parses_its_json_key_columns():
    model = SimpleNamespace(keys=[columns.Column("id", columns.TEXT, True), columns.Column("j", columns.JSON, True)])
    assert columns.key_of(model, ["a", '{"b":[1]}']) == ("a", {"b": [1]})


# ------------------------------------------------------------------ identity, forms, redaction


def test_the_identity_record_round_trips_with_the_endpoints_name_for_the_resource():
    record = {"materialization": "m", "key": ["/id"], "source": "s3://b/orders"}
    text = identity.record_text(record, "public.totals")
    assert (
        identity.parse_record(text) == {**record, "resolved": "public.totals"} == identity.kept(record, "public.totals")
    )
    assert identity.parse_record(None) is None
    assert identity.parse_record("not json") is None
    assert identity.parse_record("[1, 2]") is None  # text, but not a record


def test_the_document_form_is_lean_unless_the_resource_asks_for_full():
    assert forms.requested_form({"table": "t"}) == forms.LEAN
    assert forms.requested_form(None) == forms.LEAN
    assert forms.requested_form({"document": "full"}) == forms.FULL
    with pytest.raises(SpecError, match="document must be 'lean' or 'full'"):
        forms.requested_form({"document": "compact"})


def test_passwords_are_masked_in_urls_pairs_and_named_secrets():
    text = "postgresql://user:s3cret@db:5432/x failed; password='p w' host=a; token abc123"
    out = redact.redact(text, ["abc123", None, ""])
    assert "s3cret" not in out and "p w" not in out and "abc123" not in out
    assert "postgresql://user:********@db:5432/x" in out and "host=a" in out
    assert redact.redact_url("nats://mytoken@host:4222") == "nats://********@host:4222"
    assert redact.redact_url("nats://host:4222") == "nats://host:4222"


# ------------------------------------------------------------------ settings

SETTINGS = (
    Setting("path", required=True, description="a folder"),
    Setting("port", "integer", default=5432, minimum=1, maximum=65535),
    Setting("ratio", "number", default=0.5, minimum=0, maximum=1),
    Setting("tls", "boolean", default=False),
    Setting("mode", choices=("Fast", "safe"), default="safe"),
    Setting("password", secret=True),
    Setting("retry", "retry"),
)


def test_settings_read_from_text_convert_and_fill_defaults():
    got = read("demo", {"path": "/d", "port": " 6543 ", "tls": "yes", "mode": "FAST", "ratio": "0.25"}, SETTINGS)
    assert got["path"] == "/d" and got["port"] == 6543 and got["tls"] is True and got["ratio"] == 0.25
    assert got["mode"] == "Fast"  # matched ignoring case, the declared spelling kept
    assert got["password"] is None and isinstance(got["retry"], RetryPolicy)
    assert read("demo", {"path": "/d", "port": None}, SETTINGS)["port"] == 5432  # null: the default


@pytest.mark.parametrize(
    "config, message",
    [
        ({}, "endpoint demo: path is required (a folder)"),
        ({"path": "/d", "paht": 1}, "unknown setting(s) 'paht' (did you mean 'path'?)"),
        ({"path": "/d", "port": "54x"}, "port must be an integer from 1 to 65535, got '54x'"),
        ({"path": "/d", "port": 70000}, "port must be an integer from 1 to 65535, got 70000"),
        ({"path": "/d", "port": True}, "port must be an integer"),
        ({"path": "/d", "ratio": "nan"}, "ratio must be a number from 0 to 1"),
        ({"path": "/d", "tls": "maybe"}, "tls must be true or false"),
        ({"path": "/d", "mode": "slow"}, "mode must be one of Fast, safe, got 'slow'"),
        ({"path": "/d", "retry": {"attempts": 0}}, "endpoint demo: retry: retry.attempts must be >= 1"),
    ],
)
def test_a_wrong_setting_is_refused_naming_the_endpoint_the_key_and_the_rule(config, message):
    with pytest.raises(SpecError) as info:
        read("demo", config, SETTINGS)
    assert message in str(info.value)


def test_a_secret_is_never_shown_in_a_refusal():
    with pytest.raises(SpecError) as info:
        read("demo", {"path": "/d", "password": ["hunter2"]}, SETTINGS)
    assert "hunter2" not in str(info.value) and MASK in str(info.value)


def test_passthrough_keys_are_left_to_the_endpoint_and_others_still_refused():
    dotted = lambda k: "." in k
    got = read("demo", {"path": "/d", "client.id": "x"}, SETTINGS, passthrough=dotted)
    assert "client.id" not in got
    with pytest.raises(SpecError, match="and dotted keys"):
        refuse_unknown("demo", {"clientid": 1}, ["path"], also=" and dotted keys")


def test_the_config_schema_marks_secrets_required_keys_and_bounds():
    schema = config_schema(SETTINGS)
    props = schema["properties"]
    assert schema["required"] == ["path"] and schema["additionalProperties"] is False
    assert props["password"]["secret"] is True
    assert props["port"] == {"type": "integer", "default": 5432, "minimum": 1, "maximum": 65535}
    assert props["mode"]["enum"] == ["Fast", "safe"]
    assert props["retry"]["type"] == "object" and "attempts" in props["retry"]["properties"]


def test_a_setting_of_an_unknown_type_is_a_programming_error():
    with pytest.raises(ValueError, match="is not one of"):
        Setting("x", "float")

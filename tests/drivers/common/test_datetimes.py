"""A date-time held as its instant (:mod:`tidemark.drivers.common.datetimes`), shared by
PostgreSQL's and the lakes' lean rows: the instant of a text to the microsecond (rounded, a
leap second as the next minute's first second), the text an instant gives back, and which
texts the remainder keeps."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.collection.formats import instant
from tidemark.drivers.common.datetimes import canonical_date_time, canonical_text, keeps_text, micros

UTC = dt.timezone.utc


@pytest.mark.parametrize(
    "text, instant_text, kept",
    [
        ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z", False),
        ("2024-05-01T10:00:00.5Z", "2024-05-01T10:00:00.5Z", False),
        ("2024-05-01T10:00:00.123456Z", "2024-05-01T10:00:00.123456Z", False),
        ("2024-05-01T10:00:00.500Z", "2024-05-01T10:00:00.5Z", True),
        ("2024-05-01T10:00:00.000Z", "2024-05-01T10:00:00Z", True),
        ("2024-05-01t10:00:00z", "2024-05-01T10:00:00Z", True),
        ("2024-05-01T10:00:00+05:30", "2024-05-01T04:30:00Z", True),
        ("2024-05-01T10:00:00-04:00", "2024-05-01T14:00:00Z", True),
        ("2024-05-01T10:00:00+00:00", "2024-05-01T10:00:00Z", True),
        ("2024-05-01T10:00:00.1234564Z", "2024-05-01T10:00:00.123456Z", True),  # below half: down
        ("2024-05-01T10:00:00.1234565Z", "2024-05-01T10:00:00.123456Z", True),  # half: to even
        ("2024-05-01T10:00:00.1234575Z", "2024-05-01T10:00:00.123458Z", True),
        ("2024-05-01T10:00:00.12345650001Z", "2024-05-01T10:00:00.123457Z", True),  # above half: up
        ("1999-12-31T23:59:59.999999999Z", "2000-01-01T00:00:00Z", True),
        ("2016-12-31T23:59:60Z", "2017-01-01T00:00:00Z", True),  # a leap second, as PostgreSQL reads it
        ("2016-12-31T23:59:60.25Z", "2017-01-01T00:00:00.25Z", True),
        ("0000-01-01T00:00:00Z", "0000-01-01T00:00:00Z", False),  # no datetime holds the year 0
        ("9999-12-31T23:00:00-02:00", "10000-01-01T01:00:00Z", True),
        ("1969-12-31T23:59:59.999999Z", "1969-12-31T23:59:59.999999Z", False),  # before 1970: negative
    ],
)
def test_the_instant_of_a_text_and_the_text_it_gives_back(text, instant_text, kept):
    at = micros(text)
    assert at is not None and canonical_text(at) == instant_text
    assert keeps_text(text) is kept


def test_what_is_not_a_date_time_has_no_instant_and_keeps_its_text():
    for value in ["yesterday", "2024-02-30T00:00:00Z", "2024-05-01 10:00:00Z", "2024-05-01T10:00:00", 17, None]:
        assert micros(value) is None and keeps_text(value)


@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)))
def test_a_datetime_gives_back_the_text_of_its_instant(moment):
    aware = moment.replace(tzinfo=UTC)
    text = canonical_date_time(aware)
    assert canonical_date_time(moment) == text  # a naive datetime is UTC
    assert micros(text) == (aware - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    assert not keeps_text(text)
    assert dt.datetime.fromisoformat(text.replace("Z", "+00:00")) == aware


@given(
    st.lists(
        st.tuples(
            st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
            st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59),
        ),
        min_size=2,
        max_size=8,
    )
)
def test_instants_order_as_the_texts_instants(moments):
    """Whatever the offsets, the instants order as :func:`~tidemark.collection.formats.instant` orders the texts."""
    texts = []
    for moment, offset in moments:
        zone = dt.timezone(dt.timedelta(minutes=offset))
        texts.append(moment.replace(tzinfo=UTC).astimezone(zone).isoformat())
    assert sorted(texts, key=micros) == sorted(texts, key=instant)

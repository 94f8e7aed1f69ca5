"""Text matching used by every audit stage: word boundaries, numbers, dates, units, countries."""

import pytest
from hypothesis import given, strategies as st

from kbvqa.data import matching as mt


@pytest.mark.parametrize("text,phrase,expected", [
    ("The capital is Tirana.", "Iran", False),          # word-bounded
    ("It was built in 1906.", "6", False),
    ("It weighs 1,301 kg.", "1301", True),             # thousands separator
    ("It weighs 1301 kg.", "1,301", True),
    ("clutch of three eggs", "3", True),               # number words
    ("a height of 6–7 m", "6 - 7", True),              # range dashes
    ("a height of 6 to 7 m", "6-7", True),
    ("area of 4.10 km2", "4.1", True),                  # canonical decimals
    ("managed by the Colonial Williamsburg Foundation", "The Colonial Williamsburg Foundation", True),
    ("Lloyd’s building in London", "Lloyd's", True),
    ("Čelije Monastery", "celije monastery", True),   # accents folded
    ("a twin-engine airliner", "twin engine", True),
])
def test_contains(text, phrase, expected):
    assert mt.contains(text, phrase) is expected


def test_find_phrase_returns_text_as_written():
    assert mt.find_phrase("It weighs 1,301 kg (2,868 lb).", "1301") == "1,301"
    assert mt.find_phrase("nothing here", "1301") is None


def test_quantities_units_and_ranges():
    qs = mt.find_quantities("It weighs 1,301 kg, wingspan 170–200 cm, between 5 and 7 eggs, 4.1 km²")
    assert [(q.low, q.high, q.unit) for q in qs] == [(1301, 1301, "kg"), (170, 200, "cm"), (5, 7, "egg"),
                                                       (4.1, 4.1, "km2")]
    assert qs[1].number_text == "170–200"
    assert mt.parse_quantity("about 25 kg").unit == "kg"
    assert mt.parse_quantity("Victorian") is None
    assert mt.question_unit("What is the area in square kilometre of this lake?") == ("km2", "area")
    assert mt.question_unit("How many kilogram does this vehicle weigh?") == ("kg", "mass")
    assert mt.question_unit("Who designed this building?") is None


@pytest.mark.parametrize("answer,evidence", [
    ("1989 10 27", "On 27 October 1989, Finnair became the first operator."),
    ("27 October 1989", "entered service on October 27, 1989."),
    ("1989-10-27", "On 27 October 1989 it flew."),
    ("1989", "On 27 October 1989 it flew."),
])
def test_dates_match_across_formats(answer, evidence):
    a = mt.parse_date(answer)
    assert a is not None
    assert any(mt.date_matches(a, f) for f in mt.find_dates(evidence))


def test_dates_do_not_match_more_precise_answer_or_other_day():
    a = mt.parse_date("1986 11 18")
    assert not any(mt.date_matches(a, f) for f in mt.find_dates("It opened in 1986."))
    assert not any(mt.date_matches(a, f) for f in mt.find_dates("It opened on 17 November 1986."))
    assert mt.parse_date("27 levels") is None


def test_country_demonym_equivalence():
    assert mt.contains_equivalent("a German aircraft maker", "Germany") == "german"
    assert mt.contains_equivalent("founded in France", "French") == "france"
    assert mt.contains_equivalent("an ancient Greek temple", "Ancient Greece") == "ancient greek"
    assert mt.contains_equivalent("let us go", "United States") is None  # "us" is not the US
    assert mt.contains_equivalent("in Germany", "Austria") is None


def test_near_phrase_and_list_items():
    assert mt.find_near_phrase("architects Georg Adolf Demmler and others", "Georg Adolph Demmler") == "Georg Adolf Demmler"
    assert mt.find_near_phrase("Paris", "Parys") is None  # single words never fuzzy-match
    assert mt.list_items("bayou, prairie and rock outcrops, etc") == ["bayou", "prairie", "rock outcrops"]


@given(st.integers(min_value=1000, max_value=10**9))
def test_thousands_separator_roundtrip(n):
    assert mt.contains(f"value {n:,} units", str(n))
    assert mt.norm(f"{n:,}") == str(n)

"""The type vocabularies (issue 37 item 6): E-VQA gets its own, chosen from the sample's dataset;
InfoSeek keeps the authors' twenty types and their plain "this <type>" reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbvqa.data.schema import Sample
from kbvqa.pipelines.augment import rewrite as rw
from kbvqa.pipelines.augment.types import TypeVocabulary, tag_samples
from kbvqa.stages.augment.types import TagTypesConfig, tag_phrase
from kbvqa.stages.augment.vocabularies import EVQA, INFOSEEK, vocabulary_name

ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara"
E = TypeVocabulary.named(EVQA)
I = TypeVocabulary.named(INFOSEEK)


@pytest.mark.parametrize("q,typ,phrase,noun", [
    ("What is the name of the image depicting the layout of this railway station?", "station",
     "this railway station", "railway station"),
    ("From what city would one drive to reach this nature reserve?", "reserve", "this nature reserve",
     "nature reserve"),
    ("In what country is this historical fortress located?", "castle", "this historical fortress",
     "historical fortress"),
    ("What was once housed in this bell tower?", "tower", "this bell tower", "bell tower"),
    ("Who sang at this opera house in 1901?", "theatre", "this opera house", "opera house"),
    ("Does this bird fly at night?", "bird", "this bird", "bird"),  # a verb is not the head
    ("Does this tree bear fruit in winter?", "tree", "this tree", "tree"),
    ("What family does this moth belong to?", "butterfly", "this moth", "moth"),
    ("How do these amphibians hide?", "amphibian", "these amphibians", "amphibians"),
    ("What kind of tree is this?", "tree", "this", "tree"),
])
def test_evqa_reads_the_head_of_the_noun_phrase(q, typ, phrase, noun):
    m = E.find(q)
    assert m is not None and (m.type, m.phrase, m.noun) == (typ, phrase, noun) and q[m.start:m.end] == phrase


def test_a_modifier_never_reaches_an_ambiguous_word_and_infoseek_keeps_its_reading():
    assert E.find("In what year did this conflict take place?") is None  # not "this ... place"
    assert E.find("What is the architectural style of this place?").ambiguous
    # InfoSeek's vocabulary is the authors' list read as they read it
    assert I.types == TypeVocabulary().types and len(I.types) == 20
    assert I.find("When was this railway station opened?") is None
    assert I.find("What kind of bird is this?") is None


@pytest.mark.parametrize("q,expected", [
    ("When was this railway station opened?", "When was the railway station on the left opened?"),
    ("What kind of tree is this?", "What kind of tree is the tree on the left?"),
])
def test_rewrites_keep_the_noun_phrase_and_pass_validation(q, expected):
    m = E.find(q)
    got = rw.rewrite_positional(q, m, m.type, "left", E)
    assert got.ok and got.text == expected


def test_vocabulary_follows_the_dataset_unless_chosen():
    assert vocabulary_name("inaturalist") == vocabulary_name("landmarks") == vocabulary_name(None, "E-VQA_7") == "evqa"
    assert vocabulary_name("infoseek", "infoseek_val_1") == vocabulary_name(None, "x") == "infoseek"
    samples = [Sample(id="e", question="When was this castle built?", dataset="landmarks"),
               Sample(id="i", question="When was this castle built?", dataset="infoseek")]
    by = {t.sample_id: t for t in tag_samples(samples, TagTypesConfig())}
    assert by["e"].type == "castle" and by["i"].type is None and by["i"].excluded == "no_type"
    forced = {t.sample_id: t for t in tag_samples(samples, TagTypesConfig(vocabulary="evqa"))}
    assert forced["i"].type == "castle"
    assert TagTypesConfig(types=["castle"]).vocabulary_name("infoseek") == "custom"
    with pytest.raises(ValueError, match="not both"):
        TagTypesConfig(vocabulary="evqa", types=["castle"])


def _typed(path: Path) -> tuple[int, int]:
    from kbvqa.data.formats import read_samples

    cfg = TagTypesConfig()
    rows = list(read_samples(path))
    return sum(tag_phrase(s.id, s.question, cfg.vocabulary_for(s.dataset, s.id)).type is not None for s in rows), len(rows)


def test_typed_share_on_the_shared_half_of_the_release():
    """E-VQA: the paper augments 3,871 of 4,750 (81%); on the shared half at least 78% must be typed.
    InfoSeek: within 2% of the authors' augmented rows on the same half (their 1,604 overall)."""
    gt, aug = ARA / "ground_truth", ARA / "augmented" / "infoseek_challenging_queries_seed3185.csv"
    if not (gt / "evqa_fixed.csv").exists() or not aug.exists():
        pytest.skip("the ARA release (../shared/data/ara) is not available")
    typed, n = _typed(gt / "evqa_fixed.csv")
    assert typed / n >= 0.78, (typed, n)
    typed_is, _ = _typed(gt / "infoseek_fixed.csv")
    released = sum(1 for _ in open(aug, encoding="utf-8")) - 1
    assert abs(typed_is - released) <= 0.02 * released, (typed_is, released)

"""`kbvqa kb stats --lengths` (issue 37 item 8): tokens per section and per article, the tokenisation
named; on the session's demo KB, checked against a count made here."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.kb.stats import length_stats
from kbvqa.kb.store import KBStore

runner = CliRunner()


@pytest.fixture(scope="module")
def demo_kb(demo_source):
    base, res = demo_source
    return base / res.out / "bench" / "kb.sqlite"


def test_whitespace_lengths_of_the_demo_kb(demo_kb):
    with KBStore(demo_kb) as kb:
        arts = list(kb)
        st = length_stats(kb)
    secs = [len(s.text.split()) for a in arts for s in a.sections]
    per_art = [sum(len(s.text.split()) for s in a.sections) for a in arts]
    assert st["tokenisation"] == "whitespace" and st["articles_read"] == len(arts) > 0
    assert st["section_tokens"]["n"] == len(secs) and st["article_tokens"]["n"] == len(per_art)
    assert st["section_tokens"]["mean"] == round(float(np.mean(secs)), 1)
    assert st["section_tokens"]["p95"] == round(float(np.percentile(secs, 95)), 1)
    assert st["article_tokens"]["p95"] == round(float(np.percentile(per_art, 95)), 1)
    assert st["article_tokens"]["max"] == max(per_art) and st["section_tokens"]["max"] == max(secs)
    assert length_stats(arts, limit=2)["article_tokens"]["n"] == 2


def test_a_tokenizer_counts_its_own_tokens_and_a_bad_folder_is_one_line(demo_kb, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()  # words and punctuation apart
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    with KBStore(demo_kb) as kb:
        ws, wp = length_stats(kb), length_stats(kb, tokenizer=tmp_path / "tok")
    assert wp["tokenisation"] == "tokenizer:tok"
    assert wp["section_tokens"]["mean"] > ws["section_tokens"]["mean"]  # "Paris." is two tokens, not one
    r = runner.invoke(app, ["kb", "stats", str(demo_kb), "--lengths", "--tokenizer", str(tmp_path)])
    assert r.exit_code == 1 and "no tokenizer read" in r.output and len(r.output.strip().splitlines()) == 1


def test_cli_json_and_table(demo_kb):
    r = runner.invoke(app, ["kb", "stats", str(demo_kb), "--lengths", "--json"])
    assert r.exit_code == 0, r.output
    st = json.loads(r.output)
    assert st["lengths"]["tokenisation"] == "whitespace" and st["lengths"]["section_tokens"]["n"] == st["sections"]
    r = runner.invoke(app, ["kb", "stats", str(demo_kb), "--lengths"], terminal_width=200)
    assert r.exit_code == 0 and "tokens counted as" in r.output and "section tokens p95" in r.output
    assert "lengths" not in json.loads(runner.invoke(app, ["kb", "stats", str(demo_kb), "--json"]).output)

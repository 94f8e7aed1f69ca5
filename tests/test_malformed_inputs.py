"""The malformed-input corpus: every job, fed each kind of broken file a user actually produces, ends
with one clear line naming the file (and row/field where there is one) and a non-zero exit code —
never a traceback. Each case is (name, files to write, command line, words the message must carry)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app

runner = CliRunner()

GOOD_SAMPLE = {"id": "s1", "question": "What is this?", "images": ["a.jpg"], "answers": [{"text": "x"}]}
WIKI = {"https://en.wikipedia.org/wiki/X": {"title": "X", "section_titles": ["Intro"],
                                             "section_texts": ["X is a thing."], "image_urls": []}}


def _jsonl(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def _png_bomb() -> bytes:
    """A 100000×100000 PNG header with no pixel data (decompression-bomb shaped)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
            + chunk(b"IEND", b""))


# name, {file: content (str or bytes)}, argv (file names are relative to the case folder), must mention
# ("warning" among them: the input is usable and the problem is a counted warning, exit 0 allowed)
CASES = [
    ("jsonl-broken-line", {"s.jsonl": _jsonl(GOOD_SAMPLE, '{"id": "s2", "question": ')},
     ["data", "stats", "s.jsonl", "--from", "kbvqa"], ["s.jsonl", "2"]),
    ("jsonl-not-an-object", {"s.jsonl": _jsonl(GOOD_SAMPLE, "[1, 2, 3]")},
     ["data", "convert", "s.jsonl", "o.jsonl", "--from", "kbvqa", "--to", "kbvqa"], ["s.jsonl", "2"]),
    ("jsonl-wrong-field-type", {"s.jsonl": _jsonl({**GOOD_SAMPLE, "question": 42})},
     ["data", "stats", "s.jsonl", "--from", "kbvqa"], ["s.jsonl", "question"]),
    ("jsonl-latin1", {"s.jsonl": json.dumps({**GOOD_SAMPLE, "question": "café?"}, ensure_ascii=False)
                      .encode("latin-1") + b"\n"},
     ["data", "stats", "s.jsonl", "--from", "kbvqa"], ["s.jsonl", "UTF-8"]),
    ("jsonl-empty", {"s.jsonl": ""}, ["data", "convert", "s.jsonl", "o.jsonl", "--from", "kbvqa", "--to", "kbvqa"],
     ["s.jsonl"]),
    ("csv-without-question-column", {"e.csv": "data_id,answer\n1,x\n"},
     ["data", "stats", "e.csv", "--from", "evqa"], ["e.csv", "question"]),
    # the official E-VQA CSV has no data_id: ids come from row order, and the user is told (a warning)
    ("csv-without-ids", {"e.csv": "question,answer\nWhat is it?,x\n"},
     ["data", "convert", "e.csv", "o.jsonl", "--from", "evqa", "--to", "kbvqa"], ["warning", "row order"]),
    ("csv-ragged-row", {"e.csv": "data_id,question,answer,image\n1,q?,a,img.jpg\n2,q2?\n"},
     ["data", "stats", "e.csv", "--from", "csv", "--mapping", "id=data_id,question=question,answers=answer"],
     ["e.csv"]),
    ("infoseek-no-answer-fields", {"i.jsonl": _jsonl({"data_id": "oven_1", "image_id": "oven_1", "question": "q?"})},
     ["data", "convert", "i.jsonl", "o.jsonl", "--from", "infoseek", "--to", "kbvqa"], ["warning", "no answers"]),
    ("infoseek-answer-not-a-list", {"i.jsonl": _jsonl({"data_id": "oven_1", "image_id": "oven_1", "question": "q?",
                                                       "answer": 7, "answer_eval": "x"})},
     ["data", "convert", "i.jsonl", "o.jsonl", "--from", "infoseek", "--to", "kbvqa"], ["i.jsonl"]),
    ("unknown-format", {"s.jsonl": _jsonl(GOOD_SAMPLE)},
     ["data", "convert", "s.jsonl", "o.jsonl", "--from", "nope", "--to", "kbvqa"], ["nope"]),
    ("wiki-not-json", {"w.json": "{\"https://x\": {"}, ["kb", "import", "w.json", "--out", "kb.sqlite"], ["w.json"]),
    ("wiki-wrong-shape", {"w.json": json.dumps([1, 2, 3])}, ["kb", "import", "w.json", "--out", "kb.sqlite"],
     ["w.json"]),
    ("wiki-article-sections-mismatch", {"w.json": json.dumps({"https://en.wikipedia.org/wiki/Y": {
        "title": "Y", "section_titles": ["A", "B"], "section_texts": "not a list"}})},
     ["kb", "import", "w.json", "--out", "kb.sqlite"], ["w.json"]),
    ("kb-not-sqlite", {"kb.sqlite": "this is not a database", "s.jsonl": _jsonl(GOOD_SAMPLE)},
     ["audit", "run", "s.jsonl", "--kb", "kb.sqlite", "--from", "kbvqa", "--out", "a.jsonl"], ["kb.sqlite"]),
    ("toml-syntax-error", {"w.json": json.dumps(WIKI), "s.jsonl": _jsonl(GOOD_SAMPLE), "c.toml": "[roles\nx = 1"},
     ["audit", "run", "s.jsonl", "--kb", "w.json", "--from", "kbvqa", "--config", "c.toml", "--out", "a.jsonl"],
     ["c.toml"]),
    ("toml-unknown-role", {"w.json": json.dumps(WIKI), "s.jsonl": _jsonl(GOOD_SAMPLE),
                           "c.toml": "[models.verifierr]\nbackend = \"openai\"\nmodel = \"m\"\n"},
     ["audit", "run", "s.jsonl", "--kb", "w.json", "--from", "kbvqa", "--config", "c.toml", "--out", "a.jsonl"],
     ["verifierr"]),
    ("toml-unknown-audit-key", {"w.json": json.dumps(WIKI), "s.jsonl": _jsonl(GOOD_SAMPLE),
                                "c.toml": "[audit.verify]\nmin_overlapp = 0.5\n"},
     ["audit", "run", "s.jsonl", "--kb", "w.json", "--from", "kbvqa", "--config", "c.toml", "--out", "a.jsonl"],
     ["c.toml", "min_overlapp"]),
    ("toml-wrong-type", {"w.json": json.dumps(WIKI), "s.jsonl": _jsonl(GOOD_SAMPLE),
                         "c.toml": "[models.verifier]\nbackend = \"openai\"\nmodel = \"m\"\nmax_retries = \"many\"\n"},
     ["audit", "run", "s.jsonl", "--kb", "w.json", "--from", "kbvqa", "--config", "c.toml", "--out", "a.jsonl"],
     ["max_retries"]),
    ("predictions-broken-line", {"p.jsonl": _jsonl({"data_id": "s1", "prediction": "x"}, "{oops"),
                                 "r.jsonl": _jsonl({"data_id": "s1", "answer": ["x"], "answer_eval": ["x"],
                                                    "data_split": "val_unseen_question", "question_type": "String"})},
     ["score", "infoseek", "-p", "p.jsonl", "-r", "r.jsonl"], ["p.jsonl", "2"]),
    ("predictions-match-no-reference", {"p.jsonl": _jsonl({"data_id": "zz", "prediction": "x"}),
                                        "r.jsonl": _jsonl({"data_id": "s1", "answer": ["x"], "answer_eval": ["x"],
                                                           "data_split": "val_unseen_question",
                                                           "question_type": "String"})},
     ["score", "infoseek", "-p", "p.jsonl", "-r", "r.jsonl"], ["p.jsonl"]),
    ("evqa-references-wrong-file", {"p.jsonl": _jsonl({"data_id": "s1", "prediction": "x"}),
                                    "r.csv": "foo,bar\n1,2\n"},
     ["score", "evqa", "-p", "p.jsonl", "-r", "r.csv"], ["r.csv"]),
    ("study-json-not-a-study", {"res/x.study.json": json.dumps({"hello": "world"})},
     ["report", "build", "res"], ["x.study.json"]),
    ("study-json-broken", {"res/x.study.json": "{\"kind\": \"by-group\", "}, ["report", "build", "res"],
     ["x.study.json"]),
    ("index-images-folder-without-the-images", {"w.json": json.dumps({"https://en.wikipedia.org/wiki/X": {
        **WIKI["https://en.wikipedia.org/wiki/X"], "image_urls": ["https://upload.x.org/a/missing.jpg"]}})},
     ["index", "images", "--kb", "w.json", "--images", "imgs", "--out", "idx"], ["imgs"]),
    ("retrieve-index-missing", {"s.jsonl": _jsonl(GOOD_SAMPLE)},
     ["retrieve", "--index", "nope", "--samples", "s.jsonl", "--out", "r.jsonl"], ["nope"]),
    ("augment-image-is-a-bomb", {"s.jsonl": _jsonl({**GOOD_SAMPLE, "images": ["bomb.png"]}), "img/bomb.png": _png_bomb()},
     ["augment", "s.jsonl", "--images", "img", "--out", "aug"], []),
    ("augment-images-not-images", {"s.jsonl": _jsonl(*[{**GOOD_SAMPLE, "id": f"s{i}", "images": [f"{i}.jpg"]}
                                                       for i in range(3)]),
                                   **{f"img/{i}.jpg": b"GIF89a not really" for i in range(3)}},
     ["augment", "s.jsonl", "--images", "img", "--out", "aug"], []),
    ("answer-samples-not-found", {"w.json": json.dumps(WIKI)},
     ["answer", "--samples", "missing.jsonl", "--kb", "w.json", "--out", "p.jsonl"], ["missing.jsonl"]),
]


def _write(folder: Path, files: dict[str, str | bytes]) -> None:
    for name, body in files.items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            p.write_bytes(body)
        else:
            p.write_text(body, encoding="utf-8")
    (folder / "imgs").mkdir(exist_ok=True)
    Image.new("RGB", (8, 8), (200, 30, 30)).save(folder / "a.jpg")


def test_the_corpus_is_broad():
    assert len(CASES) >= 20 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name, files, argv, mentions", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_ends_cleanly(tmp_path, monkeypatch, name, files, argv, mentions):
    _write(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, argv)
    out = res.output
    # a clean end: typer/click's exit (usage or our own), never an exception escaping the command
    assert res.exception is None or isinstance(res.exception, SystemExit), \
        f"{name}: {type(res.exception).__name__}: {res.exception}\n{out}"
    assert "Traceback" not in out, out
    # an error exits non-zero; a counted warning (the other half of the input policy) may exit 0
    assert res.exit_code != 0 or "warning" in mentions or name.startswith("augment-"), f"{name} exited 0:\n{out}"
    for word in mentions:
        assert word in out, f"{name}: {word!r} not in:\n{out}"

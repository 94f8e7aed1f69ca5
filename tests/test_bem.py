"""BEM's code path against the reference implementation's behaviour, with a tiny random model.

No BEM weights ship with kbvqa, so these tests check what can be checked without them: that the
inputs are the ones E-VQA's evaluation_utils / the BEM example colab build on the cases their authors
publish (the colab's sky-blue example, the E-VQA README's Menger hotel), that the decision is
softmax(logits)[1] >= 0.5, that exact match short-cuts BEM, and that the study scorer `evqa-bem`
refuses to run without a model directory. The model is a randomly initialised two-layer BERT built
from a config and saved to a tmp dir; its scores mean nothing, only the plumbing is under test.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from kbvqa.cli.study import app as study_app  # noqa: E402
from kbvqa.evaluate import evqa as ev  # noqa: E402
from kbvqa.evaluate.io import PredictionRecord  # noqa: E402

runner = CliRunner()

# the words of the published cases, as lower-cased WordPiece sees them
_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "?", ",", "why", "is", "the", "sky", "blue", "light",
          "scattering", "of", "where", "does", "this", "hotel", "derive", "its", "name", "from", "william", "and",
          "mary", "menger", "family", "baker", "which", "colours", "red", "white", "cafe"]
_ID = {w: i for i, w in enumerate(_WORDS)}

# Published cases: the BEM colab's example, and E-VQA README's two answers to one question.
SKY = {"question": "why is the sky blue", "reference": "light scattering", "candidate": "scattering of light"}
HOTEL_Q = "Where does this hotel derive its name from?"


def _tiny_bem(path, *, bias=None, zero_classifier=False, type_vocab_size=3, lower=True):
    """A random BERT classifier with BEM's interface (2 labels), saved as a transformers directory."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    path.mkdir()
    (path / "vocab.txt").write_text("\n".join(_WORDS) + "\n", encoding="utf-8")
    BertTokenizer(str(path / "vocab.txt"), do_lower_case=lower).save_pretrained(str(path))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(_WORDS), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, type_vocab_size=type_vocab_size, num_labels=2, max_position_embeddings=512,
                     initializer_range=0.5)  # wide weights, so different inputs score visibly apart
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():
        if zero_classifier:
            model.classifier.weight.zero_()
            model.classifier.bias.zero_()
        if bias is not None:
            model.classifier.bias.copy_(torch.tensor(bias))
    model.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def bem_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bem")
    return {"random": _tiny_bem(root / "random"),
            "half": _tiny_bem(root / "half", zero_classifier=True),  # logits (0, 0): P = 0.5 exactly
            "below": _tiny_bem(root / "below", zero_classifier=True, bias=[1e-3, 0.0]),  # P just under 0.5
            "two_types": _tiny_bem(root / "two_types", type_vocab_size=2)}


def _expected(candidate: list[str], reference: list[str], question: list[str]) -> tuple[list[int], list[int]]:
    """combine_segments((candidate, reference, question), CLS, SEP), written out by hand."""
    ids = [_ID["[CLS]"], *(_ID[w] for w in candidate), _ID["[SEP]"], *(_ID[w] for w in reference), _ID["[SEP]"],
           *(_ID[w] for w in question), _ID["[SEP]"]]
    types = [0] * (len(candidate) + 2) + [1] * (len(reference) + 1) + [2] * (len(question) + 1)
    return ids, types


def test_inputs_as_the_reference_builds_them(bem_dirs):
    bem = ev.load_bem(bem_dirs["random"])
    got = bem.encode(SKY["candidate"], SKY["reference"], SKY["question"])
    assert got == _expected(["scattering", "of", "light"], ["light", "scattering"], ["why", "is", "the", "sky", "blue"])
    # the README's case: raw texts (the article stays, case folds, "?" is its own token)
    got = bem.encode("William and Mary Menger", "the Menger family", HOTEL_Q)
    assert got == _expected(["william", "and", "mary", "menger"], ["the", "menger", "family"],
                            ["where", "does", "this", "hotel", "derive", "its", "name", "from", "?"])
    assert bem.encode("Café", "cafe", "why")[0][1] == _ID["cafe"]  # accents stripped, as lower_case=True does
    # a model with two token types: kbvqa's fallback 0, 1, 1 (the reference has no rule for it)
    two = ev.load_bem(bem_dirs["two_types"])
    assert two.encode(SKY["candidate"], SKY["reference"], SKY["question"])[1] == [0] * 5 + [1] * 9


def test_multi_answer_reference_segment(bem_dirs):
    """evaluation_utils replaces `&&` by `,` in multi_answer references only; other types keep the text."""
    bem = ev.load_bem(bem_dirs["random"])
    multi = ev.EVQARef("m", "which colours?", "multi_answer", ["red&&white"], [frozenset({"red", "white"})], 2)
    single = ev.EVQARef("s", "which colours?", "automatic", ["red&&white"], ["red&&white"], 3)
    assert bem.reference_text(multi, "red&&white") == "red,white"
    assert bem.reference_text(single, "red&&white") == "red&&white"
    assert bem.encode("blue", bem.reference_text(multi, "red&&white"), "which")[0][3:6] == [_ID["red"], _ID[","],
                                                                                         _ID["white"]]


def test_batched_padding_equals_the_references_fixed_512(bem_dirs):
    """kbvqa pads a batch to its longest input with an attention mask; the reference pads every input
    to 512 with id 0. On the same (random) model both give the same probability."""
    bem = ev.load_bem(bem_dirs["random"])
    triples = [(SKY["candidate"], SKY["reference"], SKY["question"]),
               ("William and Mary Menger", "the Menger family", HOTEL_Q), ("the Baker family", "the Menger family", HOTEL_Q)]
    ours = bem.probabilities(triples)
    for t, p in zip(triples, ours):
        ids, types = bem.encode(*t)
        pad = 512 - len(ids)
        ids_t = torch.tensor([ids + [0] * pad])
        with torch.no_grad():
            logits = bem.model(input_ids=ids_t, token_type_ids=torch.tensor([types + [0] * pad]),
                               attention_mask=(ids_t != 0).long()).logits
        assert p == pytest.approx(float(torch.softmax(logits[0], -1)[1]), abs=1e-5)
    assert len({round(p, 3) for p in ours}) == 3  # a random model: the three inputs really differ


def _hotel_refs() -> dict[str, ev.EVQARef]:
    return {"h1": ev.EVQARef("h1", HOTEL_Q, "automatic", ["the Menger family"], ["menger family"], 2),
            "h2": ev.EVQARef("h2", HOTEL_Q, "automatic", ["the Menger family"], ["menger family"], 3),
            "h3": ev.EVQARef("h3", HOTEL_Q, "automatic", ["Baker", "the Menger family"], ["baker", "menger family"], 4)}


def test_threshold_and_exact_match_shortcut(bem_dirs, monkeypatch):
    preds = [PredictionRecord("h1", "William and Mary Menger", 1), PredictionRecord("h2", "Menger Family!", 2),
             PredictionRecord("h3", "the Baker family", 3)]
    refs = _hotel_refs()
    half = ev.load_bem(bem_dirs["half"])
    asked: list[tuple[str, str, str]] = []
    real = half.probabilities
    monkeypatch.setattr(half, "probabilities", lambda triples: asked.extend(triples) or real(triples))
    res = ev.score_evqa(preds, refs, backend=half, per_item=True)
    items = {i["data_id"]: i for i in res.items}
    # EM first: h2 normalises to the reference and BEM is never asked about it
    assert items["h2"]["em"] and items["h2"]["correct"] and "judge_value" not in items["h2"]
    assert [t[0] for t in asked] == ["William and Mary Menger", "the Baker family", "the Baker family"]
    assert [t[1] for t in asked] == ["the Menger family", "Baker", "the Menger family"]  # every | alternative
    assert all(t[2] == HOTEL_Q for t in asked)
    # P = 0.5 exactly is equivalent (>= 0.5, as evaluation_utils thresholds)
    assert items["h1"]["judge_value"] == 0.5 and items["h1"]["correct"] and items["h3"]["correct"]
    below = ev.score_evqa(preds, refs, backend=ev.load_bem(bem_dirs["below"]), per_item=True)
    got = {i["data_id"]: i for i in below.items}
    assert got["h1"]["judge_value"] < 0.5 and not got["h1"]["correct"] and got["h2"]["correct"]
    assert below.summary["accuracy"] == pytest.approx(100 / 3, abs=0.01)
    assert "tested with a random model" in below.summary["judge"]["note"]


def test_cased_tokenizer_is_not_a_bem_port(tmp_path):
    with pytest.raises(RuntimeError, match="keeps case"):
        ev.load_bem(_tiny_bem(tmp_path / "cased", lower=False))


def _evqa_files(tmp_path):
    refs = tmp_path / "evqa.csv"
    refs.write_text("data_id,question,answer,question_type\n"
                    f'h1,"{HOTEL_Q}",the Menger family,automatic\n'
                    f'h2,"{HOTEL_Q}",the Menger family,automatic\n', encoding="utf-8")
    preds = tmp_path / "p.jsonl"
    preds.write_text("\n".join(json.dumps(r) for r in [{"data_id": "h1", "prediction": "William and Mary Menger"},
                                                       {"data_id": "h2", "prediction": "the Menger family"}]) + "\n",
                     encoding="utf-8")
    return refs, preds


def test_study_default_on_evqa_is_bem_and_refuses_without_a_model(tmp_path, bem_dirs):
    refs, preds = _evqa_files(tmp_path)
    for args in ([], ["--scorer", "evqa-bem"]):
        r = runner.invoke(study_app, ["by-type", "-p", str(preds), "-r", str(refs), "--resamples", "50", *args])
        assert r.exit_code == 2, r.output
        assert "needs a local BEM model directory" in r.output and "--bem-dir" in r.output
        assert "not BEM" in r.output  # the stand-ins are offered by name, never used silently
    r = runner.invoke(study_app, ["by-type", "-p", str(preds), "-r", str(refs), "--resamples", "50",
                                  "--bem-dir", str(bem_dirs["half"])])
    assert r.exit_code == 0, r.output
    assert "evqa-bem [evqa-em+bem(local:half)]" in " ".join(r.stdout.split())
    assert "scorer: evqa-bem (seed 000's metric" in r.stderr
    r = runner.invoke(study_app, ["by-type", "-p", str(preds), "-r", str(refs), "--resamples", "50", "--json",
                                  "--bem-dir", str(bem_dirs["below"])])
    res = json.loads(r.stdout)
    assert res["overall"]["correct"] == 1 and res["scorer"].startswith("evqa-bem")  # h2 by EM, h1 below 0.5
    # the stand-ins say what they are in the table
    r = runner.invoke(study_app, ["by-type", "-p", str(preds), "-r", str(refs), "--resamples", "50", "--json",
                                  "--scorer", "evqa"])
    assert json.loads(r.stdout)["scorer"] == "evqa (exact match only, not BEM)"
    r = runner.invoke(study_app, ["by-type", "-p", str(preds), "-r", str(refs), "--bem-dir", str(tmp_path)])
    assert r.exit_code == 2 and "holds no transformers model" in r.output


def test_a_number_without_bem_says_it_stands_in(bem_dirs):
    preds = [PredictionRecord("h1", "William and Mary Menger", 1)]
    refs = _hotel_refs()
    assert ev.score_evqa(preds, refs).summary["not_bem"].startswith("exact match only, not BEM")
    assert "not_bem" not in ev.score_evqa(preds, refs, backend=ev.load_bem(bem_dirs["half"])).summary

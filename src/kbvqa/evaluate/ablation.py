"""Image ablation of interleaved references (seed 001 §4.3): do the embedded images carry information
the text does not?

A generator reads a reference with its images inline and writes image-critical and text-answerable
probes (question + short answer); a reader answers each probe from the reference alone under three
conditions, and the SimpleQA-style judge (kbvqa.evaluate.judge) grades each answer against the
probe's answer. The conditions differ only in what stands where the reference's
`<image>{"candidate_images": N}</image>` tags were:

* `text`: nothing — the tags are removed (blank lines left behind are collapsed);
* `placeholder`: `[image K]`, K numbering the distinct images in order of first appearance;
* `full`: the image itself — the text is split at the tags and each image is sent as an image part
  in its tag's place, so the reader sees text, picture, text as a person reads the reference.

The reader never sees the query image or the probe's answer. The positive control reads every probe
under `full` too, so the `full` condition is a second reading of the same passage and question: it is
a measurement only if it is its own request. The reader therefore samples (`ReaderConfig.temperature`,
0.7 by default) with a seed sent in each request (`reading_seed`): the control and the condition reads
of a probe carry different seeds, so they are two samples and two cache keys, and a resumed or
replayed run gets each back exactly. A deterministic reader (temperature 0, or no seed) makes `full`
repeat the control; the study still runs and says so (`full_repeats_control`) instead of giving the
full condition a CI. Those settings are kbvqa's (the paper does not give the reader's).

This module holds the renderings, the
two model stages (`ProbeGeneration`, `PassageReader`: strict replies, a failed call is a runner
`error`, an unusable reply `invalid`, never a default) and the statistics: accuracy per probe kind
and condition with cluster-bootstrap CIs (probes are nested in reference items, so whole items are
resampled), paired differences between conditions, and the same by intent; and the missing-information
analysis (§4.3: text-only readers "report missing information that the images subsequently provide"):
the share of reader replies that say the passage does not give the answer, per kind, condition and
intent, and among the image-critical probes the full condition corrected, how many text-only replies
said so. A reply reports missing information when it gives the reader prompt's prescribed answer for
that case ("I cannot tell from the passage."); that reading is a rule, kbvqa's (the paper does not
say how it decided), and is labelled so in the output. The jobs that run the stages are in
kbvqa.pipelines.ablation.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence, get_args

import numpy as np
from pydantic import ConfigDict, Field

from kbvqa.data.notevqa import ReferenceTag
from kbvqa.data.notevqa import reference_tags as parse_reference_tags
from kbvqa.evaluate.studies import DEFAULT_RESAMPLES, CI, _sub_seed, cluster_bootstrap_ci
from kbvqa.models.images import image_part
from kbvqa.models.jsonx import extract_json
from kbvqa.models.prompts import Prompt
from kbvqa.models.prompts.ablation import GENERATE_PROBES, READ_PASSAGE
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.models.result import ModelCallError, call_model
from kbvqa.runner import Context, Invalid, Stage, StageConfig
from kbvqa.stages import register_stage

__all__ = ["KINDS", "CONDITIONS", "DIFFERENCES", "GRADED", "ReferenceTag", "reference_tags", "render_passage",
           "interleaved_messages", "Probe", "ProbeReply", "ProbeConfig", "ProbeGeneration", "ReaderConfig",
           "PassageReader", "READINGS", "reading_seed", "full_repeats_control", "probe_id", "ablation_statistics",
           "missing_information", "reports_missing"]

Kind = Literal["image_critical", "text_answerable"]
KINDS: tuple[str, ...] = get_args(Kind)
CONDITIONS = ("text", "placeholder", "full")
#: Paired differences reported (a minus b): what the images add, what a bare marker adds, and the rest.
DIFFERENCES = (("full", "text"), ("placeholder", "text"), ("full", "placeholder"))
#: Judge labels that grade an answer; anything else (reader or judge error/invalid) leaves it ungraded.
GRADED = ("correct", "incorrect", "not_attempted")

#: The reader's prescribed reply when the passage does not give the answer (READ_PASSAGE asks for it).
MISSING_INFO = re.compile(r"\bcannot tell from the passage\b", re.IGNORECASE)
MISSING_INFO_RULE = ("rule (kbvqa's): the reply contains the reader prompt's prescribed sentence for a passage that "
                     "does not give the answer, 'I cannot tell from the passage'")

#: Where an image goes in the rendered prompt text; never sent (the text is split there).
_SLOT = "\x00image\x00"


# --------------------------------------------------------------------------------------------------
# the three renderings


def reference_tags(text: str, n_images: int | None = None) -> list[ReferenceTag]:
    """Every image tag of a reference text, in order (kbvqa.data.notevqa.reference_tags; an image
    cited twice is shown twice). A malformed, unclosed or out-of-range tag is a ValueError naming
    it, so a broken reference fails where it is read."""
    tags, violations = parse_reference_tags(text, n_images, allow_duplicates=True)
    if violations:
        v = violations[0]
        if v["kind"] == "idx_out_of_range":
            raise ValueError(f"image tag {v['tag']!r} cites image {v['index']} but the reference has {n_images}")
        raise ValueError(f"malformed image tag {v['tag']!r}: {v['detail']}")
    return tags


def render_passage(text: str, condition: str) -> tuple[str, list[int]]:
    """The reference text as the reader gets it under `condition`, and the 1-based indices (into
    reference.images) of the images to show, in order. Under `full` the text holds one slot marker
    per image, which `interleaved_messages` replaces by the image; the other conditions show none."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r} (known: {', '.join(CONDITIONS)})")
    parts: list[str] = []
    shown: list[int] = []
    numbers: dict[int, int] = {}
    pos = 0
    for tag in reference_tags(text):
        parts.append(text[pos:tag.start])
        pos = tag.end
        if condition == "placeholder":
            parts.append(f"[image {numbers.setdefault(tag.index, len(numbers) + 1)}]")
        elif condition == "full":
            parts.append(_SLOT)
            shown.append(tag.index)
    parts.append(text[pos:])
    out = "".join(parts)
    if condition == "text":  # where a tag was: no double spaces, no run of empty lines
        out = re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]+\n", "\n", re.sub(r"[ \t]{2,}", " ", out)))
    return out.strip(), shown


def interleaved_messages(prompt: Prompt, images: Sequence[str | Path], **values: Any) -> list[dict[str, Any]]:
    """`prompt.messages(**values)`, except that the user text is split at each slot marker (see
    `render_passage`) and the next of `images` goes there as an image part: text, image, text."""
    msgs = prompt.messages(**values)
    pieces = msgs[-1]["content"].split(_SLOT)
    if len(pieces) - 1 != len(images):
        raise ValueError(f"{len(pieces) - 1} image slots in the passage but {len(images)} images")
    if not images:
        return msgs
    parts: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append({"type": "text", "text": piece})
        if i < len(images):
            parts.append(image_part(images[i]))
    return [*msgs[:-1], {"role": "user", "content": parts}]


def _passage_messages(prompt: Prompt, record: Mapping[str, Any], condition: str, ctx: Context,
                      **values: Any) -> list[dict[str, Any]]:
    """The messages for one record's reference ({text, images: [path, ...]}) under `condition`;
    image paths are relative to the `image_root` resource (the references file's folder)."""
    ref = record["reference"]
    text, shown = render_passage(ref["text"], condition)
    images = [ctx.image_path(ref["images"][i - 1]) for i in shown]
    return interleaved_messages(prompt, images, passage_raw=text, **values)


# --------------------------------------------------------------------------------------------------
# probe generation


class Probe(Reply):
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Kind
    question: NonBlank
    answer: NonBlank


class ProbeReply(Reply):
    """The generator's reply: exactly this object (no other keys, closed kinds, no placeholders)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    probes: list[Probe]


def probe_id(ref_id: str, kind: str, k: int) -> str:
    return f"{ref_id}::{kind}::{k}"


class ProbeConfig(StageConfig):
    role: str = "vision"  # the multimodal model that writes the probes
    per_kind: int = Field(2, ge=1)


@register_stage
class ProbeGeneration(Stage):
    """Records {id, reference: {text, images}}; adds `probes` [{id, kind, question, answer}] —
    exactly `per_kind` of each kind, or the record is `invalid` (a short or lopsided set would
    change what the study measures)."""

    name = "ablation-probes"
    version = "1"
    config_model = ProbeConfig
    prompts = (GENERATE_PROBES,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        n = self.config.per_kind
        msgs = _passage_messages(GENERATE_PROBES, record, "full", ctx, per_kind=n)
        who = f"generator ({self.config.role})"
        reply, res = await call_model(ctx.role(self.config.role), msgs, ProbeReply, ctx=ctx, who=who,
                                      prompt_version=GENERATE_PROBES.id)
        try:  # strict JSON: the whole reply is the object, no prose or second block around it
            extract_json(res.text, strict=True)
        except ValueError as exc:
            raise res.reject(f"{who} reply unusable: {exc}") from None
        got = Counter(p.kind for p in reply.probes)
        if any(got[k] != n for k in KINDS):
            raise res.reject(f"{who} reply unusable: expected {n} probes of each kind, got "
                             + ", ".join(f"{got[k]} {k}" for k in KINDS))
        seen: Counter[str] = Counter()
        probes = []
        for p in reply.probes:
            seen[p.kind] += 1
            probes.append({"id": probe_id(record["id"], p.kind, seen[p.kind]), **p.model_dump()})
        return {**record, "probes": probes, "generator": res.provenance.model_dump(mode="json", exclude_none=True)}


# --------------------------------------------------------------------------------------------------
# the reader


#: The reader's two readings of a probe: the positive control, and the three conditions (which share a seed,
#: so they differ only in the passage: common random numbers for the paired differences).
READINGS = ("control", "conditions")
#: What the output says of y_full when the reader cannot give the full condition its own sample.
REPEATS_CONTROL = "repeats the control ({why}): not an independent measurement"


class ReaderConfig(StageConfig):
    role: str = "answerer"  # the model that reads
    #: sent with every read, over the role's own: > 0 so the full condition is a sample of its own (kbvqa's)
    temperature: float = Field(0.7, ge=0)
    #: the base of the per-request seeds (`reading_seed`); None: no seed sent, control and full are one request
    sampling_seed: int | None = 1


def reading_seed(sampling_seed: int | None, probe: str, reading: str) -> int | None:
    """The sampling seed one read of `probe` sends (None: none). Different between the control and the
    conditions of a probe (2h and 2h + 1), so they are separate requests and cache keys; different
    between probes (h from the probe id), so probes do not share a random stream; below 2**31."""
    if reading not in READINGS:
        raise ValueError(f"unknown reading {reading!r} (known: {', '.join(READINGS)})")
    if sampling_seed is None:
        return None
    h = zlib.crc32(f"{sampling_seed}/{probe}".encode("utf-8")) & 0x3FFFFFFF
    return 2 * h + READINGS.index(reading)


def full_repeats_control(config: ReaderConfig) -> str | None:
    """None when the full condition is read as its own sample; otherwise the label the output gives
    y_full and every difference built on it (no CI is computed for them)."""
    if config.temperature == 0:
        return REPEATS_CONTROL.format(why="deterministic reader")
    if config.sampling_seed is None:
        return REPEATS_CONTROL.format(why="no sampling seed: the control and full reads are one request, "
                                          "which a cache or cassette answers once")
    return None


@register_stage
class PassageReader(Stage):
    """Records {id, condition, question, reference: {text, images}, seed}; adds `response`, the reader's
    answer from the reference rendered under `condition`, sampled at the config's temperature with the
    record's seed (`reading_seed`; none sent when None). The probe's answer is not in the record."""

    name = "ablation-read"
    version = "2"  # 2: temperature and a per-read seed sent (the full condition is its own request)
    config_model = ReaderConfig
    prompts = (READ_PASSAGE,)

    def messages(self, record: Mapping[str, Any], ctx: Context) -> list[dict[str, Any]]:
        """What the reader is sent for `record`: the same instructions under every condition."""
        return _passage_messages(READ_PASSAGE, record, record["condition"], ctx, question=record["question"])

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        sampling: dict[str, Any] = {"temperature": self.config.temperature}
        if record.get("seed") is not None:  # never seed=None: that would drop a seed the role itself sets
            sampling["seed"] = record["seed"]
        res = await ctx.role(self.config.role).chat(self.messages(record, ctx), prompt_version=READ_PASSAGE.id,
                                                    **sampling)
        ctx.add_usage(res.usage)
        if res.status == "error":
            raise ModelCallError(f"reader ({self.config.role}) call failed: {res.reason}")
        if res.status != "ok" or not (res.text or "").strip():
            raise Invalid(f"reader ({self.config.role}) reply unusable: {res.reason or 'empty reply'}")
        return {**record, "response": res.text.strip(), "sampling": sampling,
                "reader": res.provenance.model_dump(mode="json", exclude_none=True)}


# --------------------------------------------------------------------------------------------------
# statistics


def _ci_json(ci: CI) -> dict[str, float] | None:
    return None if ci.estimate != ci.estimate else ci.scaled(100.0).to_json()


def _cells(probes: Sequence[Mapping[str, Any]], n_resamples: int, seed: int, name: str,
           repeats: str | None = None) -> dict[str, Any]:
    """Accuracy per condition and the paired differences over `probes` (all complete, one kind). With
    `repeats` (full_repeats_control) the full cell and the differences with full get no CI: their
    value is given with the label instead."""
    clusters = [p["ref_id"] for p in probes]
    x = {c: np.array([p["conditions"][c]["outcome"] == "correct" for p in probes], dtype=np.float64)
         for c in CONDITIONS}
    out: dict[str, Any] = {"n": len(probes), "n_references": len(set(clusters))}
    for c in CONDITIONS:
        if repeats and c == "full":
            out[c] = {"correct": int(x[c].sum()), "ci": None, **_unmeasured(x[c], repeats)}
            continue
        ci = cluster_bootstrap_ci(x[c], clusters, n_resamples=n_resamples, seed=_sub_seed(seed, f"{name}/{c}"))
        out[c] = {"correct": int(x[c].sum()), "ci": _ci_json(ci)}
    for a, b in DIFFERENCES:
        counts = {"gained": int(((x[a] == 1) & (x[b] == 0)).sum()), "lost": int(((x[a] == 0) & (x[b] == 1)).sum())}
        if repeats and "full" in (a, b):
            out[f"{a}-{b}"] = {"ci": None, **_unmeasured(x[a] - x[b], repeats), **counts}
            continue
        ci = cluster_bootstrap_ci(x[a] - x[b], clusters, n_resamples=n_resamples,
                                  seed=_sub_seed(seed, f"{name}/{a}-{b}"))
        out[f"{a}-{b}"] = {"ci": _ci_json(ci), **counts}
    return out


def _unmeasured(x: np.ndarray, repeats: str) -> dict[str, Any]:
    """A cell that is not a measurement: its value (percent or points), said to be what it is."""
    return {"value": round(100.0 * float(x.mean()), 4) if len(x) else None, "not_independent": repeats}


def reports_missing(response: str | None) -> bool:
    """Does a reader reply say the passage does not give the answer (MISSING_INFO_RULE)?"""
    return bool(MISSING_INFO.search(response or ""))


def _share(flags: Sequence[bool], clusters: Sequence[str], n_resamples: int, seed: int, name: str) -> dict[str, Any]:
    x = np.array(flags, dtype=np.float64)
    ci = cluster_bootstrap_ci(x, list(clusters), n_resamples=n_resamples, seed=_sub_seed(seed, name))
    return {"n": len(flags), "reports": int(x.sum()), "ci": _ci_json(ci) if len(flags) else None}


def missing_information(probes: Sequence[Mapping[str, Any]], *, n_resamples: int = DEFAULT_RESAMPLES,
                        seed: int = 0, full_repeats: str | None = None) -> dict[str, Any]:
    """Over the complete probes (the accuracy tables' denominator): the share of reader replies that
    report missing information, per kind and condition and per intent; and, among image-critical
    probes the full condition corrected (text-only not correct, full correct), the share whose
    text-only reply reported it — seed 001 §4.3 says all 281 such replies did. Percent, cluster
    bootstrap CIs over reference items. With `full_repeats`, "corrected by full" is labelled: the
    full reading there is the control's."""
    complete = [p for p in probes if _complete(p)]

    def table(sub: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
        ids = [p["ref_id"] for p in sub]
        return {c: _share([reports_missing(p["conditions"][c].get("response")) for p in sub], ids, n_resamples, seed,
                          f"missing/{name}/{c}") for c in CONDITIONS}

    by_kind = {k: table([p for p in complete if p["kind"] == k], k) for k in KINDS}
    by_intent = []
    for intent in sorted({p.get("intent") or "(none)" for p in complete}):
        for k in KINDS:
            sub = [p for p in complete if p["kind"] == k and (p.get("intent") or "(none)") == intent]
            if sub:
                by_intent.append({"intent": intent, "kind": k, **table(sub, f"{intent}/{k}")})
    corrected = [p for p in complete if p["kind"] == "image_critical"
                 and p["conditions"]["full"]["outcome"] == "correct" and p["conditions"]["text"]["outcome"] != "correct"]
    said = _share([reports_missing(p["conditions"]["text"].get("response")) for p in corrected],
                  [p["ref_id"] for p in corrected], n_resamples, seed, "missing/corrected")
    corrected_by_full = {"probes": len(corrected), "text_reply_reports_missing": said}
    if full_repeats:
        corrected_by_full["not_independent"] = full_repeats
    return {"measured_by": MISSING_INFO_RULE, "by_kind": by_kind, "by_intent": by_intent,
            "corrected_by_full": corrected_by_full}


def _complete(p: Mapping[str, Any]) -> bool:
    return all(p["conditions"][c]["outcome"] in GRADED for c in CONDITIONS)


def ablation_statistics(probes: Iterable[Mapping[str, Any]], *, n_resamples: int = DEFAULT_RESAMPLES,
                        seed: int = 0, full_repeats: str | None = None) -> dict[str, Any]:
    """Accuracy tables over the probes the positive control kept.

    Each probe is {ref_id, intent, kind, conditions: {text|placeholder|full: {outcome}}}, outcome a
    judge label or reader_error / reader_invalid / judge_error / judge_invalid. Denominator: the
    probes graded in all three conditions ("complete"), so every condition of a kind is measured on
    the same probes and the differences are paired; a probe with an error or invalid reply in any
    condition is left out of all three and counted (`incomplete`, by condition and outcome). CIs:
    95% percentile, cluster bootstrap over reference items, seeded per cell (`_sub_seed`).
    `full_repeats` (full_repeats_control's label): the full condition repeats the control, so it and
    the differences with it get the label and no CI."""
    kept = list(probes)
    complete = [p for p in kept if _complete(p)]
    failures: dict[str, Counter[str]] = {c: Counter() for c in CONDITIONS}
    for p in kept:
        for c in CONDITIONS:
            if p["conditions"][c]["outcome"] not in GRADED:
                failures[c][p["conditions"][c]["outcome"]] += 1
    by_kind = {k: _cells([p for p in complete if p["kind"] == k], n_resamples, seed, k, full_repeats) for k in KINDS}
    intents = sorted({p.get("intent") or "(none)" for p in complete})
    by_intent = []
    for intent in intents:
        for k in KINDS:
            sub = [p for p in complete if p["kind"] == k and (p.get("intent") or "(none)") == intent]
            if sub:
                by_intent.append({"intent": intent, "kind": k,
                                  **_cells(sub, n_resamples, seed, f"{intent}/{k}", full_repeats)})
    return {
        "by_kind": by_kind, "by_intent": by_intent,
        "kept": {k: sum(p["kind"] == k for p in kept) for k in KINDS},
        "complete": {k: sum(p["kind"] == k for p in complete) for k in KINDS},
        "incomplete": {k: sum(p["kind"] == k and not _complete(p) for p in kept) for k in KINDS},
        "ungraded_by_condition": {c: dict(sorted(failures[c].items())) for c in CONDITIONS},
        "missing_information": missing_information(complete, n_resamples=n_resamples, seed=seed,
                                                   full_repeats=full_repeats),
    }

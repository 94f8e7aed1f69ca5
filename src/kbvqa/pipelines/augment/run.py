"""Augmentation orchestration: read -> tag -> sample -> rewrite -> composite (pool) -> write.

Outputs in OUT_DIR:
- `manifest.csv`   the ARA augmented-file columns, one row per augmented anchor
- `manifest.jsonl` every input sample with a status (ok | partial | error | excluded | not_sampled)
- `samples.jsonl`  kbvqa Samples `<id>__anchor|__intra|__inter|__blank|__double`, their images named
  relative to OUT_DIR (so OUT_DIR is their image root, and the folder can move)
- `anchors/`       the anchors' own images (hard links where the file system allows, else copies)
- `stats.json`     type distribution, side balance, exclusions, quotas, variant status
- `types.jsonl`    the type tagger's runner output (one status line per sample) and
  `types.manifest.json` (prompt hash, tagger model, counts, tokens and cost)
- `composites/{method1,method2,blank,double}/NNNN_<anchor>__...` images

Two executors, on purpose. Type tagging may call a model, per sample: it is the
`augment-entity-type` stage run through the runner (resume, manifest, usage, a status per sample;
see pipelines/augment/types.py). Composite building is CPU work on local files with a deterministic
result and no model, cost or partial state worth resuming (a rerun rebuilds the same bytes), and it
must use every core on pixels, which an asyncio runner in one process would not: so it stays a
process pool (composite.run_tasks), and each composite's failure is still recorded per variant in
the manifest, never dropped.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kbvqa.data.formats import non_empty, read_samples, write_samples
from kbvqa.data.images import ImageRefError, resolve_image
from kbvqa.data.schema import Sample
from kbvqa.pipelines.augment import composite as comp
from kbvqa.pipelines.augment import manifest as mf
from kbvqa.pipelines.augment import rewrite as rw
from kbvqa.pipelines.augment import stats as st
from kbvqa.pipelines.augment.distractors import Candidate, Choice, Sampler, build_pools, entity_key
from kbvqa.pipelines.augment.options import ALL_VARIANTS, AugmentOptions
from kbvqa.pipelines.augment.types import TypeTag, tag_samples

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _locate(image: str, root: Path) -> Path:
    """The file a sample's image reference names, by the one resolver (ImageRefError outside the
    root); a missing file keeps its would-be path, so it is counted as an ineligible distractor."""
    try:
        return resolve_image(image, root)
    except FileNotFoundError:
        p = Path(image)
        return p if p.is_absolute() else root / p


def _place_anchor(src: Path, out: Path, name: str) -> str:
    """The anchor image under OUT/anchors (a hard link, else a copy); its reference relative to OUT."""
    rel = Path("anchors") / f"{name}{src.suffix.lower()}"
    dst = out / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        try:
            os.link(src, dst)
        except OSError:  # another file system, or links not allowed
            shutil.copyfile(src, dst)
    return rel.as_posix()


def _stem(path: str) -> str:
    return Path(path).stem if path else ""


def _positions(side: str, n: int, cfg: AugmentOptions) -> tuple[int, str, int]:
    """(anchor panel index, cue position, grid columns) for `n` panels."""
    if cfg.layout == "row":
        return (0 if side == "left" else n - 1), side, 0
    import math
    cols = math.ceil(math.sqrt(n))
    return (0, "top left", cols) if side == "left" else (cols - 1, "top right", cols)


def _arrange(anchor: str, others: list[str], at: int) -> tuple[str, ...]:
    panels = list(others)
    panels.insert(at, anchor)
    return tuple(panels)


def _pick(sampler: Sampler, anchor: Candidate, kind: str, k: int) -> list[Choice]:
    chosen: list[Choice] = []
    used: set[str] = set()
    for _ in range(k):
        ch = sampler.intra(anchor, used) if kind == "intra" else sampler.inter(anchor, used)
        chosen.append(ch)
        if ch.candidate is None:
            break
        used.add(ch.candidate.entity_key)
    return chosen


#: the variants the paper compares on the same anchors (§5.2: excluded "from both splits")
PAIRED = ("intra", "inter")


def _exclude_pair(status: dict[str, str], errors: dict[str, str], variants: Sequence[str]) -> None:
    """When one of an anchor's intra/inter variants fails, the other is `excluded` too (its reason
    names the failed one), so the two splits hold the same anchors."""
    pair = [v for v in PAIRED if v in variants]
    failed = [v for v in pair if v in errors]
    if len(pair) < 2 or not failed:
        return
    for v in pair:
        if v not in errors:
            status[v], errors[v] = "excluded", f"paired: {failed[0]} {status[failed[0]]}: {errors[failed[0]]}"


def augment_samples(samples: Sequence[Sample], images_root: str | Path, out_dir: str | Path,
                    opts: AugmentOptions | None = None, *, encoder: Any = None, client: Any = None, kb: Any = None,
                    progress: bool = False) -> dict[str, Any]:
    """Augment `samples` with the settings `opts` (None: AugmentOptions' defaults); write manifest,
    samples, stats and composites under `out_dir`; return stats. The objects a setting cannot hold
    are arguments: `encoder` (an ImageEncoder: the hardest same-type distractor by image similarity;
    `opts.similar` without one uses the histogram baseline), `client` (the model in the type
    tagger's role) and `kb` (Article.meta["type"] fallback). `progress` shows the tagger's and the
    composites' progress bars (on a terminal)."""
    cfg = opts if opts is not None else AugmentOptions.build()
    if encoder is None and cfg.similar:
        from kbvqa.models.image_encoders import HistogramEncoder

        encoder = HistogramEncoder()
    url_types = cfg.url_type_map()
    root, out = Path(images_root).resolve(), Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    variants = tuple(v for v in ALL_VARIANTS if v in cfg.variants)
    tagging = cfg.tagging

    entries: dict[int, dict[str, Any]] = {}
    seen: set[str] = set()
    live: list[int] = []
    for i, s in enumerate(samples):
        if s.id in seen:
            entries[i] = {"anchor_data_id": s.id, "status": "excluded", "reason": "duplicate_id", "index": i}
        else:
            seen.add(s.id)
            live.append(i)
    tags: dict[int, TypeTag] = dict(zip(live, tag_samples([samples[i] for i in live], tagging, client=client,
                                                          kb=kb, url_types=url_types,
                                                          concurrency=cfg.concurrency, out=out / "types.jsonl",
                                                          progress=progress,
                                                          run_config={"options": cfg.used()})))
    cands: list[Candidate] = []
    for i in live:
        s, tag = samples[i], tags[i]
        base = {"anchor_data_id": s.id, "anchor_question": s.question, "index": i,
                "anchor_entity_type": tag.type or "", "type_source": tag.source}
        if tag.excluded:
            entries[i] = {**base, "status": "excluded", "reason": tag.excluded, "errors": tag.notes}
        elif not s.images:
            entries[i] = {**base, "status": "excluded", "reason": "no_image"}
        else:
            try:
                image = _locate(s.images[0], root)
            except ImageRefError as exc:
                entries[i] = {**base, "status": "excluded", "reason": f"image_ref: {exc}"}
                continue
            ent = s.entity
            cands.append(Candidate(index=i, id=s.id, type=tag.type or "",
                                   entity_key=entity_key(ent.url if ent else None, ent.title if ent else None, s.id),
                                   title=(ent.title if ent and ent.title else "") or s.id, question=s.question,
                                   image=str(image)))
    pools = build_pools(cands, cfg.min_entities)
    for c in cands:
        if c.type in pools.dropped_types:
            entries[c.index] = {"anchor_data_id": c.id, "anchor_question": c.question, "index": c.index,
                                "anchor_entity_type": c.type, "type_source": tags[c.index].source,
                                "status": "excluded", "reason": "type_below_min_entities"}
    pooled = [c for t in pools.by_type.values() for c in t]
    eligible = {c.index for c in pooled if os.path.isfile(c.image)}
    sampler = Sampler(pools, seed=cfg.seed, families=cfg.families, forced_pairs=cfg.forced_pairs,
                      encoder=encoder, eligible=eligible)
    anchors = sampler.select_anchors(cfg.num_samples)
    sides = sampler.sides(len(anchors))
    chosen = {c.index for c in anchors}
    for c in pooled:
        if c.index not in chosen:
            entries[c.index] = {"anchor_data_id": c.id, "anchor_question": c.question, "index": c.index,
                                "anchor_entity_type": c.type, "type_source": tags[c.index].source,
                                "status": "not_sampled", "reason": f"num_samples={cfg.num_samples}"}

    style = cfg.composite
    ext = style.fmt
    tasks: list[comp.Task] = []
    task_keys: list[list[str]] = []  # variant per job
    rows: list[dict[str, Any]] = []
    for n, (a, side) in enumerate(zip(anchors, sides)):
        s = samples[a.index]
        answers = s.answer_texts
        vocab = tagging.vocabulary_for(s.dataset, s.id)  # the sample's benchmark's
        explicit, match, made = rw.prepare(s.question, a.type, vocab)
        npanel = cfg.k + 1
        at, position, cols = _positions(side, npanel, cfg)
        q_pos = rw.rewrite_positional(explicit, match, a.type, position, vocab, answers)
        intra = _pick(sampler, a, "intra", cfg.k)
        inter = _pick(sampler, a, "inter", cfg.k)
        other = "right" if side == "left" else "left"
        ent_url = s.entity.url if s.entity and s.entity.url else ""

        def pair_cols(prefix: str, chs: list[Choice]) -> dict[str, Any]:
            cs = [c.candidate for c in chs if c.candidate is not None]
            js = lambda xs: "|".join(xs)  # noqa: E731 - k > 1 distractors joined with '|'
            return {f"{prefix}_pair_entity": js(c.title for c in cs),
                    f"{prefix}_pair_data_id": js(c.id for c in cs),
                    f"{prefix}_pair_wikipedia_url": js((samples[c.index].entity.url or "") if samples[c.index].entity else "" for c in cs),
                    f"{prefix}_pair_type": js(c.type for c in cs),
                    f"{prefix}_similarity_basis": js(c.basis for c in chs),
                    f"{prefix}_composite_layout": f"{a.title}({side}) + " + " + ".join(f"{c.title}({other})" for c in cs) if cs else "",
                    f"{prefix}_pair_image_id": js(_stem(samples[c.index].images[0]) for c in cs),
                    f"{prefix}_pair_image_path": js(samples[c.index].images[0] for c in cs)}

        # the paper's inter question is the anchor's, unchanged (§5.1); the authors' release: with the cue
        q_inter = q_pos.text if cfg.with_position else (explicit if cfg.inter_explicit else s.question)
        row: dict[str, Any] = {
            "anchor_data_id": s.id, "anchor_entity": a.title if s.entity and s.entity.title else "",
            "anchor_wikipedia_url": ent_url, "anchor_entity_type": a.type, "anchor_question": s.question,
            "anchor_answer": "|".join(answers), "anchor_question_type": s.answer_type or s.question_type or "",
            "target_side": side,
            **pair_cols("method1", intra),
            "method1_query": q_pos.text, "method1_expected_answer": "|".join(answers),
            **pair_cols("method2", inter),
            "method2_query": q_inter, "method2_query_with_position": q_pos.text,
            "method2_query_without_position": explicit, "method2_expected_answer": "|".join(answers),
            "anchor_image_id": _stem(s.images[0]), "anchor_image_path": s.images[0],
            "index": a.index, "type_source": tags[a.index].source, "anchor_question_explicit": explicit,
            "anchor_question_made_explicit": made, "with_position": cfg.with_position,
            "method1_similarity": intra[0].similarity if intra else None,
            "method1_query_errors": q_pos.errors, "method2_query_errors": q_pos.errors if cfg.with_position else [],
            "blank_query": q_pos.text, "double_query": q_pos.text,
        }
        row["distractor_entity"] = row["method2_pair_entity"]
        row["distractor_wikipedia_url"] = row["method2_pair_wikipedia_url"]
        errors: dict[str, str] = {}
        status: dict[str, str] = {v: "skipped" for v in ALL_VARIANTS}
        paths: dict[str, str] = {v: "" for v in ALL_VARIANTS}
        images = {"anchor": a.image}
        jobs: list[comp.Job] = []
        keys: list[str] = []
        aid = _SAFE.sub("_", s.id)
        for v in variants:
            chs = intra if v in ("intra", "blank", "double") else inter
            missing = [c for c in chs if c.candidate is None]
            if v in ("intra", "blank", "double") and q_pos.errors:
                status[v], errors[v] = "invalid", "rewrite: " + "; ".join(q_pos.errors)
            elif v == "inter" and cfg.with_position and q_pos.errors:
                status[v], errors[v] = "invalid", "rewrite: " + "; ".join(q_pos.errors)
            elif missing and v != "double":
                status[v], errors[v] = "error", f"no distractor: {missing[0].reason}"
        if cfg.paired_exclusion:
            _exclude_pair(status, errors, variants)
        for v in variants:
            if v in errors:
                continue
            chs = intra if v in ("intra", "blank", "double") else inter
            pref = "intra_distractor" if chs is intra else "inter_distractor"
            names = []
            for j, c in enumerate(chs):
                if c.candidate is not None:
                    images[f"{pref}_{j + 1}"] = c.candidate.image
                    names.append(f"{pref}_{j + 1}")
            pair = "+".join(_SAFE.sub("_", c.candidate.id) for c in chs if c.candidate is not None)
            if v == "intra":
                rel, panels = f"method1/{n:04d}_{aid}__m1__{pair}.{ext}", _arrange("anchor", names, at)
            elif v == "inter":
                rel, panels = f"method2/{n:04d}_{aid}__m2__{pair}.{ext}", _arrange("anchor", names, at)
            elif v == "blank":
                rel, panels = f"blank/{n:04d}_{aid}__blank__{pair}.{ext}", _arrange("anchor", [f"blank:{x}" for x in names], at)
            else:
                rel, panels = f"double/{n:04d}_{aid}__double.{ext}", _arrange("anchor", ["anchor"] * cfg.k, at)
            paths[v] = f"composites/{rel}"
            jobs.append(comp.Job(str(out / "composites" / rel), panels, cfg.layout, cols))
            keys.append(v)
        rows.append({"row": row, "errors": errors, "status": status, "paths": paths, "sample": s,
                     "anchor_image": a.image})
        tasks.append(comp.Task(images=images, jobs=tuple(jobs), style=style))
        task_keys.append(keys)

    results = comp.run_tasks(tasks, cfg.workers, progress=progress)
    aug_samples: list[Sample] = []
    for r, keys, res in zip(rows, task_keys, results):
        for v, jr in zip(keys, res):
            r["status"][v] = jr.status
            if jr.status != "saved":
                r["errors"][v] = jr.reason
        if cfg.paired_exclusion:
            _exclude_pair(r["status"], r["errors"], variants)  # a composite that failed takes its pair along
        row, status, paths = r["row"], r["status"], r["paths"]
        row.update({
            "method1_composite_image_path": paths["intra"], "method2_composite_image_path": paths["inter"],
            "method1_image_status": status["intra"], "method2_image_status": status["inter"],
            "blank_composite_image_path": paths["blank"], "blank_image_status": status["blank"],
            "double_composite_image_path": paths["double"], "double_image_status": status["double"],
            "image_error": "; ".join(f"{v}: {e}" for v, e in r["errors"].items()),
            "errors": r["errors"],
        })
        saved = sum(status[v] == "saved" for v in variants)
        row["status"] = "ok" if saved == len(variants) else ("partial" if saved else "error")
        row["reason"] = "" if row["status"] == "ok" else row["image_error"]
        entries[row["index"]] = row
        if saved:  # an anchor with no usable variant is left out of samples.jsonl (its row says why)
            placed = _place_anchor(Path(r["anchor_image"]), out, _SAFE.sub("_", r["sample"].id))
            anchor = r["sample"].model_copy(update={"images": [placed]})
            aug_samples.extend(mf.variant_samples(row, anchor, variants))

    ordered = [entries[i] for i in sorted(entries)]
    augmented = [e for e in ordered if e.get("status") in ("ok", "partial", "error")]
    # manifest order = composite index order (the order anchors were sampled)
    order = {r["row"]["anchor_data_id"]: n for n, r in enumerate(rows)}
    augmented.sort(key=lambda e: order[e["anchor_data_id"]])
    mf.write_csv(augmented, out / "manifest.csv")
    mf.write_manifest_jsonl(augmented + [e for e in ordered if e.get("status") not in ("ok", "partial", "error")],
                   out / "manifest.jsonl")
    write_samples(aug_samples, out / "samples.jsonl", "kbvqa")
    stats = st.compute(ordered, variants=variants, dropped_types=pools.dropped_types,
                       pool_sizes={t: len(v) for t, v in pools.by_type.items()},
                       extra={"seed": cfg.seed, "variants": list(variants), "layout": cfg.layout, "k": cfg.k,
                              "height": style.height, "resample": style.resample, "with_position": cfg.with_position,
                              "distractor_encoder": None if encoder is None else type(encoder).__name__,
                              "distractor_ineligible_missing_image": len(pooled) - len(eligible),
                              "embedding_failures": len(sampler.embed_failures),
                              "samples_written": len(aug_samples),
                              "type_vocabulary": dict(Counter(tagging.vocabulary_name(samples[i].dataset, samples[i].id)
                                                              for i in live)),
                              "samples_by_variant": dict(Counter(x.id.rsplit("__", 1)[1] for x in aug_samples)),
                              "options": cfg.used()})
    st.write(stats, out / "stats.json")
    return stats


def augment_file(input: str | Path, images_root: str | Path, out_dir: str | Path, opts: AugmentOptions | None = None,
                 *, encoder: Any = None, client: Any = None, kb: Any = None, progress: bool = False,
                 read_opts: Mapping[str, Any] | None = None, **settings: Any) -> dict[str, Any]:
    """Read `input` (any kbvqa-readable format, `opts.input_format` or detected; no samples is an
    error unless `opts.allow_empty`) and augment it; returns the stats dict. A library caller may
    give the settings as keywords instead of `opts` (`seed=7, height=64, url_types={...}`): they are
    built into AugmentOptions by its one builder, so a bad one is refused the same way."""
    if opts is None:
        opts = AugmentOptions.build(**settings)
    elif settings:
        raise TypeError(f"augment_file: give the options or the settings {sorted(settings)}, not both")
    samples = list(non_empty(read_samples(input, opts.input_format, **dict(read_opts or {})), input, opts.allow_empty))
    return augment_samples(samples, images_root, out_dir, opts, encoder=encoder, client=client, kb=kb,
                           progress=progress)

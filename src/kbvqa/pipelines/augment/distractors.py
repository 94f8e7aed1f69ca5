"""Seeded, reproducible anchor and distractor sampling.

Why these rules (ara-protocol §2, kept and made explicit):
- intra-category: same type, different entity, preferring a row that asks the *same question*, so the
  cue is the only thing that tells the two apart; optionally the hardest such distractor by image
  embedding (the authors' "similarity" was only the type label);
- inter-category: a different type, preferring a different *family* (a bird next to a building, not next
  to an insect), choosing the least-used type so far so distractor types stay balanced;
- never the anchor's own entity (canonical urls compared), and types with too few entities dropped,
  because an intra distractor needs a real choice.
Every choice draws from one `random.Random(seed)` in a fixed order, so a seed reproduces a run.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbvqa.data.urls import canonical_url
from kbvqa.data.matching import norm
from kbvqa.pipelines.augment.options import AugmentOptions
from kbvqa.stages.augment.vocabularies import all_families

#: type -> family over every type vocabulary (kbvqa.stages.augment.vocabularies)
DEFAULT_FAMILIES: dict[str, str] = all_families()


@dataclass(frozen=True)
class Candidate:
    """One tagged sample usable as anchor or distractor."""

    index: int  # position in the input
    id: str
    type: str
    entity_key: str  # canonical url, else the title, else the id
    title: str
    question: str
    image: str  # resolved path ('' when the sample has none)

    @property
    def qkey(self) -> str:
        return norm(self.question)


@dataclass
class Choice:
    candidate: Candidate | None
    basis: str  # same_type+same_question | same_type | same_type+image_similarity | forced_entity_pair |
    #             different_entity_type+cross_family | different_entity_type+same_family | none
    similarity: float | None = None
    reason: str = ""


def entity_key(url: str | None, title: str | None, sid: str) -> str:
    if url:
        return canonical_url(url)
    return f"title:{title.strip().lower()}" if title and title.strip() else f"id:{sid}"


@dataclass
class Pools:
    by_type: dict[str, list[Candidate]]
    dropped_types: dict[str, int] = field(default_factory=dict)  # type -> distinct entities


def build_pools(cands: Sequence[Candidate],
                min_entities: int = AugmentOptions.model_fields["min_entities"].default) -> Pools:
    """Group candidates by type; drop types with fewer than `min_entities` distinct entities."""
    by: dict[str, list[Candidate]] = {}
    for c in cands:
        by.setdefault(c.type, []).append(c)
    keep, dropped = {}, {}
    for t in sorted(by):
        n = len({c.entity_key for c in by[t]})
        (keep if n >= min_entities else dropped)[t] = by[t] if n >= min_entities else n
    return Pools(keep, dropped)


class Sampler:
    """Anchor selection and distractor choice over `Pools`, all from one seeded RNG."""

    def __init__(self, pools: Pools, *, seed: int, families: Mapping[str, str] | None = None,
                 forced_pairs: Mapping[str, str] | None = None, encoder: Any = None,
                 embeddings: Mapping[int, np.ndarray] | None = None, eligible: set[int] | None = None):
        self.pools = pools
        self.eligible = eligible  # indices allowed as distractors (None = all), e.g. images that exist
        self.rng = random.Random(seed)
        self.families = dict(DEFAULT_FAMILIES if families is None else families)
        self.forced = {canonical_url(k): canonical_url(v) for k, v in (forced_pairs or {}).items()}
        self.inter_use: Counter[str] = Counter()
        self.embeddings = dict(embeddings or {})
        self.encoder = encoder
        self.embed_failures: dict[int, str] = {}
        if encoder is not None and not self.embeddings:
            self._embed_all()

    def family(self, t: str) -> str:
        return self.families.get(t, t)

    def _embed_all(self) -> None:
        """Embed every pool image once; images that fail are noted and get no similarity."""
        for cands in self.pools.by_type.values():
            for c in cands:
                try:
                    if not c.image:
                        raise FileNotFoundError("no image")
                    self.embeddings[c.index] = np.asarray(self.encoder.encode([Path(c.image)])[0], dtype=np.float32)
                except Exception as e:  # noqa: BLE001 - recorded per image
                    self.embed_failures[c.index] = f"{type(e).__name__}: {e}"

    def select_anchors(self, num_samples: int | None = None) -> list[Candidate]:
        """Shuffle each type pool, then take types round-robin (balanced quotas) up to `num_samples`
        (None = every candidate). Order: round by round, types in sorted order."""
        shuffled = {}
        for t in sorted(self.pools.by_type):
            pool = list(self.pools.by_type[t])
            self.rng.shuffle(pool)
            shuffled[t] = pool
        total = sum(len(p) for p in shuffled.values())
        n = total if num_samples is None else min(num_samples, total)
        out: list[Candidate] = []
        r = 0
        while len(out) < n:
            for t in sorted(shuffled):
                if r < len(shuffled[t]) and len(out) < n:
                    out.append(shuffled[t][r])
            r += 1
        return out

    def sides(self, n: int) -> list[str]:
        """Exactly balanced left/right sides in a seeded order."""
        s = (["left", "right"] * ((n + 1) // 2))[:n]
        self.rng.shuffle(s)
        return s

    def _ok(self, c: Candidate, anchor: Candidate, exclude: set[str]) -> bool:
        return (c.entity_key != anchor.entity_key and c.entity_key not in exclude
                and (self.eligible is None or c.index in self.eligible))

    def intra(self, anchor: Candidate, exclude: set[str] = frozenset()) -> Choice:
        """A same-type distractor; `exclude` holds entity keys already used for this anchor."""
        pool = [c for c in self.pools.by_type.get(anchor.type, []) if self._ok(c, anchor, exclude)]
        if not pool:
            return Choice(None, "none", reason=f"no other {anchor.type} entity")
        forced = self.forced.get(anchor.entity_key)
        if forced:
            hits = [c for c in pool if c.entity_key == forced]
            if hits:
                return Choice(self.rng.choice(hits), "forced_entity_pair")
        a_vec = self.embeddings.get(anchor.index)
        if a_vec is not None:
            scored = [(float(a_vec @ self.embeddings[c.index]), c) for c in pool if c.index in self.embeddings]
            if scored:
                best = max(scored, key=lambda sc: (sc[0], -sc[1].index))
                return Choice(best[1], "same_type+image_similarity", similarity=round(best[0], 6))
        same_q = [c for c in pool if c.qkey == anchor.qkey]
        if same_q:
            return Choice(self.rng.choice(same_q), "same_type+same_question")
        return Choice(self.rng.choice(pool), "same_type")

    def inter(self, anchor: Candidate, exclude: set[str] = frozenset()) -> Choice:
        """A different-type distractor from the least-used type, preferring another family."""
        others = [t for t in sorted(self.pools.by_type) if t != anchor.type
                  and any(self._ok(c, anchor, exclude) for c in self.pools.by_type[t])]
        if not others:
            return Choice(None, "none", reason="no other type in the pool")
        cross = [t for t in others if self.family(t) != self.family(anchor.type)]
        types, basis = (cross, "different_entity_type+cross_family") if cross else \
            (others, "different_entity_type+same_family")
        least = min(self.inter_use[t] for t in types)
        tied = [t for t in types if self.inter_use[t] == least]
        t = self.rng.choice(tied)
        pool = [c for c in self.pools.by_type[t] if self._ok(c, anchor, exclude)]
        if not pool:
            return Choice(None, "none", reason=f"type {t} only holds the anchor's entity")
        self.inter_use[t] += 1
        return Choice(self.rng.choice(pool), basis)

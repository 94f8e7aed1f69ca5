"""Corpus-level selections of the funnel: perceptual-hash near-duplicates across posts, per-tag top-K
and category × intent balancing. Pure functions over plain values, so they are tested on their own.

**Near-duplicates at scale.** Comparing every pair of 64-bit hashes is O(n²): 43 s for 100k hashes
with NumPy on the project's box, hours for the 5M posts the paper started from. `near_pairs` uses
multi-index hashing instead: split each hash into 4 blocks of 16 bits; two hashes within `near` bits
agree to within `near // 4` bits on at least one block (pigeonhole), so only hashes whose block lies in
that small Hamming ball (137 keys for `near` = 10) are candidates, and every candidate is then checked
on all 64 bits. Buckets are dense 65,536-entry tables, so a probe is one NumPy gather for all hashes at
once. The result is exact: the same pairs as the brute force.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

_BLOCKS = 4
_BLOCK_BITS = 16


def popcount64(x: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 (NumPy 2's bitwise_count, or a byte table on NumPy 1)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(np.int64)
    table = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)
    return table[x.view(np.uint8).reshape(-1, 8)].sum(axis=1)


def _ball(radius: int, bits: int = _BLOCK_BITS) -> np.ndarray:
    """Every `bits`-bit mask with at most `radius` bits set."""
    masks = [0]
    for r in range(1, radius + 1):
        masks.extend(sum(1 << b for b in combo) for combo in itertools.combinations(range(bits), r))
    return np.array(masks, dtype=np.int64)


def near_pairs(hashes: Sequence[int] | np.ndarray, near: int) -> list[tuple[int, int, int]]:
    """Every pair (i, j, distance) with j < i and Hamming distance ≤ `near` between 64-bit hashes."""
    h = np.asarray([int(x) for x in hashes] if not isinstance(hashes, np.ndarray) else hashes, dtype=np.uint64)
    n = len(h)
    if n < 2:
        return []
    if not 0 <= near < 64:
        raise ValueError(f"near must be in 0..63, not {near}")
    masks = _ball(near // _BLOCKS)
    found_i: list[np.ndarray] = []
    found_j: list[np.ndarray] = []
    idx = np.arange(n, dtype=np.int64)
    for b in range(_BLOCKS):
        keys = ((h >> np.uint64(b * _BLOCK_BITS)) & np.uint64(0xFFFF)).astype(np.int64)
        order = np.argsort(keys, kind="stable")
        counts = np.bincount(keys, minlength=1 << _BLOCK_BITS)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        for m in masks:
            target = keys ^ m
            cnt = counts[target]
            hit = np.nonzero(cnt)[0]
            if not len(hit):
                continue
            c = cnt[hit]
            total = int(c.sum())
            first = np.repeat(starts[target[hit]], c)
            offset = np.arange(total) - np.repeat(np.cumsum(c) - c, c)
            i = np.repeat(idx[hit], c)
            j = order[first + offset]
            keep = j < i
            i, j = i[keep], j[keep]
            d = popcount64(h[i] ^ h[j])
            ok = d <= near
            found_i.append(i[ok])
            found_j.append(j[ok])
    if not found_i:
        return []
    i = np.concatenate(found_i)
    j = np.concatenate(found_j)
    if not len(i):
        return []
    code = np.unique(i * n + j)
    i, j = code // n, code % n
    d = popcount64(h[i] ^ h[j])
    return [(int(a), int(b), int(c)) for a, b, c in zip(i, j, d)]


def duplicate_owners(images: Sequence[tuple[str, int]], near: int) -> dict[str, tuple[str, int, int, int]]:
    """Greedy, first post wins: `images` are (post id, hash) in input order (a post's images together).
    Returns {dropped post: (the earlier kept post it repeats, distance, image index in the dropped post,
    image index in the kept post)}. Two images of one post never make it a duplicate of itself."""
    owners = [p for p, _ in images]
    position: dict[str, int] = {}
    for p in owners:
        position.setdefault(p, len(position))
    within: list[int] = []
    counter: dict[str, int] = defaultdict(int)
    for p in owners:
        within.append(counter[p])
        counter[p] += 1
    earlier: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for i, j, d in near_pairs([x for _, x in images], near):
        if owners[i] != owners[j] and position[owners[j]] < position[owners[i]]:
            earlier[owners[i]].append((j, d, i))
    dropped: dict[str, tuple[str, int, int, int]] = {}
    for post in position:
        for j, d, i in sorted(earlier.get(post, ()), key=lambda t: (t[1], t[0])):
            if owners[j] not in dropped:
                dropped[post] = (owners[j], d, within[i], within[j])
                break
    return dropped


def top_k_by_group(items: Iterable[tuple[str, Hashable, float]], k: int) -> dict[str, tuple[int, int]]:
    """(id, group, score) → {id: (rank in its group, group size)}; rank 1 is the best score, ties
    keep input order. Callers keep ranks ≤ k."""
    groups: dict[Hashable, list[tuple[int, str, float]]] = defaultdict(list)
    for pos, (rid, group, score) in enumerate(items):
        groups[group].append((pos, rid, score))
    out: dict[str, tuple[int, int]] = {}
    for members in groups.values():
        for rank, (_, rid, _) in enumerate(sorted(members, key=lambda t: (-t[2], t[0])), start=1):
            out[rid] = (rank, len(members))
    return out


def cell_quotas(sizes: Mapping[Any, int], target: int) -> dict[Any, int]:
    """Water-filling: give every cell the same quota, cells with fewer items keep them all and their
    unused share goes to the others, until `target` items are placed (or every item is). Quotas that
    cannot be equal differ by one, the larger ones going to the larger cells (then cell order)."""
    quotas = {c: 0 for c in sizes}
    left = min(target, sum(sizes.values()))
    open_cells = [c for c in sizes if sizes[c] > 0]
    while left > 0 and open_cells:
        share = left // len(open_cells)
        if share == 0:
            for c in sorted(open_cells, key=lambda c: -(sizes[c] - quotas[c]))[:left]:
                quotas[c] += 1
            break
        for c in open_cells:
            give = min(share, sizes[c] - quotas[c])
            quotas[c] += give
            left -= give
        open_cells = [c for c in open_cells if quotas[c] < sizes[c]]
    return quotas


def balance(items: Sequence[tuple[str, Hashable, float]], target: int) -> tuple[dict[str, int], dict[Any, int]]:
    """(id, cell, priority) → ({id: rank in cell} for the kept items, {cell: quota}). Within a cell the
    highest priority is kept first (ties: input order)."""
    sizes: dict[Hashable, int] = defaultdict(int)
    for _, cell, _ in items:
        sizes[cell] += 1
    quotas = cell_quotas(dict(sizes), target)
    ranks = top_k_by_group(items, 0)
    kept = {rid: ranks[rid][0] for rid, cell, _ in items if ranks[rid][0] <= quotas[cell]}
    return kept, quotas

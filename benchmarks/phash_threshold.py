"""The perceptual-hash threshold at which de-duplication may skip the model probe (seed 001 C.2).

The reference builder's dedup stage lets the DCT hash decide a pair of candidate images only when it
is certain they are the same picture; every other pair goes to the model's "same picture?" probe.
This script measures where "certain" ends, on the photographs that ship inside PyPI packages
(scikit-image's `data`, scikit-learn's `load_sample_images()`, matplotlib's `grace_hopper.jpg`):
each photograph is transformed by resizes, JPEG re-encodes, crops (all sides and one corner) and
combinations of them; for every threshold t it counts

- same-photo pairs (original vs transform) the hash merges at distance <= t, per transform family;
- different-photo pairs (every variant of one photograph against every variant of another) it
  merges — a false merge would silently drop a distinct image, so the threshold kbvqa ships is the
  largest t at which this is 0, with a margin (`kbvqa.data.phash.CERTAIN_BITS`).

    .venv/bin/python benchmarks/phash_threshold.py [--max-bits 24] [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from kbvqa.data.phash import CERTAIN_BITS, distance, phash  # noqa: E402


def shipped_photographs() -> dict[str, Image.Image]:
    """The photographs the three packages ship, named by package (scikit-image's `cat` is `chelsea`
    again and is left out, as are its drawings and scans: `horse`, `page`, `text`)."""
    import matplotlib.cbook as cbook
    import numpy as np
    from skimage import data
    from sklearn.datasets import load_sample_images

    out: dict[str, Image.Image] = {}
    for n in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
              "coins", "camera", "moon", "clock", "grass", "gravel", "brick"):
        try:
            a = getattr(data, n)()
        except Exception:  # noqa: BLE001 - a photograph missing from this scikit-image version
            continue
        a = np.asarray(a)
        if a.dtype == bool:
            a = a.astype(np.uint8) * 255
        out[f"skimage.{n}"] = Image.fromarray(a).convert("RGB")
    imgs = load_sample_images()
    for name, a in zip(imgs.filenames, imgs.images):
        out[f"sklearn.{Path(name).stem}"] = Image.fromarray(a).convert("RGB")
    with cbook.get_sample_data("grace_hopper.jpg") as fh:
        out["matplotlib.grace_hopper"] = Image.open(fh).convert("RGB")
    return out


def _jpeg(im: Image.Image, q: int) -> Image.Image:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=q)
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def _crop(im: Image.Image, f: float, corner: bool = False) -> Image.Image:
    w, h = im.size
    return im.crop((int(w * f), int(h * f), w, h) if corner else (int(w * f), int(h * f), int(w * (1 - f)),
                                                                   int(h * (1 - f))))


def _scale(im: Image.Image, s: float) -> Image.Image:
    return im.resize((max(16, int(im.width * s)), max(16, int(im.height * s))), Image.Resampling.BILINEAR)


#: family -> [(name, transform)]
TRANSFORMS = {
    "resize": [("50%", lambda im: _scale(im, .5)), ("25%", lambda im: _scale(im, .25)),
               ("150%", lambda im: _scale(im, 1.5))],
    "re-encode": [(f"JPEG q{q}", lambda im, q=q: _jpeg(im, q)) for q in (90, 50, 30, 10)],
    "crop, all sides": [(f"{int(f * 100)}%", lambda im, f=f: _crop(im, f)) for f in (.01, .02, .05, .10)],
    "crop, one corner": [(f"{int(f * 100)}%", lambda im, f=f: _crop(im, f, True)) for f in (.02, .05, .10, .20)],
    "combined": [("crop 2% + 50% + q50", lambda im: _jpeg(_scale(_crop(im, .02), .5), 50)),
                 ("crop 5% + 25% + q30", lambda im: _jpeg(_scale(_crop(im, .05), .25), 30))],
}


def measure(max_bits: int) -> dict:
    photos = shipped_photographs()
    hashes: dict[str, list[tuple[str, str, int]]] = {}  # photo -> [(family, name, hash)], the original first
    same: dict[str, list[int]] = {fam: [] for fam in TRANSFORMS}
    for pname, im in photos.items():
        h0 = phash(im)
        rows = [("original", "", h0)]
        for fam, ts in TRANSFORMS.items():
            for tname, fn in ts:
                h = phash(fn(im))
                rows.append((fam, tname, h))
                same[fam].append(distance(h0, h))
        hashes[pname] = rows
    cross: list[int] = []
    closest = (65, "", "")
    for (pa, ra), (pb, rb) in itertools.combinations(hashes.items(), 2):
        for (fa, ta, ha), (fb, tb, hb) in itertools.product(ra, rb):
            d = distance(ha, hb)
            cross.append(d)
            if d < closest[0]:
                closest = (d, f"{pa} {fa} {ta}".strip(), f"{pb} {fb} {tb}".strip())
    table = []
    for t in range(max_bits + 1):
        row = {"bits": t, "different_photo_merges": sum(d <= t for d in cross)}
        for fam, ds in same.items():
            row[fam] = sum(d <= t for d in ds) / len(ds)
        table.append(row)
    safe = max((r["bits"] for r in table if r["different_photo_merges"] == 0), default=-1)
    return {"photographs": list(photos), "variants_per_photo": sum(len(t) for t in TRANSFORMS.values()),
            "same_photo_pairs": {f: len(d) for f, d in same.items()}, "different_photo_pairs": len(cross),
            "closest_different": {"bits": closest[0], "a": closest[1], "b": closest[2]},
            "largest_threshold_without_false_merge": safe, "shipped_threshold": CERTAIN_BITS,
            "same_photo_max_bits": {f: max(d) for f, d in same.items()}, "table": table}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-bits", type=int, default=24)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res = measure(args.max_bits)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1), encoding="utf-8")
    fams = list(TRANSFORMS)
    print(f"{len(res['photographs'])} shipped photographs x {res['variants_per_photo']} variants; "
          f"{res['different_photo_pairs']:,} different-photo pairs; closest different pair: "
          f"{res['closest_different']['bits']} bits ({res['closest_different']['a']} vs {res['closest_different']['b']})")
    print()
    print("| bits <= t | different photos merged | " + " | ".join(f"same photo merged: {f}" for f in fams) + " |")
    print("|---:|---:|" + "---:|" * len(fams))
    for r in res["table"]:
        mark = " (kbvqa)" if r["bits"] == res["shipped_threshold"] else ""
        print(f"| {r['bits']}{mark} | {r['different_photo_merges']} | "
              + " | ".join(f"{r[f]:.0%}" for f in fams) + " |")
    print()
    print(f"largest threshold with no false merge: {res['largest_threshold_without_false_merge']} bits; "
          f"kbvqa ships CERTAIN_BITS = {res['shipped_threshold']}")


if __name__ == "__main__":
    main()

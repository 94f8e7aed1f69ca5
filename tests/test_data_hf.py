"""Hugging Face `datasets` exports read without `datasets` (format `hf`): save_to_disk folders (Dataset and
DatasetDict), Hub shard folders, .arrow / .feather / .parquet files; Image cells become files.

The fixtures are written with pyarrow exactly as `datasets` writes them: Arrow IPC *stream* shards named
data-0000k-of-0000N.arrow, state.json with `_data_files` and `_split`, dataset_info.json with `features`,
the same features in the schema's `huggingface` metadata, dataset_dict.json with `splits`."""

import hashlib
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from pyarrow import feather

from kbvqa.data.errors import DataError, SkipReport
from kbvqa.data.formats import FORMATS, detect_format, read_samples, write_samples
from kbvqa.data.hf import read_hf, resolve_source
from kbvqa.data.images import open_image, resolve_image

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
FEATURES = {
    "qid": {"dtype": "string", "_type": "Value"},
    "q": {"dtype": "string", "_type": "Value"},
    "gold": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
    "image": {"_type": "Image"},
    "qtype": {"names": ["String", "Numerical", "Time"], "_type": "ClassLabel"},
    "wiki": {"dtype": "string", "_type": "Value"},
}
SCHEMA = pa.schema([("qid", pa.string()), ("q", pa.string()), ("gold", pa.list_(pa.string())), ("image", IMAGE),
                    ("qtype", pa.int64()), ("wiki", pa.string())])
MAPPING = {"id": "qid", "question": "q", "answers": "gold", "question_type": "qtype", "entity_url": "wiki"}


def _jpeg(size=(24, 16)) -> bytes:
    from skimage import data as skdata

    img = Image.fromarray(skdata.astronaut()).resize(size)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)
    return buf.getvalue()


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (9, 7), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


JPEG, PNG = _jpeg(), _png()


def _rows(n=5):
    imgs = [{"bytes": JPEG, "path": "astronaut.jpg"}, {"bytes": PNG, "path": "red.png"}]
    return [{"qid": f"q{i}", "q": f"Question {i}?", "gold": [f"a{i}", f"b{i}"], "image": imgs[i % 2],
             "qtype": i % 3, "wiki": f"https://en.wikipedia.org/wiki/E{i}"} for i in range(n)]


def _with_hf_metadata(schema, features):
    return schema.with_metadata({"huggingface": json.dumps({"info": {"features": features}})})


def save_to_disk(folder, rows, *, split="validation", features=FEATURES, schema=SCHEMA, shards=2):
    """What `Dataset.save_to_disk(folder, num_shards=shards)` writes."""
    folder.mkdir(parents=True)
    schema = _with_hf_metadata(schema, features)
    table = pa.Table.from_pylist(rows, schema=schema)
    per = -(-len(rows) // shards) if rows else 0
    files = []
    for k in range(shards):
        name = f"data-{k:05d}-of-{shards:05d}.arrow"
        part = table.slice(k * per, per)
        with pa.ipc.new_stream(str(folder / name), schema) as w:
            for batch in part.to_batches(max_chunksize=2):
                w.write_batch(batch)
        files.append({"filename": name})
    (folder / "dataset_info.json").write_text(json.dumps(
        {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}, indent=2))
    (folder / "state.json").write_text(json.dumps(
        {"_data_files": files, "_fingerprint": "0123456789abcdef", "_format_columns": None, "_format_kwargs": {},
         "_format_type": None, "_output_all_columns": False, "_split": split}, indent=2))
    return folder


def save_dict_to_disk(folder, splits):
    """What `DatasetDict.save_to_disk(folder)` writes."""
    folder.mkdir(parents=True)
    for name, rows in splits.items():
        save_to_disk(folder / name, rows, split=name, shards=1)
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": list(splits)}))
    return folder


def sha_name(data, ext):
    return hashlib.sha256(data).hexdigest() + ext


# -- save_to_disk folders ------------------------------------------------------------------------

def test_a_saved_dataset_is_detected_mapped_and_its_images_written(tmp_path):
    ds = save_to_disk(tmp_path / "ds", _rows(5))
    assert detect_format(ds) == "hf" and "hf" in FORMATS
    out = tmp_path / "out"
    report = SkipReport()
    samples = list(read_samples(ds, mapping=MAPPING, image_dir=out / "bench.images", image_root=out, report=report))
    assert [s.id for s in samples] == ["q0", "q1", "q2", "q3", "q4"]  # both shards, in order
    s0, s1 = samples[0], samples[1]
    assert s0.question == "Question 0?" and s0.answer_texts == ["a0", "b0"]
    assert s0.question_type == "String" and samples[1].question_type == "Numerical"  # ClassLabel names
    assert s0.entity.url == "https://en.wikipedia.org/wiki/E0"
    assert s0.split == "validation"  # state.json's _split
    # the one Image column is `images`, written once per content, referenced relative to the image root
    assert s0.images == [f"bench.images/{sha_name(JPEG, '.jpg')}"]
    assert s1.images == [f"bench.images/{sha_name(PNG, '.png')}"]
    assert sorted(p.name for p in (out / "bench.images").iterdir()) == sorted([sha_name(JPEG, ".jpg"),
                                                                               sha_name(PNG, ".png")])
    assert (out / s0.images[0]).read_bytes() == JPEG
    assert open_image(resolve_image(s0.images[0], out)).size == (24, 16)
    assert s0.meta["_source"]["format"] == "hf" and report.count == 0 and not report.warnings


def test_written_samples_carry_references_that_resolve_from_their_folder(tmp_path):
    ds = save_to_disk(tmp_path / "ds", _rows(3))
    out = tmp_path / "out"
    out.mkdir()
    dst = out / "bench.jsonl"
    n = write_samples(read_samples(ds, "hf", mapping=MAPPING, image_dir=out / "bench.images", image_root=out),
                      dst, "kbvqa")
    assert n == 3
    back = list(read_samples(dst))
    for s in back:
        assert open_image(resolve_image(s.images[0], dst.parent)).mode == "RGB"
    # a rerun finds the same files (content-hashed): nothing new is written
    again = read_hf(ds, mapping=MAPPING, image_dir=out / "bench.images", image_root=out)
    assert [s.images for s in again] == [s.images for s in back]


def test_hf_to_parquet_keeps_the_source_columns_with_image_references(tmp_path):
    ds = save_to_disk(tmp_path / "ds", _rows(4))
    dst = tmp_path / "o.parquet"
    write_samples(read_samples(ds, "hf", mapping=MAPPING, image_dir=tmp_path / "imgs", image_root=tmp_path), dst,
                  "parquet")
    rows = pq.read_table(dst).to_pylist()
    assert list(rows[0]) == ["qid", "q", "gold", "image", "qtype", "wiki"]
    assert rows[0]["image"] == f"imgs/{sha_name(JPEG, '.jpg')}" and rows[2]["qtype"] == "Time"
    assert rows[3]["gold"] == ["a3", "b3"]
    # and that parquet reads back as the generic format with the same mapping
    (s,) = [x for x in read_samples(dst, mapping={**MAPPING, "images": "image"}) if x.id == "q0"]
    assert s.images == [f"imgs/{sha_name(JPEG, '.jpg')}"] and s.question_type == "String"


def test_a_dataset_dict_needs_a_split_when_it_has_several(tmp_path):
    dd = save_dict_to_disk(tmp_path / "dd", {"train": _rows(3), "test": _rows(2)})
    assert detect_format(dd) == "hf"
    with pytest.raises(DataError) as e:
        list(read_samples(dd, mapping=MAPPING, embedded_images="skip"))
    assert "2 splits (train, test)" in str(e.value) and "dataset_dict.json" in str(e.value)
    with pytest.raises(DataError, match="no split 'dev'; this dataset has: train, test"):
        list(read_samples(dd, mapping=MAPPING, split="dev", embedded_images="skip"))
    test = list(read_samples(dd, mapping=MAPPING, split="test", embedded_images="skip"))
    assert [s.id for s in test] == ["q0", "q1"] and {s.split for s in test} == {"test"}
    # the split's own folder is a Dataset folder; its state.json names the split
    assert len(list(read_samples(dd / "train", mapping=MAPPING, embedded_images="skip"))) == 3
    with pytest.raises(DataError, match="holds split 'train', not 'test'"):
        list(read_samples(dd / "train", mapping=MAPPING, split="test", embedded_images="skip"))
    # one split needs no choice
    one = save_dict_to_disk(tmp_path / "one", {"validation": _rows(2)})
    assert {s.split for s in read_samples(one, mapping=MAPPING, embedded_images="skip")} == {"validation"}


# -- images: bytes, paths, and never a silent drop -----------------------------------------------

def test_embedded_bytes_without_an_image_folder_are_an_error_or_counted(tmp_path):
    ds = save_to_disk(tmp_path / "ds", _rows(3))
    with pytest.raises(DataError) as e:
        list(read_samples(ds, mapping=MAPPING))
    err = e.value
    assert err.file.endswith("data-00000-of-00002.arrow") and err.row == 1 and err.field == "image"
    assert "image_dir" in str(err)
    report = SkipReport()
    samples = list(read_samples(ds, mapping=MAPPING, embedded_images="skip", report=report))
    assert len(samples) == 3 and all(s.images == [] for s in samples)
    assert report.warnings["embedded_image_not_written"] == 3  # counted, one per image
    report = SkipReport()
    assert list(read_samples(ds, mapping=MAPPING, skip_invalid=True, report=report)) == []
    assert report.count == 3 and "field 'image'" in report.skipped[0][1]


def test_cells_without_bytes_are_referenced_by_path(tmp_path):
    root = tmp_path / "root"
    (root / "pics").mkdir(parents=True)
    (root / "pics" / "a.jpg").write_bytes(JPEG)
    outside = tmp_path / "elsewhere.jpg"
    outside.write_bytes(JPEG)
    rows = _rows(3)
    rows[0]["image"] = {"bytes": None, "path": "pics/a.jpg"}  # relative, under the root
    rows[1]["image"] = {"bytes": None, "path": str(root / "pics" / "a.jpg")}  # absolute, under the root
    rows[2]["image"] = {"bytes": None, "path": str(outside)}  # absolute, outside: kept as written, counted
    ds = save_to_disk(tmp_path / "ds", rows, shards=1)
    report = SkipReport()
    s0, s1, s2 = read_samples(ds, mapping=MAPPING, image_root=root, report=report)
    assert s0.images == ["pics/a.jpg"] and s1.images == ["pics/a.jpg"] and s2.images == [str(outside)]
    assert report.warnings == {"image_path_not_under_root": 1}
    assert not list(root.glob("*.jpg")) and sorted(p.name for p in root.iterdir()) == ["pics"]  # nothing copied
    with pytest.raises(Exception, match="outside the image root"):
        resolve_image(s2.images[0], root, allow_outside_root=False)


def test_bytes_that_are_not_an_image_name_the_row(tmp_path):
    rows = _rows(3)
    rows[1]["image"] = {"bytes": b"\x00\x01 not an image", "path": "x.jpg"}
    rows[2]["image"] = None  # no image at all: simply none
    ds = save_to_disk(tmp_path / "ds", rows, shards=1)
    with pytest.raises(DataError) as e:
        list(read_samples(ds, mapping=MAPPING, image_dir=tmp_path / "imgs"))
    assert e.value.row == 2 and e.value.field == "image" and "not a readable image" in str(e.value)
    report = SkipReport()
    samples = list(read_samples(ds, mapping=MAPPING, image_dir=tmp_path / "imgs", skip_invalid=True, report=report))
    assert [s.id for s in samples] == ["q0", "q2"] and samples[1].images == []
    assert report.count == 1 and report.skipped[0][0] == 2


def test_a_decompression_bomb_is_refused_from_its_header(tmp_path):
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    bomb = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
            + chunk(b"IEND", b""))
    rows = _rows(1)
    rows[0]["image"] = {"bytes": bomb, "path": "bomb.png"}
    ds = save_to_disk(tmp_path / "ds", rows, shards=1)
    with pytest.raises(DataError, match="pixel cap"):
        list(read_samples(ds, mapping=MAPPING, image_dir=tmp_path / "imgs"))
    assert not (tmp_path / "imgs").exists()


def test_lists_of_images_several_image_columns_and_binary_columns(tmp_path):
    feats = {"id": {"dtype": "string", "_type": "Value"}, "question": {"dtype": "string", "_type": "Value"},
             "pictures": {"feature": {"_type": "Image"}, "_type": "Sequence"},
             "thumb": {"_type": "Image"}, "blob": {"dtype": "binary", "_type": "Value"},
             "answers": {"feature": {"text": {"dtype": "string", "_type": "Value"},
                                     "answer_start": {"dtype": "int32", "_type": "Value"}}, "_type": "Sequence"}}
    schema = pa.schema([("id", pa.string()), ("question", pa.string()), ("pictures", pa.list_(IMAGE)),
                        ("thumb", IMAGE), ("blob", pa.binary()),
                        ("answers", pa.struct([("text", pa.list_(pa.string())),
                                               ("answer_start", pa.list_(pa.int32()))]))])
    rows = [{"id": "x", "question": "Which?", "pictures": [{"bytes": JPEG, "path": None}, {"bytes": PNG, "path": None}],
             "thumb": {"bytes": PNG, "path": None}, "blob": b"\xff\xfe", "answers": {"text": ["t"], "answer_start": [3]}}]
    ds = save_to_disk(tmp_path / "ds", rows, features=feats, schema=schema, shards=1)
    report = SkipReport()
    (s,) = read_samples(ds, image_dir=tmp_path / "imgs", report=report,
                        mapping={"images": "pictures", "answers": "none_such"})
    assert s.images == [sha_name(JPEG, ".jpg"), sha_name(PNG, ".png")]  # relative to image_dir by default
    assert s.meta["thumb"] == sha_name(PNG, ".png")  # the other image column: a reference, not bytes
    assert s.meta["blob"] is None and report.warnings["binary_value_omitted"] == 1
    assert s.meta["answers"] == {"text": ["t"], "answer_start": [3]}
    json.dumps(s.dump())  # every value is JSON
    # with two image columns and no `images` mapping nothing is guessed: both stay in meta, and that is said
    report = SkipReport()
    (s,) = read_samples(ds, image_dir=tmp_path / "imgs", report=report, mapping={"answers": "none_such"})
    assert s.images == [] and len(s.meta["pictures"]) == 2 and report.warnings["several_image_columns"] == 1


# -- single files and shard folders --------------------------------------------------------------

def _table(rows=None):
    return pa.Table.from_pylist(rows or _rows(3), schema=_with_hf_metadata(SCHEMA, FEATURES))


@pytest.mark.filterwarnings("ignore:Feather V1:DeprecationWarning")
@pytest.mark.parametrize("kind", ["stream", "file", "feather2", "feather1", "parquet"])
def test_single_files(tmp_path, kind):
    table = _table()
    suffix = {"stream": ".arrow", "file": ".arrow", "feather2": ".feather", "feather1": ".feather",
              "parquet": ".parquet"}[kind]
    p = tmp_path / f"bench{suffix}"
    if kind == "stream":
        with pa.ipc.new_stream(str(p), table.schema) as w:
            w.write_table(table)
    elif kind == "file":
        with pa.ipc.new_file(str(p), table.schema) as w:
            w.write_table(table)
    elif kind == "feather2":
        feather.write_feather(table, str(p))
    elif kind == "feather1":
        flat = table.drop_columns(["image", "gold"])  # v1 holds flat columns only
        feather.write_feather(flat, str(p), version=1)
    else:
        pq.write_table(table, p)
    assert detect_format(p) == ("parquet" if kind == "parquet" else "hf")
    samples = list(read_samples(p, "hf", mapping=MAPPING, image_dir=tmp_path / "imgs"))
    assert [s.id for s in samples] == ["q0", "q1", "q2"]
    if kind != "feather1":  # v1 keeps no schema metadata: the integer stays an integer
        assert samples[1].question_type == "Numerical" and samples[0].answer_texts == ["a0", "b0"]
        assert samples[0].images == [sha_name(JPEG, ".jpg")]


def test_features_come_from_the_arrow_type_when_no_metadata_says(tmp_path):
    p = tmp_path / "plain.arrow"
    table = pa.Table.from_pylist(_rows(2), schema=SCHEMA)  # no huggingface metadata, no dataset_info.json
    with pa.ipc.new_stream(str(p), table.schema) as w:
        w.write_table(table)
    s0, s1 = read_samples(p, mapping=MAPPING, image_dir=tmp_path / "imgs")
    assert s0.images == [sha_name(JPEG, ".jpg")] and s1.images == [sha_name(PNG, ".png")]
    assert s1.question_type == "1"  # no ClassLabel known: the value as it is


def test_a_generic_parquet_read_of_image_structs_points_to_hf(tmp_path):
    p = tmp_path / "bench.parquet"
    pq.write_table(_table(), p)
    with pytest.raises(DataError) as e:
        list(read_samples(p, mapping={**MAPPING, "images": "image"}))
    assert e.value.row == 1 and e.value.field == "image" and "hf format" in str(e.value)


def test_a_hub_shard_folder_is_split_by_file_name(tmp_path):
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    (hub / ".cache").mkdir()
    pq.write_table(_table(_rows(3)), hub / "data" / "train-00000-of-00002.parquet")
    pq.write_table(_table(_rows(5)[3:]), hub / "data" / "train-00001-of-00002.parquet")
    pq.write_table(_table(_rows(2)), hub / "data" / "test-00000-of-00001.parquet")
    pq.write_table(_table(_rows(1)), hub / ".cache" / "stale-00000-of-00001.parquet")  # hidden: ignored
    (hub / "README.md").write_text("---\nconfigs: ...\n---\n")
    assert detect_format(hub) == "hf"
    assert resolve_source(hub, "train").files == [hub / "data" / "train-00000-of-00002.parquet",
                                                  hub / "data" / "train-00001-of-00002.parquet"]
    with pytest.raises(DataError, match=r"2 splits \(test, train\)"):
        list(read_samples(hub, mapping=MAPPING, embedded_images="skip"))
    train = list(read_samples(hub, mapping=MAPPING, split="train", embedded_images="skip"))
    assert [s.id for s in train] == ["q0", "q1", "q2", "q3", "q4"] and {s.split for s in train} == {"train"}
    # the converted layout: one folder per split
    conv = tmp_path / "conv"
    for split, n in (("train", 2), ("validation", 1)):
        (conv / "default" / split).mkdir(parents=True)
        pq.write_table(_table(_rows(n)), conv / "default" / split / "0000.parquet")
    assert len(list(read_samples(conv, mapping=MAPPING, split="validation", embedded_images="skip"))) == 1


def test_the_datasets_cache_folder_splits_by_dataset_info(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    for split, n in (("train", 2), ("validation", 3)):
        with pa.ipc.new_stream(str(cache / f"my_bench-{split}.arrow"), _table().schema) as w:
            w.write_table(_table(_rows(n)))
    with pa.ipc.new_stream(str(cache / "cache-0a1b2c.arrow"), _table().schema) as w:  # a map() cache: ignored
        w.write_table(_table(_rows(1)))
    (cache / "dataset_info.json").write_text(json.dumps({"features": FEATURES, "splits": {
        "train": {"name": "train", "num_examples": 2}, "validation": {"name": "validation", "num_examples": 3}}}))
    assert detect_format(cache) == "hf"
    val = list(read_samples(cache, mapping=MAPPING, split="validation", embedded_images="skip"))
    assert len(val) == 3 and val[0].split == "validation"


# -- errors name the file, the row and the field --------------------------------------------------

def test_missing_columns_and_bad_labels_name_file_row_and_field(tmp_path):
    ds = save_to_disk(tmp_path / "ds", _rows(2), shards=1)
    with pytest.raises(DataError) as e:
        list(read_samples(ds, mapping={**MAPPING, "id": "qid_typo"}, embedded_images="skip"))
    assert e.value.row == 1 and e.value.field == "qid_typo" and "data-00000-of-00001.arrow" in e.value.file
    rows = _rows(2)
    rows[1]["qtype"] = 7
    bad = save_to_disk(tmp_path / "bad", rows, shards=1)
    with pytest.raises(DataError) as e:
        list(read_samples(bad, mapping=MAPPING, embedded_images="skip"))
    assert e.value.row == 2 and e.value.field == "qtype" and "not among" in str(e.value)


def test_broken_folders_and_files_are_named(tmp_path):
    ds = save_to_disk(tmp_path / "ds", _rows(4))
    (ds / "data-00001-of-00002.arrow").unlink()
    with pytest.raises(DataError, match="data-00001-of-00002.arrow.*missing"):
        list(read_samples(ds, mapping=MAPPING, embedded_images="skip"))
    (ds / "state.json").write_text("{not json")
    with pytest.raises(DataError, match=r"state.json: not valid JSON"):
        list(read_samples(ds, "hf"))
    # a truncated shard: the rows before the cut come out, then an error names the file and the row
    ds2 = save_to_disk(tmp_path / "ds2", _rows(6), shards=1)
    shard = ds2 / "data-00000-of-00001.arrow"
    shard.write_bytes(shard.read_bytes()[: len(shard.read_bytes()) * 2 // 3])
    got = []
    with pytest.raises(DataError) as e:
        for s in read_samples(ds2, mapping=MAPPING, embedded_images="skip"):
            got.append(s.id)
    assert e.value.file == str(shard) and e.value.row == len(got) + 1 and got
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"this is not arrow at all")
    with pytest.raises(DataError, match="not a readable Arrow"):
        list(read_samples(junk))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("x")
    with pytest.raises(DataError, match="not a Hugging Face datasets export"):
        detect_format(plain)


def test_hf_takes_the_generic_mapping(tmp_path):
    with pytest.raises(ValueError, match="unknown mapping field"):
        list(read_samples(save_to_disk(tmp_path / "ds", _rows(1)), mapping={"qeustion": "q"}))
    with pytest.raises(ValueError, match="not inside image_root"):
        list(read_hf(tmp_path / "ds", mapping=MAPPING, image_dir=tmp_path / "a", image_root=tmp_path / "b"))


def test_the_cli_reads_a_saved_dataset(tmp_path):
    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(JPEG)
    feats = {"id": {"dtype": "string", "_type": "Value"}, "question": {"dtype": "string", "_type": "Value"},
             "answers": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
             "image": {"_type": "Image"}}
    schema = pa.schema([("id", pa.string()), ("question", pa.string()), ("answers", pa.list_(pa.string())),
                        ("image", IMAGE)])
    rows = [{"id": f"r{i}", "question": "What?", "answers": ["x"], "image": {"bytes": None, "path": "imgs/a.jpg"}}
            for i in range(3)]
    ds = save_to_disk(tmp_path / "ds", rows, features=feats, schema=schema, shards=1)
    runner = CliRunner()
    res = runner.invoke(app, ["data", "convert", str(ds), str(tmp_path / "o.jsonl")])
    assert res.exit_code == 0, res.output
    assert "hf -> kbvqa" in res.output
    lines = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["r0", "r1", "r2"] and lines[0]["images"] == ["imgs/a.jpg"]
    assert lines[0]["split"] == "validation"
    res = runner.invoke(app, ["data", "convert", "--help"])
    assert "hf" in res.output


def test_a_split_name_never_leaves_the_dataset_folder(tmp_path):
    dd = save_dict_to_disk(tmp_path / "dd", {"train": _rows(1)})
    save_to_disk(tmp_path / "outside", _rows(1))
    (dd / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "../outside"]}))
    with pytest.raises(DataError, match="is not a folder name"):
        list(read_samples(dd, split="../outside", embedded_images="skip"))


def test_the_cli_writes_embedded_images_next_to_the_output_and_counts_them_in_stats(tmp_path):
    from typer.testing import CliRunner

    from kbvqa.cli.app import app
    from kbvqa.data.images import resolve_image

    feats = {"id": {"dtype": "string", "_type": "Value"}, "question": {"dtype": "string", "_type": "Value"},
             "answers": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
             "image": {"_type": "Image"}}
    schema = pa.schema([("id", pa.string()), ("question", pa.string()), ("answers", pa.list_(pa.string())),
                        ("image", IMAGE)])
    rows = [{"id": f"r{i}", "question": "What?", "answers": ["x"], "image": {"bytes": JPEG, "path": None}}
            for i in range(2)]
    dd = tmp_path / "dd"
    for split in ("train", "validation"):
        save_to_disk(dd / split, rows, split=split, features=feats, schema=schema, shards=1)
    (dd / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation"]}))
    runner = CliRunner()
    out = tmp_path / "run" / "bench.jsonl"
    out.parent.mkdir()
    res = runner.invoke(app, ["data", "convert", str(dd), str(out)])
    assert res.exit_code == 1 and "train" in res.output and "validation" in res.output  # several splits: say which
    res = runner.invoke(app, ["data", "convert", str(dd), str(out), "--split", "validation"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["images"] == [f"bench.jsonl.images/{sha_name(JPEG, '.jpg')}"] == lines[1]["images"]
    assert resolve_image(lines[0]["images"][0], out.parent).read_bytes() == JPEG  # moves with the output
    res = runner.invoke(app, ["data", "stats", str(dd), "--split", "train", "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.output)
    assert stats["warnings"]["embedded_image_not_written"] == 2  # stats never writes pixels: counted
    res = runner.invoke(app, ["data", "stats", str(out), "--split", "train"])
    assert res.exit_code == 1 and "--split only applies" in res.output


# ------------------------------------------------------------------------------------ writing a dataset folder

def _card(folder):
    import yaml

    text = (folder / "README.md").read_text(encoding="utf-8")
    head, body = text.split("---\n")[1], text.split("---\n", 2)[2]
    return yaml.safe_load(head), body


def _load_back(folder, samples, image_root):
    """datasets.load_dataset(folder) gives every sample back, row for row and image for image."""
    datasets = pytest.importorskip("datasets")
    from kbvqa.data.schema import Sample

    dd = datasets.load_dataset(str(folder), cache_dir=str(folder.parent / "hf-cache"))  # never a stale cache
    by_split: dict = {}
    for s in samples:
        by_split.setdefault(s.split or "test", []).append(s)
    assert sorted(dd) == sorted(by_split)
    for split, rows in by_split.items():
        got = dd[split]
        assert got.num_rows == len(rows)
        assert got.features["images"].feature.__class__.__name__ == "Image"
        for s, r in zip(rows, got):
            assert r["id"] == s.id and r["question"] == s.question and r["answers"] == s.answer_texts
            assert r["question_type"] == s.question_type and r["dataset"] == s.dataset
            back = Sample.model_validate(json.loads(r["kbvqa_sample"]))
            assert back.dump() == s.dump()  # nothing lost
            assert len(r["images"]) == len(s.images)
            for ref, im in zip(s.images, r["images"]):
                want = open_image(resolve_image(ref, image_root))
                assert im.size == want.size and im.convert("RGB").tobytes() == want.tobytes()  # same pixels
    return dd


@pytest.fixture
def offline_hub(monkeypatch):
    """`datasets` and the Hub client told to stay offline (no request leaves the machine)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def test_the_audited_demo_split_as_a_dataset_folder_loads_back(demo_copy, tmp_path, offline_hub):
    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    out, _ = demo_copy(tmp_path / "demo")
    fixed = out / "audit" / "fixed.jsonl"
    runner = CliRunner()
    dst = tmp_path / "hf_fixed"
    r = runner.invoke(app, ["data", "convert", str(fixed), str(dst), "--to", "hf", "--license", "cc-by-4.0"])
    assert r.exit_code == 1 and "sample 'demo_000'" in r.output and "--image-root" in r.output  # images not found
    assert not dst.exists()  # nothing half-written
    r = runner.invoke(app, ["data", "convert", str(fixed), str(dst), "--to", "hf", "--license", "cc-by-4.0",
                            "--image-root", str(out / "bench")])
    assert r.exit_code == 0, r.output
    samples = list(read_samples(fixed))
    _load_back(dst, samples, out / "bench")
    meta, body = _card(dst)
    assert meta["license"] == "cc-by-4.0"
    assert {c["split"] for c in meta["configs"][0]["data_files"]} == {s.split for s in samples}
    assert sum(x["num_examples"] for x in meta["dataset_info"]["splits"]) == len(samples) == 32
    prov = json.loads((dst / "kbvqa_provenance.json").read_text())
    split = json.loads((out / "audit" / "fixed.split.json").read_text())
    assert prov["audit"]["dropped"] == split["dropped"] == 6 and prov["audit"]["repaired"] == split["repaired"] == 2
    assert prov["audit"]["manifest"]["path"].endswith("audited.manifest.json") and prov["datasets"] == {"kbvqa-demo": 32}
    assert "dropped 6" in body and "huggingface-cli upload" in body and prov["kbvqa_version"] in body
    r = runner.invoke(app, ["data", "convert", str(fixed), str(dst), "--to", "hf", "--image-root", str(out / "bench")])
    assert r.exit_code == 1 and "not empty" in r.output  # never mixed with an earlier export
    # kbvqa's own hf reader reads the folder back too
    again = list(read_samples(dst, split="demo_unseen_entity", mapping={"images": "images"}, image_dir=tmp_path / "i",
                              image_root=tmp_path))
    assert [s.id for s in again] == [s.id for s in samples if s.split == "demo_unseen_entity"]


def test_a_notevqa_set_as_a_dataset_folder_loads_back(demo_copy, tmp_path, offline_hub):
    from kbvqa.data.hf_export import write_hf_folder

    out, _ = demo_copy(tmp_path / "demo")
    community = out / "bench" / "community.jsonl"
    samples = list(read_samples(community))
    assert samples and all(s.images for s in samples)
    n = write_hf_folder(iter(samples), tmp_path / "hf", source=community, max_shard_bytes=200_000)
    assert n == len(samples)
    shards = sorted((tmp_path / "hf" / "data").glob("*.parquet"))
    assert len(shards) > 1 and shards[-1].name.endswith(f"-of-{len(shards):05d}.parquet")  # cut by size, named
    _load_back(tmp_path / "hf", samples, out / "bench")
    meta, body = _card(tmp_path / "hf")
    assert meta["license"] == "other" and "not an audited split" in body

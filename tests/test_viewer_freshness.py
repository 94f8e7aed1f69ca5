"""The viewer never shows another record than the one a page names, when the file changes under its
index (a run's end-of-run compaction rewrites the journal, possibly to the same size within the same
second), and its front page counts what each file holds, not what the last invocation did."""

from __future__ import annotations

import json
import os
from pathlib import Path

from starlette.testclient import TestClient

from kbvqa.cli.view import build_site
from kbvqa.report.viewer.app import create_app
from kbvqa.report.viewer.index import RecordIndex, StaleRecord


def _line(i: int, tag: str) -> str:
    # every line the same length, so a reordering keeps the file's size and every offset
    return json.dumps({"id": f"demo_{i:03d}", "status": "ok", "answer": f"answer {tag}{i:03d}"}) + "\n"


def _write(folder: Path, order: list[int], tag: str = "v") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "agent.jsonl"
    out.write_text("".join(_line(i, tag) for i in order), encoding="utf-8")
    (folder / "agent.manifest.json").write_text(json.dumps({
        "description": "agent", "state": "finished", "stages": [{"name": "agent"}],
        "counts": {"ok": 0, "error": 0}, "run_config": {}}))
    return out


def _site_client(folder: Path) -> tuple[TestClient, RecordIndex]:
    site = build_site([folder])
    out = site.catalog.outputs[0]
    idx = site.index(out)
    assert idx.wait(None, timeout=10)
    idx.recheck_s = 3600.0  # the throttled stat look never fires: only the read's own checks can save it
    return TestClient(create_app(site, warm=False), follow_redirects=False, raise_server_exceptions=False), idx


def _same_stamp_rewrite(path: Path, text: str) -> None:
    """Rewrite in place (same inode, same size) and put the old mtime back: nothing in stat() changes."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(text.encode("utf-8"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_a_same_size_in_place_rewrite_is_caught_by_the_id_at_the_offset(tmp_path):
    path = _write(tmp_path, list(range(11)))
    client, idx = _site_client(tmp_path)
    assert "answer v005" in client.get("/o/agent/r/demo_005").text
    reordered = list(range(11))[::-1]  # demo_005 stays in the middle; demo_004 now sits where demo_006 was
    _same_stamp_rewrite(path, "".join(_line(i, "w") for i in reordered))
    page = client.get("/o/agent/r/demo_004")
    assert page.status_code == 200
    assert "answer w004" in page.text and "demo_006" not in page.text.split("<details class=\"raw\"")[0]
    assert idx.find("demo_004").offset == reordered.index(4) * len(_line(4, "w"))  # re-indexed


def test_a_compaction_replacing_the_file_and_a_dropped_record_never_give_a_500(tmp_path):
    path = _write(tmp_path, list(range(11)))
    client, idx = _site_client(tmp_path)
    assert client.get("/o/agent/").status_code == 200
    tmp = path.with_name(path.name + ".compact.tmp")  # the compaction's way: a new file renamed over it
    tmp.write_text("".join(_line(i, "c") for i in [10, *range(1, 10), 0]), encoding="utf-8")
    os.replace(tmp, path)
    page = client.get("/o/agent/r/demo_000")
    assert page.status_code == 200 and "answer c000" in page.text
    listing = client.get("/o/agent/")
    assert listing.status_code == 200 and "answer c010" in listing.text
    _same_stamp_rewrite(path, "".join(_line(i, "d") for i in [10, *range(1, 10), 10]))  # demo_000 is gone
    gone = client.get("/o/agent/r/demo_000")
    assert gone.status_code == 404 and "no longer in agent.jsonl" in gone.text
    entry = idx.find("demo_010")
    assert idx.read(entry)["id"] == "demo_010"
    stale = idx.find("demo_003")
    path.write_text("", encoding="utf-8")  # emptied: the read refuses, it never returns another record
    try:
        idx.read(stale)
        raise AssertionError("a record read from an emptied file")
    except StaleRecord as exc:
        assert "demo_003" in str(exc)


def test_the_front_page_counts_what_the_file_holds_not_the_last_invocation(tmp_path):
    path = _write(tmp_path, list(range(15)))  # its manifest says ok 0 (a resume that found nothing to do)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "demo_003", "status": "error", "reason": "timeout"}) + "\n")  # last line wins
        f.write("{not json\n")
    client, _ = _site_client(tmp_path)
    home = client.get("/").text
    assert "ok 14" in home and "error 1" in home and "corrupt 1" in home
    assert "ok 0" not in home
    manifest = json.loads((tmp_path / "agent.manifest.json").read_text())
    manifest["counts"] = {"ok": 3, "error": 0}
    (tmp_path / "agent.manifest.json").write_text(json.dumps(manifest))
    client, _ = _site_client(tmp_path)
    assert "last invocation: ok 3" in client.get("/").text  # said as what it is


def test_a_json_output_is_found_by_its_own_manifest_and_a_dead_run_reads_interrupted(tmp_path):
    """`p.json`'s side files are `p.json.manifest.json` (runner.lock.side_path); the viewer pairs them by
    the manifest's `output` field, and shows a `running` manifest whose writer is gone as interrupted."""
    import json as _json
    import socket
    import subprocess

    from kbvqa.report.viewer.discovery import discover
    from kbvqa.report.viewer.site import _manifest_info

    dead = subprocess.Popen(["true"])
    dead.wait()  # a reaped child: its pid names no live process
    out = tmp_path / "p.json"
    out.write_text('{"id": "a", "status": "ok"}\n')
    (tmp_path / "p.json.manifest.json").write_text(_json.dumps(
        {"output": str(out), "state": "running", "stages": [], "writer": {"pid": dead.pid,
                                                                           "host": socket.gethostname()}}))
    cat = discover([tmp_path])
    (o,) = [o for o in cat.outputs if o.manifest]
    assert o.path == out and not [p for p in cat.problems if "without its output" in p]
    assert _manifest_info(o)["state"] == "interrupted"

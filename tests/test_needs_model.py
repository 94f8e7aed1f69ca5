"""One meaning per status (issue 25 item 2): a record a stage cannot decide without a model ends
`needs_model` — not `error` — counted apart in the run summary and the manifest, re-run on resume,
shown by the viewer as its own status, and handled by the exit-code convention as "not ok, not a
failure": all needs_model → 3 (nothing produced), some → 0 even under --fail-on-error."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from kbvqa.cli.common import end_job
from kbvqa.runner import NeedsModel, read_results, run
from kbvqa.runner.stage import Context, Stage


class Judgelike(Stage):
    """Needs a model for odd records (an offline stage), decides even ones."""

    name = "judgelike"

    def __init__(self, config=None, *, offline: bool = True):
        super().__init__(config)
        self.offline = offline

    async def run(self, record, ctx):
        if record["n"] % 2 and self.offline:
            raise NeedsModel("deciding this needs a model: configure the 'judge' role")
        return {**record, "decided": True}


def test_needs_model_is_its_own_status_counted_and_resumed(tmp_path):
    out = tmp_path / "o.jsonl"
    recs = [{"id": f"r{i}", "n": i} for i in range(5)]
    s = run(recs, [Judgelike()], Context(), out=out, progress=False)
    assert (s.ok, s.error, s.invalid, s.needs_model) == (3, 0, 0, 2)
    assert s.as_dict()["needs_model"] == 2
    lines = {r["id"]: r for r in read_results(out)}
    assert lines["r1"]["status"] == "needs_model" and lines["r1"]["reason"].startswith("NeedsModel: deciding")
    manifest = json.loads(s.manifest.read_text())
    assert manifest["counts"] == {"ok": 3, "error": 0, "invalid": 0, "needs_model": 2}
    # with a model configured, --resume picks up exactly the records that needed one
    s2 = run(recs, [Judgelike(offline=False)], Context(), out=out, progress=False)
    assert (s2.ok, s2.needs_model, s2.skipped) == (2, 0, 3)
    assert {r["status"] for r in read_results(out)} == {"ok"}


def _app(**kw) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root(fail_on_error: bool = typer.Option(False, "--fail-on-error")) -> None:
        pass

    @app.command("job")
    def job() -> None:
        end_job(**kw)

    return app


@pytest.mark.parametrize("kw,flags,code,says", [
    (dict(ok=0, failed={"error": 0}, needs_model=4), [], 3, "4 record(s) did not end ok: needs_model 4"),
    (dict(ok=2, failed={"error": 0}, needs_model=4), ["--fail-on-error"], 0, "4 record(s) need a model"),
    (dict(ok=2, failed={"error": 1}, needs_model=4), ["--fail-on-error"], 4, "error 1, needs_model 4"),
    (dict(ok=2, failed={"error": 1}, needs_model=4), [], 0, "needs_model is not a failure"),
])
def test_exit_codes_count_needs_model_apart(kw, flags, code, says):
    res = CliRunner().invoke(_app(**kw), [*flags, "job"])
    assert res.exit_code == code, res.output
    assert says in res.output

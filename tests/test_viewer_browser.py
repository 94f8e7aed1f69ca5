"""`kbvqa view` in a real headless browser (Debian chromium + chromium-driver through Selenium): the
demo's run, navigated as a person would — runs → audit → a filter → a record → an agent episode —
with an injected `<script>` in a question and in a model answer shown as text and never run.
Screenshots go to tests/artifacts/viewer/ (ignored by git; kept as CI artefacts)."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if CHROMIUM is None or DRIVER is None:
    pytest.skip("headless browser tests need Debian's chromium and chromium-driver "
                "(`apt-get install -y chromium chromium-driver`; `make test` installs them)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra: pip install -e '.[test]'")
pytest.importorskip("uvicorn", reason="the viewer needs the `view` extra")

from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "viewer"
MARK = "window.__kbvqa_pwned = 1"
SCRIPT = f"<script>{MARK}</script>"


def _inject(path: Path, pick, edit) -> str:
    """Rewrite one record of a JSONL output in place (the first `pick` accepts); returns its id."""
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    rec = next(r for r in lines if pick(r))
    edit(rec)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")
    return rec["id"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, demo_copy):
    out = demo_copy(tmp_path_factory.mktemp("browser") / "demo")[0]
    dropped = _inject(out / "audit" / "audited.jsonl", lambda r: r["audit"]["action"] == "drop",
                      lambda r: r.update(question=f"{SCRIPT} {r['question']}"))
    episode = _inject(out / "agent" / "predictions.jsonl", lambda r: r.get("answer"),
                      lambda r: r.update(answer=f"{SCRIPT} {r['answer']}"))
    return out, dropped, episode


@pytest.fixture(scope="module")
def server(demo_run):
    import uvicorn

    from kbvqa.cli.view import build_site
    from kbvqa.report.viewer.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(create_app(build_site([demo_run[0]])), host="127.0.0.1", port=port,
                                       log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not srv.started:
        assert time.monotonic() < deadline, "the viewer did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1600"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def test_audit_to_record_to_agent_episode_with_a_filter_and_injected_scripts_shown_as_text(server, demo_run, browser):
    run, dropped, episode = demo_run
    wait = WebDriverWait(browser, 20)
    browser.get(server + "/")
    assert "kbvqa runs" in browser.find_element(By.TAG_NAME, "h1").text
    shot(browser, "01_runs")

    browser.find_element(By.LINK_TEXT, "Audit").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "output-title"), "Audit"))
    assert browser.find_elements(By.CSS_SELECTOR, "section.charts svg rect"), "the summary counts are drawn"
    shot(browser, "02_audit_list")

    browser.find_element(By.CSS_SELECTOR, 'a.chip[data-facet="action"][data-value="drop"]').click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "count"), "matching record(s)"))
    n_drop = sum(json.loads(x)["audit"]["action"] == "drop"
                 for x in (run / "audit" / "audited.jsonl").read_text().splitlines())
    assert browser.find_element(By.ID, "count").text.startswith(f"{n_drop} matching record(s)")
    ids = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "td.rid a")]
    assert dropped in ids and len(ids) == n_drop
    assert SCRIPT in browser.find_element(By.CSS_SELECTOR, "table.records").text  # the question, as text
    shot(browser, "03_audit_filtered_drop")

    browser.find_element(By.LINK_TEXT, dropped).click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "td.question-after")))
    assert browser.find_element(By.CSS_SELECTOR, "td.question-after").text.startswith(SCRIPT)
    assert browser.execute_script("return window.__kbvqa_pwned === undefined")
    assert browser.find_element(By.CSS_SELECTOR, ".stage-verify h3").text.startswith("verify")
    assert browser.current_url.endswith(f"/o/audit-audited/r/{dropped}")  # a permalink
    shot(browser, "04_audit_record")

    # the demo has two agent outputs (predictions, and budget2: the same agent under --max-turns 2)
    browser.find_element(By.CSS_SELECTOR, 'a[href$="/o/agent-predictions/"]').click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "output-title"), "Agent episodes"))
    browser.find_element(By.LINK_TEXT, episode).click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "ol.trajectory")))
    answer = browser.find_element(By.CSS_SELECTOR, "section.answer-col .answer")
    assert answer.text.startswith(SCRIPT) and browser.execute_script("return window.__kbvqa_pwned === undefined")
    img = answer.find_element(By.TAG_NAME, "img")
    wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img))
    assert "valid" in browser.find_element(By.CSS_SELECTOR, "section.answer-col table").text
    assert browser.find_element(By.CSS_SELECTOR, "section.reference-col .interleaved").text.strip()
    observation = browser.find_element(By.CSS_SELECTOR, "details.observation")
    assert observation.get_attribute("open") is None  # observations start collapsed
    observation.find_element(By.TAG_NAME, "summary").click()
    assert observation.get_attribute("open") is not None
    shot(browser, "05_agent_episode")

    browser.find_element(By.ID, "search-id").send_keys("demo_013\n")
    wait.until(EC.text_to_be_present_in_element((By.TAG_NAME, "h1"), "demo_013"))  # every output holding the id
    browser.find_element(By.XPATH, "//main//li/a[contains(., 'audit/audited.jsonl')]").click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "mark.hit")))  # the matched evidence span
    shot(browser, "06_search")


def test_the_exported_static_site_opens_from_disk(demo_run, browser, tmp_path):
    from kbvqa.cli.view import build_site
    from kbvqa.report.viewer import export_site

    run, dropped, _episode = demo_run
    site_dir = tmp_path / "site"
    res = export_site(build_site([run]), site_dir)
    assert res.records > 0 and not res.problems
    wait = WebDriverWait(browser, 20)
    browser.get((site_dir / "index.html").as_uri())
    browser.find_element(By.LINK_TEXT, "Audit").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "output-title"), "Audit"))
    bg = browser.execute_script("return getComputedStyle(document.querySelector('header.top')).backgroundColor")
    assert bg not in ("", "rgba(0, 0, 0, 0)"), "the local stylesheet is applied"
    browser.find_element(By.CSS_SELECTOR, 'a.chip[data-facet="action"][data-value="drop"]').click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "count"), "matching record(s)"))
    browser.find_element(By.LINK_TEXT, dropped).click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "td.question-after")))
    assert browser.find_element(By.CSS_SELECTOR, "td.question-after").text.startswith(SCRIPT)
    assert browser.execute_script("return window.__kbvqa_pwned === undefined")
    img = browser.find_element(By.CSS_SELECTOR, ".audit-head img")
    wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img))
    browser.find_element(By.ID, "search-id").send_keys("demo_013\n")  # the export's search: the viewer's JS
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "h1.rid"), "demo_013"))
    shot(browser, "07_static_export_record")


def test_an_agent_episode_exported_from_another_folder_shows_every_trajectory_image(browser, bench_copy, tmp_path,
                                                                                   monkeypatch):
    """Issue 25 items 1 and 8: an agent run typed with relative paths, exported with `kbvqa view --export`
    from another working directory (the run folder alone; the KB's images lie outside it, under the
    root the run's manifest records), opened from disk: every trajectory image loads."""
    from test_viewer import agent_run_elsewhere
    from typer.testing import CliRunner

    from kbvqa.cli.app import app
    from kbvqa.report.viewer.site import rid_slug

    runs, elsewhere = agent_run_elsewhere(bench_copy, tmp_path, monkeypatch)
    res = CliRunner().invoke(app, ["view", "../runs", "--export", "site"])
    assert res.exit_code == 0, res.output
    first = json.loads((runs / "agent.jsonl").read_text(encoding="utf-8").splitlines()[0])
    page = elsewhere / "site" / "o" / "agent" / "r" / f"{rid_slug(first['id'])}.html"
    assert page.is_file(), sorted(p.name for p in (elsewhere / "site" / "o").iterdir())
    browser.get(page.as_uri())
    wait = WebDriverWait(browser, 20)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "ol.trajectory")))
    assert not browser.find_elements(By.CSS_SELECTOR, "ol.trajectory figure.missing"), "an image not shown"
    imgs = browser.find_elements(By.CSS_SELECTOR, "ol.trajectory img")
    n_items = sum(1 for t in first["trajectory"] for i in t.get("items") or [] if i.get("image"))
    assert len(imgs) >= n_items > 0
    browser.execute_script("for (const i of arguments[0]) { i.loading = 'eager'; i.scrollIntoView(); }", imgs)
    wait.until(lambda d: d.execute_script(
        "return arguments[0].every(i => i.complete && i.naturalWidth > 0)", imgs))
    shot(browser, "08_exported_agent_trajectory_images")

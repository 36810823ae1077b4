"""The web console at ``/``, driven in a real browser: headless Chromium through Selenium
(Debian's ``chromium`` and ``chromium-driver``; ``scripts/test.sh`` installs them).

Every test loads the page the binary serves, acts as a person would (typing, Ctrl+Enter,
clicking) and checks what the page shows against the server's own HTTP answers: rows and their
values, types, the cache verdict, a chart's series, the server's figures, uploads, downloads,
token login. No test tolerates a JavaScript error in the browser's console.

Screenshots: every test saves what it saw under its temporary directory; with
``QUIVER_CONSOLE_SCREENSHOTS=DIR`` they go to DIR too (``docs/console`` holds the README's,
taken by this test: ``QUIVER_CONSOLE_SCREENSHOTS=docs/console ./scripts/test.sh -k console``).
"""

from __future__ import annotations

import io
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
import requests
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from conftest import SpawnedServer
from quiver_testlib import HTTP_TIMEOUT_S, persist, query_json, write_ok
from test_auth import bearer, offline_admin
from test_first_hour import readme_server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT_S = 30
DB = "metrics"
HOSTS = ("alpha", "beta", "gamma")
# one point per host every 10 s for 10 minutes, ending now (so `now()` windows see them)
POINTS_PER_HOST = 60

Spawn = Callable[..., SpawnedServer]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless Chromium at 1280x800, downloading into ``tmp_path/downloads``."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("chromium and chromedriver are needed (apt-get install chromium "
                    "chromium-driver; scripts/test.sh does)", pytrace=False)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,800", "--lang=en-US"):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {
        "download.default_directory": str(downloads),
        "download.prompt_for_download": False,
    })
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def series_lines(now_ns: int) -> str:
    lines = []
    for i in range(POINTS_PER_HOST):
        at = now_ns - (POINTS_PER_HOST - i) * 10 * 10**9
        for h, host in enumerate(HOSTS):
            lines.append(f"cpu,host={host} usage={10 * h + i % 7 + 0.5},count={i}i {at}")
    return "\n".join(lines) + "\n"


def screenshot(driver: WebDriver, tmp_path: Path, name: str) -> None:
    """Saves what the browser shows as NAME.png (and into QUIVER_CONSOLE_SCREENSHOTS)."""
    driver.save_screenshot(str(tmp_path / f"{name}.png"))
    target = os.environ.get("QUIVER_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / f"{name}.png", Path(target) / f"{name}.png")


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], object], what: str) -> object:
    try:
        # an element the page redraws between finding and reading it is looked for again
        return WebDriverWait(driver, WAIT_S, poll_frequency=0.1,
                             ignored_exceptions=(StaleElementReferenceException,)).until(condition)
    except TimeoutException:
        pytest.fail(f"the console did not show {what} within {WAIT_S} s; page says: "
                    f"{driver.find_element(By.TAG_NAME, 'body').text[:2000]}")


def text_of(driver: WebDriver, element_id: str) -> str:
    """The rendered text of an element (read in one step: the page redraws elements)."""
    return driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.innerText : '';",
        element_id)


def javascript_errors(driver: WebDriver, allowed: tuple[str, ...] = ()) -> list[str]:
    """The browser console's errors, except network statuses the test caused on purpose."""
    errors = [entry["message"] for entry in driver.get_log("browser")
              if entry["level"] == "SEVERE"]
    return [e for e in errors if not any(a in e for a in allowed)]


def open_console(driver: WebDriver, base_url: str, page: str = "query") -> None:
    driver.get(f"{base_url}/#{page}")
    wait_for(driver, lambda d: d.execute_script("return document.readyState") == "complete",
             "a loaded page")


def choose_database(driver: WebDriver, db: str) -> None:
    wait_for(driver, lambda d: db in [o.get_attribute("value") for o in
                                      d.find_elements(By.CSS_SELECTOR, "#db option")],
             f"database {db} in the picker")
    # (the page may have chosen it already; choosing it again would reload the table list)
    driver.execute_script(
        "const s = document.getElementById('db'); if (s.value !== arguments[0]) {"
        "s.value = arguments[0]; s.dispatchEvent(new Event('change')); }", db)


def run_in_editor(driver: WebDriver, sql: str) -> None:
    """Types `sql` into the editor and runs it with Ctrl+Enter, as a person does."""
    before = text_of(driver, "result-info")
    editor = driver.find_element(By.ID, "editor")
    editor.click()
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(Keys.DELETE)
    editor.send_keys(sql)
    editor.send_keys(Keys.CONTROL, Keys.ENTER)
    wait_for(driver, lambda d: text_of(d, "run") == "Run" and (
        text_of(d, "result-info") != before or d.find_element(By.ID, "error").is_displayed()),
        "the query's outcome")


def visible_rows(driver: WebDriver) -> list[list[str]]:
    """The result table's rows now in the DOM (the virtual table draws only those in view),
    each as its cells' text without the row number."""
    return driver.execute_script("""
        return [...document.querySelectorAll('#table .rows .row')].map(
            (row) => [...row.children].slice(1).map((cell) => cell.textContent));""")


def header(driver: WebDriver) -> list[tuple[str, str]]:
    return driver.execute_script("""
        return [...document.querySelectorAll('#table .head .cell')].slice(1).map(
            (cell) => [cell.querySelector('.name').textContent,
                       cell.querySelector('.type').textContent]);""")


def test_console_runs_a_query_shows_rows_and_charts_them(spawn_quiver: Spawn, tmp_path: Path,
                                                         browser: WebDriver) -> None:
    # the README's command: default ports, ./quiver-data, the page at http://127.0.0.1:8086/
    server = readme_server(spawn_quiver, tmp_path)
    page = requests.get(f"{server.http_url}/", timeout=HTTP_TIMEOUT_S)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "default-src 'self'" in page.headers["content-security-policy"]
    write_ok(server.http_url, DB, series_lines(time.time_ns()))

    open_console(browser, "http://127.0.0.1:8086")
    choose_database(browser, DB)
    # the table browser lists the table and, opened, its columns and their kinds
    # (opened in one step, and again should the list be redrawn meanwhile)
    columns = wait_for(browser, lambda d: d.execute_script("""
        const item = document.querySelector("#schema-tree li[data-table='cpu']");
        if (!item) return false;
        const list = item.querySelector('ul');
        if (list.hidden) item.querySelector('button').click();
        return !list.hidden && list.innerText;"""), "the columns of table cpu")
    for column, kind in (("host", "tag"), ("time", "time"), ("usage", "float64"),
                         ("count", "int64")):
        assert column in columns and kind in columns, columns

    sql = ("SELECT date_bin(INTERVAL '1 minute', time) AS time, host, avg(usage) AS usage "
           "FROM cpu WHERE time >= now() - INTERVAL '1 hour' GROUP BY 1, 2 ORDER BY 1, 2")
    run_in_editor(browser, sql)
    expected = query_json(server.http_url, DB, sql)
    assert not browser.find_element(By.ID, "error").is_displayed()
    info = text_of(browser, "result-info")
    assert info.startswith(f"{len(expected)} rows · 3 columns"), info
    assert [name for name, _ in header(browser)] == ["time", "host", "usage"]
    assert header(browser)[0][1] == "Timestamp<NANOSECOND, UTC>"
    first = visible_rows(browser)[0]
    assert first[0] == expected[0]["time"] and first[1] == expected[0]["host"]
    assert float(first[2]) == pytest.approx(expected[0]["usage"])
    # the second run of the same question is answered by the result cache
    first_verdict = text_of(browser, "verdict")
    # the first run computes (a now() window: BYPASS; its parts are kept for the next one)
    assert first_verdict in ("MISS", "BYPASS"), first_verdict
    browser.find_element(By.ID, "run").click()
    wait_for(browser, lambda d: text_of(d, "verdict") in ("HIT", "PARTIAL"),
             "a cache verdict of HIT or PARTIAL on the repeat")
    screenshot(browser, tmp_path, "query")

    # a chart: one line per host, its time axis in UTC
    browser.find_element(By.ID, "view-chart").click()
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart canvas"), "a chart")
    legend = browser.find_element(By.CSS_SELECTOR, "#chart .u-legend").text
    for host in HOSTS:
        assert host in legend, legend
    assert "time (UTC)" in legend
    assert text_of(browser, "chart-note").startswith("3 series over")
    screenshot(browser, tmp_path, "chart")
    assert javascript_errors(browser) == []


def test_a_bad_query_shows_the_servers_error_and_the_page_goes_on(
        spawn_quiver: Spawn, tmp_path: Path, browser: WebDriver) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    write_ok(server.http_url, DB, series_lines(time.time_ns()))
    open_console(browser, server.http_url)
    choose_database(browser, DB)

    run_in_editor(browser, "SELEC host FROM cpu")
    error = browser.find_element(By.ID, "error")
    assert error.is_displayed() and "SQL error" in error.text, error.text
    assert "Failed (400)" in text_of(browser, "status")
    run_in_editor(browser, "SELECT nope FROM cpu")
    assert "nope" in browser.find_element(By.ID, "error").text
    run_in_editor(browser, "SELECT * FROM no_such_table")
    assert "no_such_table" in browser.find_element(By.ID, "error").text
    screenshot(browser, tmp_path, "error")

    # InfluxQL through the language picker, after the errors
    browser.find_element(By.CSS_SELECTOR, "#language option[value='influxql']").click()
    run_in_editor(browser, "SELECT max(usage) FROM cpu GROUP BY host")
    assert not browser.find_element(By.ID, "error").is_displayed()
    assert text_of(browser, "result-info").startswith("3 rows"), text_of(browser, "result-info")
    # only the refusals the test asked for reached the browser's console
    assert javascript_errors(browser, allowed=("status of 400", "status of 404")) == []
    assert requests.get(f"{server.http_url}/health", timeout=HTTP_TIMEOUT_S).ok


def test_fifty_thousand_rows_stay_virtual_and_the_chart_decimates(
        spawn_quiver: Spawn, tmp_path: Path, browser: WebDriver) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    rows = 50_000
    start = 1_700_000_000 * 10**9
    body = "".join(f"big,host=h{i % 5} v={i}i {start + i * 10**9}\n" for i in range(rows))
    write_ok(server.http_url, DB, body)
    open_console(browser, server.http_url)
    choose_database(browser, DB)

    started = time.monotonic()
    run_in_editor(browser, "SELECT time, host, v FROM big ORDER BY time")
    shown_after = time.monotonic() - started
    assert text_of(browser, "result-info").startswith("50,000 rows")
    drawn = visible_rows(browser)
    assert 10 <= len(drawn) <= 100, f"{len(drawn)} rows in the DOM for 50,000"
    assert drawn[0][2] == "0"
    # scrolled to the end, the last rows are drawn (and only a screenful)
    browser.execute_script("const g = document.getElementById('table');"
                           "g.scrollTop = g.scrollHeight;")
    wait_for(browser, lambda d: visible_rows(d) and visible_rows(d)[-1][2] == str(rows - 1),
             "the last row after scrolling to the end")
    assert len(visible_rows(browser)) <= 100
    # the chart draws min/max per pixel column, not 50,000 points per series
    browser.find_element(By.ID, "view-chart").click()
    note = wait_for(browser, lambda d: d.find_elements(By.ID, "chart-note"), "a chart")[0].text
    assert note.startswith("5 series over 50,000 instants") and "min/max per pixel" in note, note
    print(f"50,000-row answer shown {shown_after * 1e3:.0f} ms after Ctrl+Enter (debug server)")
    assert javascript_errors(browser) == []


def test_an_answer_taller_than_a_browser_allows_still_scrolls_to_its_last_row(
        spawn_quiver: Spawn, tmp_path: Path, browser: WebDriver) -> None:
    # 26 px per row: 400,000 rows would be 10.4 M px, past the 8 M px the table's scrolling
    # area is capped at, so scroll positions map to rows proportionally
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    rows = 400_000
    body = "".join(f"tall v={i}i {i + 1}\n" for i in range(rows))
    write_ok(server.http_url, DB, body)
    open_console(browser, server.http_url)
    choose_database(browser, DB)
    run_in_editor(browser, "SELECT v FROM tall ORDER BY time")
    assert text_of(browser, "result-info").startswith("400,000 rows")
    for fraction, expect_first in ((0.5, None), (1.0, rows - 1)):
        browser.execute_script("const g = document.getElementById('table');"
                               "g.scrollTop = (g.scrollHeight - g.clientHeight) * arguments[0];",
                               fraction)
        # the rows are redrawn on the next animation frame after the scroll: wait for them
        wait_for(browser, lambda d: len(visible_rows(d)) > 0 and (
            int(visible_rows(d)[0][0]) > rows // 4 if expect_first is None
            else visible_rows(d)[-1][0] == str(expect_first)),
            f"rows drawn at {fraction:.0%} of the scroll")
        shown = [int(row[0]) for row in visible_rows(browser)]
        assert shown == list(range(shown[0], shown[0] + len(shown))) and len(shown) <= 100
        if expect_first is None:
            assert abs(shown[len(shown) // 2] - rows // 2) < rows // 50, shown[:3]
        # every drawn row lies within the scrolled view's neighbourhood
        inside = browser.execute_script("""
            const g = document.getElementById('table');
            const top = g.getBoundingClientRect().top, bottom = top + g.clientHeight;
            return [...document.querySelectorAll('#table .rows .row')].filter((r) => {
              const b = r.getBoundingClientRect();
              return b.bottom > top && b.top < bottom; }).length;""")
        assert inside >= 10, inside
    assert javascript_errors(browser) == []


def test_downloads_are_the_answer_in_csv_parquet_and_arrow(
        spawn_quiver: Spawn, tmp_path: Path, browser: WebDriver) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    write_ok(server.http_url, DB, series_lines(1_700_000_600 * 10**9))
    open_console(browser, server.http_url)
    choose_database(browser, DB)
    run_in_editor(browser, "SELECT host, max(usage) AS peak FROM cpu GROUP BY host ORDER BY host")
    downloads = tmp_path / "downloads"
    for kind in ("csv", "parquet", "arrow"):
        browser.find_element(By.CSS_SELECTOR, f"[data-download='{kind}']").click()
        wait_for(browser, lambda _: (downloads / f"quiver-{DB}.{kind}").is_file()
                 and (downloads / f"quiver-{DB}.{kind}").stat().st_size > 0,
                 f"the {kind} download")
    with ipc.open_stream(downloads / f"quiver-{DB}.arrow") as reader:
        from_arrow = reader.read_all()
    from_parquet = pq.read_table(downloads / f"quiver-{DB}.parquet")
    from_csv = pa_csv.read_csv(downloads / f"quiver-{DB}.csv")
    expected = query_json(server.http_url, DB,
                          "SELECT host, max(usage) AS peak FROM cpu GROUP BY host ORDER BY host")
    for table in (from_arrow, from_parquet, from_csv):
        assert table.column("host").to_pylist() == [r["host"] for r in expected]
        assert table.column("peak").to_pylist() == [r["peak"] for r in expected]
    assert javascript_errors(browser) == []


def test_token_login_is_kept_for_the_tab_and_sent_with_every_request(
        spawn_quiver: Spawn, quiver_bin: Path, tmp_path: Path, browser: WebDriver) -> None:
    data_dir = tmp_path / "data"
    admin = offline_admin(quiver_bin, data_dir)
    server = spawn_quiver("--data-dir", str(data_dir), "--auth", "required", cwd=tmp_path)
    response = requests.post(f"{server.http_url}/api/v3/write_lp", params={"db": DB},
                             data=series_lines(time.time_ns()), headers=bearer(admin),
                             timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 204, response.text

    open_console(browser, server.http_url)
    # without a token the server says 401, and the console asks for one with its reason
    dialog = wait_for(browser, lambda d: d.find_element(By.ID, "login").is_displayed()
                      and d.find_element(By.ID, "login"), "the token dialog")
    assert "token" in text_of(browser, "login-reason").lower()
    screenshot(browser, tmp_path, "login")
    browser.find_element(By.ID, "login-token").send_keys("qv_wrong_token")
    browser.find_element(By.ID, "login-token").send_keys(Keys.ENTER)
    wait_for(browser, lambda d: d.find_element(By.ID, "login").is_displayed(),
             "the dialog again after a wrong token")
    field = browser.find_element(By.ID, "login-token")
    field.clear()
    field.send_keys(admin)
    field.send_keys(Keys.ENTER)
    choose_database(browser, DB)
    assert not dialog.is_displayed()
    run_in_editor(browser, "SELECT count(*) AS n FROM cpu")
    assert visible_rows(browser) == [[str(POINTS_PER_HOST * len(HOSTS))]]
    assert browser.execute_script("return sessionStorage.getItem('quiver.token')") == admin
    assert browser.execute_script("return localStorage.length") == 0
    # forgetting the token forgets it
    browser.find_element(By.ID, "login-button").click()
    browser.find_element(By.ID, "login-clear").click()
    assert browser.execute_script("return sessionStorage.getItem('quiver.token')") is None
    assert javascript_errors(browser, allowed=("status of 401",)) == []


def test_server_page_shows_live_figures_files_and_cancels_a_query(
        spawn_quiver: Spawn, tmp_path: Path, browser: WebDriver) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    write_ok(server.http_url, DB, series_lines(time.time_ns()))
    persist(server.http_url)
    open_console(browser, server.http_url, page="server")

    def card(title: str) -> str:
        return browser.find_element(By.CSS_SELECTOR, f"[data-card='{title}']").text

    written = f"{POINTS_PER_HOST * len(HOSTS):,}"
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "[data-card='Ingest']")
             and written in card("Ingest"), "the rows written")
    for title in ("Result cache", "Chunk cache", "Write-ahead log", "Persistence", "Storage",
                  "Queries", "Memory"):
        shown = card(title)
        assert "unavailable" not in shown and "needs an admin" not in shown, shown
        assert any(ch.isdigit() for ch in shown), f"{title} shows no figure: {shown}"
    assert "MiB" in card("Memory")
    files = wait_for(browser, lambda d: "cpu" in text_of(d, "tables") and text_of(d, "tables"),
                     "the files of table cpu")
    assert f"{DB} cpu 1 1 {written}" in " ".join(files.split()), files

    # a long query, run by another client, listed and cancelled from the page
    outcome: dict[str, requests.Response] = {}

    def long_query() -> None:
        outcome["response"] = requests.get(
            f"{server.http_url}/api/v3/query_sql",
            params={"db": DB, "q": "SELECT count(*) FROM generate_series(1, 100000000000)"},
            timeout=120)

    runner = threading.Thread(target=long_query)
    runner.start()
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#queries button.danger"),
             "the running query with its Cancel button")
    assert "generate_series" in text_of(browser, "queries")
    screenshot(browser, tmp_path, "server")
    # the table is redrawn every refresh: find and press the button in one step
    browser.execute_script("document.querySelector('#queries button.danger').click()")
    runner.join(timeout=60)
    assert not runner.is_alive()
    assert outcome["response"].status_code == 499, outcome["response"].text
    assert "cancel" in outcome["response"].json()["error"]
    wait_for(browser, lambda d: "none right now" in text_of(d, "queries"), "no running query")
    assert javascript_errors(browser) == []


def test_upload_line_protocol_and_csv(spawn_quiver: Spawn, tmp_path: Path,
                                      browser: WebDriver) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    lp = tmp_path / "points.lp"
    lp.write_text("mem,host=a used=1i 1000000000\n"
                  "mem,host=a used=oops 2000000000\n"
                  "mem,host=b used=3i 3000000000\n")
    open_console(browser, server.http_url, page="upload")
    browser.find_element(By.ID, "upload-db").send_keys("uploads")
    browser.find_element(By.ID, "upload-file").send_keys(str(lp))
    browser.find_element(By.ID, "upload-button").click()
    wait_for(browser, lambda d: "Wrote" in text_of(d, "upload-status"), "the upload's outcome")
    assert text_of(browser, "upload-status").startswith("Wrote 2 lines of points.lp")
    rejected = text_of(browser, "upload-errors")
    assert "1 line rejected" in rejected and "line 2:" in rejected and "oops" in rejected
    assert query_json(server.http_url, "uploads", "SELECT host, used FROM mem ORDER BY host") == [
        {"host": "a", "used": 1}, {"host": "b", "used": 3}]

    # a string field value with a line break, straddling the console's 4 Mi-character cut
    filler_line = "fill,host=a v=1i 1000000000\n"
    filler = filler_line * ((4 << 20) // len(filler_line))
    straddling = tmp_path / "straddling.lp"
    straddling.write_text(filler + 'log,host=a msg="first\nsecond" 2000000000\n'
                          "log,host=b msg=\"ok\" 3000000000\n")
    browser.find_element(By.ID, "upload-file").send_keys(str(straddling))
    browser.find_element(By.ID, "upload-button").click()
    wait_for(browser, lambda d: "of straddling.lp" in text_of(d, "upload-status"),
             "the second line-protocol upload's outcome")
    lines = filler.count("\n") + 2
    assert text_of(browser, "upload-status").startswith(f"Wrote {lines:,} lines"), \
        text_of(browser, "upload-status")
    assert query_json(server.http_url, "uploads", "SELECT host, msg FROM log ORDER BY host") == [
        {"host": "a", "msg": "first\nsecond"}, {"host": "b", "msg": "ok"}]

    csv = tmp_path / "weather.csv"
    csv.write_text("time,station,temp,readings,note,blank\n"
                   "2024-01-01T00:00:00Z,oslo,-3.5,4,\"cold, clear\",\n"
                   "2024-01-01T00:00:00.25Z,rome,12,7,,\n"
                   "2024-01-01T01:00:00Z,oslo,-4,5,\"said \"\"brr\"\"\",\n")
    browser.find_element(By.ID, "upload-file").send_keys(str(csv))
    assert browser.find_element(By.ID, "csv-options").is_displayed()
    assert browser.find_element(By.ID, "upload-table").get_attribute("value") == "weather"
    browser.find_element(By.ID, "upload-tags").send_keys("station")
    browser.find_element(By.ID, "upload-button").click()
    wait_for(browser, lambda d: "rows of weather.csv" in text_of(d, "upload-status"),
             "the CSV upload's outcome")
    assert "Wrote 3 rows" in text_of(browser, "upload-status")
    assert "not written: blank" in text_of(browser, "upload-status")
    screenshot(browser, tmp_path, "upload")
    answer = requests.get(f"{server.http_url}/api/v3/query_sql", timeout=HTTP_TIMEOUT_S, params={
        "db": "uploads", "q": "SELECT * FROM weather ORDER BY time", "format": "arrow"})
    assert answer.status_code == 200, answer.text
    table = ipc.open_stream(io.BytesIO(answer.content)).read_all()
    assert pa.types.is_dictionary(table.schema.field("station").type)  # a tag
    assert table.schema.field("temp").type == pa.float64()
    assert table.schema.field("readings").type == pa.int64()
    assert table.column("note").to_pylist() == ["cold, clear", None, 'said "brr"']
    assert "blank" not in table.schema.names  # a column with no value is not written
    assert [t.value for t in table.column("time")] == [
        1_704_067_200_000_000_000, 1_704_067_200_250_000_000, 1_704_070_800_000_000_000]

    # a CSV row with too few fields stops the upload before anything of it is written
    broken = tmp_path / "broken.csv"
    broken.write_text("time,station,temp\n2024-01-02T00:00:00Z,oslo\n")
    browser.find_element(By.ID, "upload-file").send_keys(str(broken))
    browser.find_element(By.ID, "upload-table").clear()
    browser.find_element(By.ID, "upload-table").send_keys("weather")
    browser.find_element(By.ID, "upload-button").click()
    wait_for(browser, lambda d: d.find_element(By.ID, "upload-errors").is_displayed()
             and "line 2" in text_of(d, "upload-errors"), "the CSV error")
    assert len(query_json(server.http_url, "uploads", "SELECT * FROM weather")) == 3
    assert javascript_errors(browser, allowed=("status of 400",)) == []


def test_assets_are_embedded_revalidated_and_unknown_files_are_404(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    script = requests.get(f"{server.http_url}/console/main.js", timeout=HTTP_TIMEOUT_S)
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    etag = script.headers["etag"]
    again = requests.get(f"{server.http_url}/console/main.js",
                         headers={"If-None-Match": etag}, timeout=HTTP_TIMEOUT_S)
    assert again.status_code == 304 and again.content == b""
    for path in ("/console/nope.js", "/console/../Cargo.toml", "/console/%2e%2e/Cargo.toml",
                 "/console/vendor/../../src/lib.rs", "/console/" + "a" * 5000):
        response = requests.get(f"{server.http_url}{path}", timeout=HTTP_TIMEOUT_S)
        assert response.status_code == 404, (path, response.status_code)
    # the page and its assets are served without a token, the API behind them is not
    head = requests.head(f"{server.http_url}/", timeout=HTTP_TIMEOUT_S)
    assert head.status_code == 200
    assert requests.post(f"{server.http_url}/", timeout=HTTP_TIMEOUT_S).status_code == 405

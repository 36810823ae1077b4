#!/usr/bin/env python3
"""How fast the web console shows a large answer, against the bare fetch of the same answer in
the same browser (the floor any page has to pay), measured in one run.

    .venv/bin/python scripts/console-bench.py [--quiver target/release/quiver] [--rows 50000]
                                              [--repeats 7]

Starts `quiver serve` on free loopback ports with a temporary data directory, writes ROWS rows
(5 series), opens the console in headless Chromium at 1280x800 and, REPEATS times (after one
warm-up), measures inside the page with `performance.now()`:

- fetch: `fetch()` of the query's Arrow answer and reading its bytes (no decoding, no drawing);
- table: Ctrl+Enter's work, from the Run click until the result table is drawn (fetch, Arrow
  decoding, column widths, the rows in view);
- chart: switching to the chart tab (series built, decimated, drawn by uPlot).

Every run is answered by the result cache after the warm-up, so the server's share is the same
for fetch and table. Prints medians and the ratio table / fetch.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

QUERY = "SELECT time, host, v, w FROM big ORDER BY time"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary: str, data_dir: Path) -> tuple[subprocess.Popen, str]:
    http, flight, pg = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [binary, "serve", "--data-dir", str(data_dir), "--http-addr", f"127.0.0.1:{http}",
         "--flight-addr", f"127.0.0.1:{flight}", "--pg-addr", f"127.0.0.1:{pg}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{http}"
    for _ in range(300):
        try:
            if requests.get(f"{url}/health", timeout=1).ok:
                return process, url
        except requests.RequestException:
            pass
        time.sleep(0.1)
    process.kill()
    sys.exit("the server did not start")


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,800"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                            options=options)


FETCH_JS = """
const done = arguments[arguments.length - 1];
const started = performance.now();
fetch('/api/v3/query_sql', {method: 'POST', headers: {'Content-Type': 'application/json'},
  body: JSON.stringify({db: 'bench', q: arguments[0], format: 'arrow'})})
  .then((r) => r.arrayBuffer())
  .then((b) => done([performance.now() - started, b.byteLength]));
"""

TABLE_JS = """
const done = arguments[arguments.length - 1];
document.getElementById('view-table').click();
const info = document.getElementById('result-info');
info.textContent = '';
const started = performance.now();
const observer = new MutationObserver(() => {
  if (info.textContent !== '') {
    observer.disconnect();
    // the table is drawn in the same task that sets the info line
    done([performance.now() - started, info.textContent,
          document.querySelectorAll('#table .rows .row').length]);
  }
});
observer.observe(info, {childList: true, subtree: true, characterData: true});
document.getElementById('run').click();
"""

CHART_JS = """
document.getElementById('view-table').click();
const started = performance.now();
document.getElementById('view-chart').click();
return [performance.now() - started, document.getElementById('chart-note').textContent];
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiver", default="target/release/quiver")
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        server, url = start_server(args.quiver, Path(data_dir))
        try:
            start = 1_700_000_000 * 10**9
            body = "".join(f"big,host=h{i % 5} v={i}i,w={i * 0.5} {start + i * 10**9}\n"
                           for i in range(args.rows))
            assert requests.post(f"{url}/api/v3/write_lp", params={"db": "bench"},
                                 data=body, timeout=120).status_code == 204
            driver = browser()
            try:
                driver.get(f"{url}/")
                time.sleep(1)
                driver.execute_script(
                    "const s = document.getElementById('db'); s.value = 'bench';"
                    "s.dispatchEvent(new Event('change'));"
                    "document.getElementById('editor').value = arguments[0];", QUERY)
                driver.set_script_timeout(120)
                fetches, tables, charts = [], [], []
                for repeat in range(args.repeats + 1):
                    fetch_ms, size = driver.execute_async_script(FETCH_JS, QUERY)
                    table_ms, info, drawn = driver.execute_async_script(TABLE_JS)
                    chart_ms, note = driver.execute_script(CHART_JS)
                    if repeat == 0:
                        print(f"answer: {info}; {size} bytes of Arrow; {drawn} rows in the DOM; "
                              f"chart: {note}")
                        continue
                    fetches.append(fetch_ms)
                    tables.append(table_ms)
                    charts.append(chart_ms)
            finally:
                driver.quit()
        finally:
            server.terminate()
            server.wait(timeout=30)
    fetch_ms, table_ms, chart_ms = (statistics.median(x) for x in (fetches, tables, charts))
    print(f"rows={args.rows} repeats={args.repeats} (medians, ms)")
    print(f"fetch (baseline)   {fetch_ms:8.1f}")
    print(f"table (Run->drawn) {table_ms:8.1f}   ratio to fetch {table_ms / fetch_ms:5.2f}")
    print(f"chart (tab->drawn) {chart_ms:8.1f}   ratio to fetch {chart_ms / fetch_ms:5.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The whole Quiver test suite: Rust unit and integration tests, then the Python end-to-end
# tests against the real `quiver` binary. Creates the Python virtualenv (.venv) on first use.
#
#   ./scripts/test.sh
#
# Environment: CARGO_TARGET_DIR (optional, shared build directory), PYTHON (default python3).
# Installs what the tests need when it is missing: the Python packages (into .venv), psql, a
# JDK and Maven, promtool, influxd (InfluxDB 1.6, the InfluxQL reference), Chromium and
# chromedriver (the web console tests).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
REQUIREMENTS=tests/python/requirements.txt

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "==> creating Python virtualenv in $VENV"
    "$PYTHON" -m venv "$VENV"
fi
# Reinstall only when the pinned requirements changed.
STAMP="$VENV/.requirements.sha256"
WANT="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$WANT" ]]; then
    echo "==> installing Python test requirements"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
    echo "$WANT" > "$STAMP"
fi

# require_tools PURPOSE "APT PACKAGES" COMMAND...: installs the packages with apt (as root) when
# a command is missing, or stops with what to install.
require_tools() {
    local purpose=$1 packages=$2
    shift 2
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 && continue
        if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
            echo "==> installing $packages ($purpose)"
            # shellcheck disable=SC2086 # the package list is meant to split
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
            # a package's service (influxd on :8086, Quiver's default port; prometheus) starts
            # where policy allows: the tests run their own, so stop the ones just installed
            for package in $packages; do
                if [[ -x "/etc/init.d/$package" ]]; then
                    invoke-rc.d "$package" stop >/dev/null 2>&1 || true
                fi
            done
            return 0
        fi
        echo "$* are required for $purpose: install them (e.g. apt-get install $packages)" >&2
        exit 1
    done
}

# psql (the PostgreSQL client) is one of the real clients the end-to-end tests drive.
require_tools "the PostgreSQL tests" postgresql-client psql
# A JDK and Maven run the JDBC drivers (pgjdbc, Arrow Flight SQL JDBC) in test_jdbc.py; Maven
# downloads the drivers from Maven Central on first use (tests/java/pom.xml).
require_tools "the JDBC tests" "default-jdk-headless maven" java mvn
# promtool (Debian's prometheus package) checks that /metrics is valid Prometheus text.
require_tools "the /metrics test" prometheus promtool
# influxd (Debian's influxdb package, InfluxDB 1.6) is the reference the InfluxQL tests compare
# Quiver's /query answers with (tests/python/influxdb_reference.py).
require_tools "the InfluxDB 1.x reference tests" influxdb influxd
# Headless Chromium and its WebDriver drive the web console in test_console.py (Selenium).
require_tools "the web console tests" "chromium chromium-driver" chromium chromedriver

echo "==> cargo test --workspace"
cargo test --workspace

# `cargo test` built target/debug/quiver for the integration tests (with the same features;
# a separate `cargo build` would resolve features without dev-dependencies and rebuild half
# the dependency tree).
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
export QUIVER_BIN="$(cd "$TARGET_DIR" && pwd)/debug/quiver"
if [[ ! -x "$QUIVER_BIN" ]]; then
    echo "expected $QUIVER_BIN to be built by cargo test" >&2
    exit 1
fi

echo "==> Python end-to-end tests"
"$VENV/bin/python" -m pytest -q tests/python "$@"

//! Runs the real `quiver` binary on free loopback ports with a temporary data directory.

#![allow(dead_code)] // each test binary uses a different part of this harness

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `quiver serve`; killed when dropped.
pub struct Server {
    child: Child,
    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub url: String,
    /// The `host:port` of the HTTP listener.
    pub http_addr: String,
    /// The server's data directory.
    pub data_dir: PathBuf,
    /// Holds the log (and the data directory unless the caller chose one).
    temp: tempfile::TempDir,
    log_path: PathBuf,
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The path of the binary under test.
pub fn quiver_bin() -> &'static str {
    env!("CARGO_BIN_EXE_quiver")
}

/// A command running the binary under test with none of the test run's own `QUIVER_*`
/// variables (`QUIVER_TEST_SEED`, CI's `QUIVER_TEST_REQUIRE_TMPFS`, ...): the server refuses
/// unknown ones, and a test's server gets only the settings the test gives it.
pub fn quiver_command() -> Command {
    let mut command = Command::new(quiver_bin());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("QUIVER_") {
            command.env_remove(name);
        }
    }
    command
}

impl Server {
    /// Starts a server with default settings.
    pub async fn start() -> Server {
        Server::start_with_env(&[]).await
    }

    /// Starts a server with extra `QUIVER_*` environment settings and waits for `/health`.
    pub async fn start_with_env(env: &[(&str, &str)]) -> Server {
        Server::start_in(None, env).await
    }

    /// Starts a server on `data_dir` (a fresh temporary one if `None`) and waits for `/health`.
    ///
    /// A port found free can be taken by another test before the server binds it; the server
    /// is then started again on other ports (a few times).
    pub async fn start_in(data_dir: Option<&Path>, env: &[(&str, &str)]) -> Server {
        let mut last_log = String::new();
        for _ in 0..4 {
            let mut server = Server::spawn(data_dir, env);
            match server.started().await {
                Ok(()) => return server,
                Err(log) if log.contains("Address already in use") => last_log = log,
                Err(log) => panic!("{log}"),
            }
        }
        panic!("quiver could not bind free ports in 4 attempts; the last log:\n{last_log}");
    }

    /// Starts a server without waiting for it.
    pub fn spawn(data_dir: Option<&Path>, env: &[(&str, &str)]) -> Server {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = data_dir.map_or_else(|| temp.path().join("data"), Path::to_path_buf);
        let log_path = temp.path().join("quiver.log");
        let http_addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(&log_path).unwrap();
        let child = quiver_command()
            .arg("serve")
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--http-addr", &http_addr])
            .args(["--flight-addr", &format!("127.0.0.1:{}", free_port())])
            .args(["--pg-addr", &format!("127.0.0.1:{}", free_port())])
            .env("QUIVER_LOG_FILTER", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start quiver");
        Server {
            child,
            url: format!("http://{http_addr}"),
            http_addr,
            data_dir,
            temp,
            log_path,
        }
    }

    /// Polls `/health` until it answers 200; the reason and the log if the server exits
    /// first or never gets healthy.
    async fn started(&mut self) -> Result<(), String> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!(
                    "quiver exited with {status} during startup:\n{}",
                    self.log()
                ));
            }
            if let Ok(r) = client.get(format!("{}/health", self.url)).send().await {
                if r.status() == 200 {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("quiver did not become healthy:\n{}", self.log()))
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// A temporary directory for the test's own files (it also holds the log).
    pub fn dir(&self) -> &Path {
        self.temp.path()
    }

    /// Kills the process with SIGKILL (no chance to clean up) and waits for it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Resident set size of the process now and at its peak, in bytes (from
    /// `/proc/<pid>/status`: `VmRSS`, `VmHWM`).
    pub fn rss(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib = |key: &str| -> u64 {
            let line = status.lines().find(|l| l.starts_with(key)).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
                * 1024
        };
        (kib("VmRSS:"), kib("VmHWM:"))
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit; returns its status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// POSTs line protocol to `/api/v3/write_lp` with the given query string.
    pub async fn write_lp(&self, query: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/api/v3/write_lp?{query}", self.url))
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// Runs `sql` in `db` and returns the JSON rows; panics with the body on an error status.
    pub async fn query_json(&self, db: &str, sql: &str) -> Vec<serde_json::Value> {
        let response = self.query(db, sql, "json").await;
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, 200, "query {sql:?} failed: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// Runs `sql` in `db` with `format` and returns the raw response.
    pub async fn query(&self, db: &str, sql: &str, format: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}/api/v3/query_sql", self.url))
            .query(&[("db", db), ("q", sql), ("format", format)])
            .send()
            .await
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses an error response body: `(error message, data)`.
pub async fn error_body(response: reqwest::Response) -> (String, serde_json::Value) {
    let json: serde_json::Value = response.json_value().await;
    (
        json["error"].as_str().unwrap_or_default().to_string(),
        json["data"].clone(),
    )
}

/// JSON decoding without reqwest's `json` feature.
pub trait JsonValue {
    /// The body as JSON; panics if it is not.
    async fn json_value(self) -> serde_json::Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> serde_json::Value {
        let text = self.text().await.unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }
}

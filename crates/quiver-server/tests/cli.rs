//! The `quiver` command line: `config` precedence, `query` and `write` against a real server,
//! graceful shutdown on SIGTERM.

mod common;

use std::time::Duration;

use common::{quiver_command, Server};

fn quiver(args: &[&str]) -> std::process::Output {
    quiver_command().args(args).output().unwrap()
}

fn assert_succeeded(output: &std::process::Output) {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn config_merges_file_env_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quiver.toml");
    std::fs::write(
        &file,
        "http_addr = \"127.0.0.1:1111\"\npg_addr = \"127.0.0.1:2222\"\nmax_request_bytes = 10\n",
    )
    .unwrap();
    let output = quiver_command()
        .args([
            "config",
            "--config",
            file.to_str().unwrap(),
            "--pg-addr",
            "127.0.0.1:3333",
        ])
        .env("QUIVER_MAX_REQUEST_BYTES", "20")
        .output()
        .unwrap();
    assert_succeeded(&output);
    let printed: toml::Table = toml::from_str(&String::from_utf8(output.stdout).unwrap()).unwrap();
    assert_eq!(printed["http_addr"].as_str(), Some("127.0.0.1:1111"));
    assert_eq!(printed["pg_addr"].as_str(), Some("127.0.0.1:3333"));
    assert_eq!(printed["max_request_bytes"].as_integer(), Some(20));
    assert_eq!(printed["data_dir"].as_str(), Some("./quiver-data"));

    std::fs::write(&file, "no_such_setting = 1\n").unwrap();
    let output = quiver(&["config", "--config", file.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no_such_setting"));
}

#[test]
fn serve_refuses_a_bad_address_with_a_clear_error() {
    let output = quiver(&["serve", "--http-addr", "not-an-address"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("http_addr"));
}

#[tokio::test]
async fn write_and_query_subcommands() {
    let server = Server::start().await;
    let file = server.dir().join("data.lp");
    std::fs::write(
        &file,
        "cpu,host=a usage=1.5 1700000000\ncpu,host=b usage=2.5 1700000000\n",
    )
    .unwrap();
    let host = server.url.clone();
    let output = quiver(&[
        "write",
        "--host",
        &host,
        "--db",
        "cli",
        "--precision",
        "s",
        file.to_str().unwrap(),
    ]);
    assert_succeeded(&output);

    let output = quiver(&[
        "query",
        "--host",
        &host,
        "--db",
        "cli",
        "SELECT host, usage FROM cpu ORDER BY host",
    ]);
    assert_succeeded(&output);
    let table = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        table.trim(),
        "+------+-------+\n| host | usage |\n+------+-------+\n| a    | 1.5   |\n| b    | 2.5   |\n+------+-------+"
    );
    let output = quiver(&[
        "query",
        "--host",
        &host,
        "--db",
        "cli",
        "--format",
        "csv",
        "SELECT count(*) AS n FROM cpu",
    ]);
    assert_eq!(String::from_utf8(output.stdout).unwrap(), "n\n2\n");

    let output = quiver(&[
        "query",
        "--host",
        &host,
        "--db",
        "cli",
        "SELECT * FROM missing",
    ]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("\"missing\" not found"));

    std::fs::write(&file, "cpu,host=c usage=3 1\ncpu,host=d usage=oops 2\n").unwrap();
    let output = quiver(&[
        "write",
        "--host",
        &host,
        "--db",
        "cli",
        file.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        stderr.contains("line 2") && stderr.contains("usage=oops"),
        "{stderr}"
    );

    let output = quiver(&["query", "--host", "http://127.0.0.1:1", "SELECT 1"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot reach the server"));
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly() {
    let mut server = Server::start().await;
    assert_eq!(server.write_lp("db=s", "m v=1 1").await.status(), 204);
    let status = server
        .terminate(Duration::from_secs(10))
        .expect("server exits after SIGTERM");
    assert!(status.success(), "{status}");
    assert!(server.log().contains("quiver stopped"));
}

/// The client reads the response headers the server sets, by the same names.
#[test]
fn the_client_reads_the_headers_the_server_sets() {
    assert_eq!(
        quiver_client::CACHE_HEADER,
        quiver_http::CACHE_HEADER.as_str()
    );
    assert_eq!(
        quiver_client::LINES_WRITTEN_HEADER,
        quiver_http::LINES_WRITTEN_HEADER
    );
    assert_eq!(
        quiver_client::LINES_REJECTED_HEADER,
        quiver_http::LINES_REJECTED_HEADER
    );
}

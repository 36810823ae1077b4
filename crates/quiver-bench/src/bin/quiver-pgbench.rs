//! PostgreSQL wire-protocol point-query load generator: a one-row cached query (a prepared
//! statement with one parameter, as drivers send it) from several connections, first one
//! query at a time per connection (the baseline), then pipelined at each `--depth` (that many
//! queries in flight per connection: tokio-postgres sends them back to back and reads the
//! answers in order), in one run, reporting queries/s and the ratio to the baseline.
//!
//! It loads its own table first (over HTTP line protocol) and checks every answer.
//!
//! ```sh
//! quiver-pgbench --http-url http://127.0.0.1:8086 --pg "host=127.0.0.1 port=5433 user=bench dbname=pgbench" \
//!     --connections 1 --depth 16,64,256,1024 --seconds 10
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use tokio_postgres::{Client, NoTls, Statement};

/// Load generator for PostgreSQL point queries.
#[derive(Debug, Parser)]
struct Args {
    /// Quiver's HTTP API (to load the table).
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    http_url: String,
    /// libpq-style connection string of the PostgreSQL port; its `dbname` is loaded.
    #[arg(
        long,
        default_value = "host=127.0.0.1 port=5433 user=bench dbname=pgbench"
    )]
    pg: String,
    /// Concurrent connections.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Queries in flight per connection in the pipelined phases (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
    depth: Vec<usize>,
    /// Distinct parameter values (each a cached one-row answer).
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// Measured seconds per phase (after a one-second warm-up).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// A token allowed to write the database, for loading it over HTTP (none: the server's
    /// local caller).
    #[arg(long)]
    token: Option<String>,
}

const QUERY: &str = "SELECT host, usage, load FROM cpu WHERE host = $1";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let database = args
        .pg
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("dbname="))
        .ok_or("--pg must name a dbname")?
        .to_string();
    load(&args, &database).await?;
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        let (client, connection) = tokio_postgres::connect(&args.pg, NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("connection error: {e}");
            }
        });
        let statement = client.prepare(QUERY).await?;
        clients.push(Arc::new((client, statement)));
    }
    println!(
        "{} connections, {} hosts, query: {QUERY}",
        args.connections, args.hosts
    );
    let single = phase(&clients, &args, 1).await?;
    println!("one at a time:     {single:>10.0} queries/s");
    for &depth in &args.depth {
        let pipelined = phase(&clients, &args, depth).await?;
        println!(
            "pipelined ({depth:>4}): {pipelined:>10.0} queries/s, {:.1}x one at a time",
            pipelined / single
        );
    }
    Ok(())
}

/// Writes one row per host.
async fn load(args: &Args, database: &str) -> Result<(), Box<dyn std::error::Error>> {
    let lines: String = (0..args.hosts)
        .map(|h| {
            format!(
                "cpu,host=h{h} usage={}.5,load={h}i 1700000000000000000\n",
                h % 100
            )
        })
        .collect();
    let mut request = reqwest::Client::new()
        .post(format!("{}/api/v3/write_lp", args.http_url))
        .query(&[("db", database)])
        .body(lines);
    if let Some(token) = &args.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    if !response.status().is_success() {
        return Err(format!("loading failed: {}", response.text().await?).into());
    }
    Ok(())
}

/// Queries/s over `args.seconds` with `depth` queries in flight per connection.
async fn phase(
    clients: &[Arc<(Client, Statement)>],
    args: &Args,
    depth: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let counted = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let (client, counted, stop, done) =
            (client.clone(), counted.clone(), stop.clone(), done.clone());
        let hosts = args.hosts;
        tasks.push(tokio::spawn(async move {
            let queries = futures::stream::iter(c..)
                .take_while(|_| std::future::ready(!stop.load(Ordering::Relaxed)))
                .map(|i| {
                    let client = client.clone();
                    async move {
                        let host = format!("h{}", i % hosts);
                        let rows = client.0.query(&client.1, &[&host]).await?;
                        let found: &str =
                            rows.first().ok_or("no row for a host that exists")?.get(0);
                        if rows.len() != 1 || found != host {
                            return Err::<(), Box<dyn std::error::Error + Send + Sync>>(
                                format!("wrong answer for {host}").into(),
                            );
                        }
                        Ok(())
                    }
                })
                .buffer_unordered(depth);
            futures::pin_mut!(queries);
            while let Some(result) = queries.next().await {
                result?;
                if counted.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    counted.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let total = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?.map_err(|e| e.to_string())?;
    }
    Ok(total as f64 / elapsed)
}

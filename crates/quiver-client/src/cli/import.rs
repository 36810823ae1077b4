//! `quiver import FILE.parquet | FILE.csv`: loads a file through the Arrow path (see
//! [`crate::import`]), with a progress bar. A batch the server refuses stops the import, which
//! says how many rows were written before it; nothing is retried behind the user's back.

use std::path::PathBuf;

use clap::Args;

use super::progress::Progress;
use super::{block_on, plural, ServerAddress};
use crate::import::{FileFormat, Import, ImportError, ImportOptions};
use crate::DEFAULT_DATABASE;

/// Arguments of `quiver import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    server: ServerAddress,
    /// Database to write into (created on first write).
    #[arg(long, default_value = DEFAULT_DATABASE)]
    db: String,
    /// Table to write into (default: the file's name without its extension).
    #[arg(long)]
    table: Option<String>,
    /// The column holding each row's time: a timestamp, a date, RFC 3339 text, or an integer
    /// in `--epoch-unit`.
    #[arg(long, default_value = "time")]
    time_column: String,
    /// Unit of an integer time column: s, ms, us or ns.
    #[arg(long, default_value = "ns")]
    epoch_unit: String,
    /// Tag columns, comma-separated (default: a CSV file's text columns, a Parquet file's
    /// dictionary-encoded text columns; `--tags ''` for none).
    #[arg(long)]
    tags: Option<String>,
    /// Rows per request.
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(1..))]
    batch_rows: u64,
    /// The file's format: parquet or csv (default: from its name).
    #[arg(long)]
    format: Option<String>,
    /// A Parquet or CSV file.
    file: PathBuf,
}

/// Runs `quiver import`: reads the file in batches and writes each through the Arrow path.
pub fn import(args: ImportArgs) -> Result<(), String> {
    let format =
        FileFormat::detect(&args.file, args.format.as_deref()).map_err(|e| e.to_string())?;
    let options = ImportOptions {
        db: args.db.clone(),
        table: args.table.clone(),
        time_column: args.time_column.clone(),
        epoch_unit: args.epoch_unit.clone(),
        tags: args.tags.as_deref().map(|listed| {
            listed
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect()
        }),
        batch_rows: args.batch_rows as usize,
        format: Some(format),
    };
    let prepared = Import::open(&args.file, &options).map_err(|e| e.to_string())?;
    for column in prepared.skipped_columns() {
        eprintln!("column {column:?} has no value in the whole file: not written");
    }
    let table = prepared.table().to_string();
    let tags = if prepared.tags().is_empty() {
        "none".to_string()
    } else {
        prepared.tags().join(", ")
    };
    let client = args.server.client();
    let mut progress = Progress::new(Some(prepared.size()));
    let imported = block_on(prepared.run(&client, |bytes, rows| progress.advance(bytes, rows)))
        // the first request starts the runtime: nothing was written
        .map_err(|e| stopped(&args, 0, &e))?
        .map_err(|e| match e {
            ImportError::Stopped { written, cause } => stopped(&args, written, &cause.to_string()),
            refused @ ImportError::Refused(_) => refused.to_string(),
        })?;
    progress.finish();
    println!(
        "imported {} row{} from {} into database {:?}, table {table:?} (tags: {tags})",
        imported.rows,
        plural(imported.rows as usize),
        args.file.display(),
        args.db
    );
    Ok(())
}

/// The message of an import stopped after `written` rows.
fn stopped(args: &ImportArgs, written: u64, why: &str) -> String {
    format!(
        "{why}\nstopped after {written} row{} of {} written to database {:?}; the rest was not \
         written (importing the whole file again rewrites the same points: a point written \
         twice keeps its last value)",
        plural(written as usize),
        args.file.display(),
        args.db
    )
}

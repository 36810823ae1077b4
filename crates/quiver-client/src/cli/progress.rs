//! The progress bar of `quiver write` and `quiver import` (indicatif), on standard error:
//! bytes read of the input (with a bar and an ETA when its size is known), rows written and
//! rows per second. Drawn only on a terminal; the summary line is printed either way.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress through one input of `total` bytes (`None`: standard input, size unknown).
pub struct Progress {
    bar: ProgressBar,
    rows: u64,
}

impl Progress {
    /// A bar over `total` bytes, drawn on standard error if it is a terminal.
    pub fn new(total: Option<u64>) -> Self {
        let bar = match total {
            Some(bytes) => {
                ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::stderr_with_hz(4))
                    .with_style(
                        ProgressStyle::with_template(
                            "{bar:30} {bytes}/{total_bytes} · {msg} · ETA {eta}",
                        )
                        .expect("a valid template"),
                    )
            }
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4))
                .with_style(
                    ProgressStyle::with_template("{spinner} {bytes} read · {msg}")
                        .expect("a valid template"),
                ),
        };
        bar.set_message("0 rows");
        bar.enable_steady_tick(Duration::from_millis(250));
        Self { bar, rows: 0 }
    }

    /// Counts `bytes` more of the input read and `rows` more written.
    pub fn advance(&mut self, bytes: u64, rows: u64) {
        self.rows += rows;
        let seconds = self.bar.elapsed().as_secs_f64().max(1e-3);
        self.bar.set_message(format!(
            "{} rows · {:.0} rows/s",
            self.rows,
            self.rows as f64 / seconds
        ));
        self.bar.inc(bytes);
    }

    /// Prints `line` above the bar (a rejected line, as it is found).
    pub fn println(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Removes the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

//! Output: human tables and messages, JSON, and progress on long work.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::progress::Progress;

/// How to talk to the user.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    /// JSON on stdout.
    pub json: bool,
    /// No progress, no chatter.
    pub quiet: bool,
    /// More detail.
    pub verbose: u8,
}

impl Output {
    /// Prints one JSON value as a line. An object gets `message_type`
    /// (its `type` when it has one and no `message_type`): every line a
    /// command prints says what it is (docs/cli.md, "JSON output").
    pub fn json_line<T: Serialize>(&self, value: &T) {
        let Ok(mut v) = serde_json::to_value(value) else {
            return;
        };
        if let serde_json::Value::Object(map) = &mut v {
            if !map.contains_key("message_type") {
                if let Some(t) = map.get("type").cloned() {
                    map.insert("message_type".into(), t);
                }
            }
        }
        if let Ok(s) = serde_json::to_string(&v) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{s}");
        }
    }

    /// Prints a human line (not in JSON or quiet mode).
    pub fn say(&self, line: impl AsRef<str>) {
        if !self.json && !self.quiet {
            println!("{}", line.as_ref());
        }
    }

    /// Starts showing progress until the returned reporter is finished.
    pub fn progress(&self, what: &'static str, progress: Arc<Progress>) -> Reporter {
        let stop = Arc::new(AtomicBool::new(false));
        let mode = if self.json {
            Some(true)
        } else if !self.quiet && std::io::stderr().is_terminal() {
            Some(false)
        } else {
            None
        };
        let handle = mode.map(|json| {
            let stop = stop.clone();
            std::thread::spawn(move || report_loop(what, progress, stop, json))
        });
        Reporter { stop, handle }
    }
}

/// A running progress display.
pub struct Reporter {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Reporter {
    /// Stops and clears the display.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[derive(Serialize)]
struct ProgressLine {
    message_type: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    action: &'static str,
    elapsed_s: f64,
    files_done: u64,
    files_total: u64,
    bytes_done: u64,
    bytes_total: u64,
    bytes_added: u64,
    warnings: u64,
}

/// The bar's look while the total is unknown: what is done and the rate.
const COUNTING: &str =
    "{spinner} {elapsed_precise} {prefix}: {binary_bytes} ({binary_bytes_per_sec}){msg}";
/// Once the total is known: a bar, done of total, rate and time left.
const BAR: &str =
    "{spinner} {elapsed_precise} {prefix}: [{bar:30}] {binary_bytes}/{binary_total_bytes} \
                   ({binary_bytes_per_sec}, {eta} left){msg}";

fn style(template: &str) -> indicatif::ProgressStyle {
    indicatif::ProgressStyle::with_template(template)
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner())
}

fn report_loop(what: &'static str, p: Arc<Progress>, stop: Arc<AtomicBool>, json: bool) {
    let started = Instant::now();
    let bar = (!json).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(style(COUNTING));
        bar.set_prefix(what);
        bar
    });
    let mut has_total = false;
    let mut last_json = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let line = ProgressLine {
            message_type: "status",
            kind: "progress",
            action: what,
            elapsed_s: started.elapsed().as_secs_f64(),
            files_done: Progress::get(&p.files_done),
            files_total: Progress::get(&p.files_total),
            bytes_done: Progress::get(&p.bytes_done),
            bytes_total: Progress::get(&p.bytes_total),
            bytes_added: Progress::get(&p.bytes_added),
            warnings: Progress::get(&p.warnings),
        };
        match &bar {
            Some(bar) => {
                if line.bytes_total > 0 {
                    if !has_total {
                        bar.set_style(style(BAR));
                        has_total = true;
                    }
                    bar.set_length(line.bytes_total);
                }
                bar.set_position(line.bytes_done);
                let mut msg = if line.files_total > 0 {
                    format!(", {} of {} files", line.files_done, line.files_total)
                } else {
                    format!(", {} files", line.files_done)
                };
                if line.bytes_added > 0 {
                    msg.push_str(&format!(
                        ", {} new",
                        crate::util::human_bytes(line.bytes_added)
                    ));
                }
                if line.warnings > 0 {
                    msg.push_str(&format!(", {} warnings", line.warnings));
                }
                bar.set_message(msg);
                bar.tick();
            }
            None => {
                if last_json.elapsed() >= Duration::from_secs(1) {
                    last_json = Instant::now();
                    if let Ok(s) = serde_json::to_string(&line) {
                        let _ = writeln!(std::io::stdout().lock(), "{s}");
                    }
                }
            }
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn progress_templates_parse() {
        // A template indicatif refuses would fall back to a bare spinner.
        for t in [super::COUNTING, super::BAR] {
            assert!(indicatif::ProgressStyle::with_template(t).is_ok(), "{t}");
        }
    }
}

//! Protection reports: what a period (a day, an ISO week, a month) did for
//! each plan, folded from the event log up to the period's end, so the same
//! period always gives the same report.
//!
//! * [`period`]: the periods' boundaries (UTC).
//! * [`model`]: the report, built by [`build`] from the log's envelopes.
//! * [`render`]: JSON, CSV and a self-contained HTML page with SVG charts.
//! * [`pdf`]: the HTML printed by headless Chromium.

pub mod model;
pub mod pdf;
pub mod period;
pub mod render;

pub use model::{build, Report, Scope, REPORT_FORMAT};
pub use period::{parse_instant, Period, PeriodKind};

use crate::clock::unix_ns_to_utc;

/// What can go wrong making a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The period or instant asked for is not one (a request's fault).
    #[error("{0}")]
    BadPeriod(String),
    /// A renderer failed (a bug).
    #[error("the report could not be rendered as {what}: {message}")]
    Render {
        /// The format.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// Printing to PDF needs Chromium, which is not there.
    #[error("PDF reports need headless Chromium, not found at {path}: install it (Debian: apt-get install chromium) or set [reports] chromium in the configuration")]
    NoChromium {
        /// Where it was looked for.
        path: String,
    },
    /// Chromium ran but did not print.
    #[error("Chromium could not print the report: {0}")]
    Print(String),
}

/// A report's formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `application/json`.
    Json,
    /// `text/csv`: the plans' table.
    Csv,
    /// `text/html`: the page with charts.
    Html,
    /// `application/pdf`: the page, printed.
    Pdf,
}

impl Format {
    /// Its media type.
    pub fn content_type(&self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Html => "text/html; charset=utf-8",
            Format::Pdf => "application/pdf",
        }
    }

    /// Its file extension.
    pub fn extension(&self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Csv => "csv",
            Format::Html => "html",
            Format::Pdf => "pdf",
        }
    }

    /// Parses `json`, `csv`, `html` or `pdf`.
    pub fn parse(s: &str) -> Result<Format, ReportError> {
        match s {
            "json" => Ok(Format::Json),
            "csv" => Ok(Format::Csv),
            "html" => Ok(Format::Html),
            "pdf" => Ok(Format::Pdf),
            other => Err(ReportError::BadPeriod(format!(
                "unknown format {other:?}: json, csv, html or pdf"
            ))),
        }
    }
}

/// A report's file name: `vouch-report-daily-2026-12-06-installation.html`.
pub fn file_name(report: &Report, format: Format) -> String {
    format!(
        "vouch-report-{}-{}-{}.{}",
        report.period.kind,
        report.period.label,
        report.scope.name(),
        format.extension()
    )
}

/// Nanoseconds since the epoch as RFC 3339 in UTC, to the second when
/// whole (`2026-12-06T00:00:00Z`), else with nanoseconds.
pub fn rfc3339(unix_ns: i64) -> String {
    let t = unix_ns_to_utc(unix_ns);
    let d = t.date();
    let base = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        d.year(),
        u8::from(d.month()),
        d.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    match t.nanosecond() {
        0 => format!("{base}Z"),
        n => format!("{base}.{n:09}Z"),
    }
}

/// Renders `report` as `format` (PDF through Chromium at `chromium`, on
/// the calling thread: call it off the actor threads).
pub fn render(
    report: &Report,
    format: Format,
    chromium: &std::path::Path,
) -> Result<Vec<u8>, ReportError> {
    match format {
        Format::Json => render::json(report),
        Format::Csv => Ok(render::csv(report)),
        Format::Html => Ok(render::html(report)),
        Format::Pdf => pdf::print(&render::html(report), chromium),
    }
}

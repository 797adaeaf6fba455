//! A report as JSON, CSV and a self-contained HTML page with inline SVG
//! charts (no script, no external reference: it prints to PDF as is).
//! Every renderer is a pure function of the report: the same report gives
//! the same bytes.

use std::fmt::Write as _;

use super::model::{Bucket, PlanLine, Report};
use super::ReportError;

/// The report as pretty JSON (fields in declaration order).
pub fn json(report: &Report) -> Result<Vec<u8>, ReportError> {
    let mut out = serde_json::to_vec_pretty(report).map_err(|e| ReportError::Render {
        what: "json",
        message: e.to_string(),
    })?;
    out.push(b'\n');
    Ok(out)
}

/// The CSV columns, in order.
pub const CSV_COLUMNS: &[&str] = &[
    "period",
    "label",
    "start",
    "end",
    "plan",
    "source",
    "repository",
    "removed",
    "rpo_seconds",
    "protection_at_end",
    "points_made",
    "points_made_recoverable",
    "points_made_restore_tested",
    "points_recoverable_at_end",
    "existed_seconds",
    "rpo_met",
    "rpo_missed_seconds",
    "rpo_longest_miss_seconds",
    "backups_failed",
    "restore_tests_passed",
    "restore_tests_failed",
    "restore_tests_complete",
    "verifications_failed",
    "anomalies",
    "stored_bytes_at_start",
    "stored_bytes_at_end",
    "newest_point_bytes",
];

/// One CSV field: quoted when it holds a comma, a quote or a line break;
/// a text that a spreadsheet would run as a formula (`=`, `+`, `-`, `@`,
/// tab, carriage return first) gets a leading `'`.
fn field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

fn plan_row(r: &Report, l: &PlanLine) -> Vec<String> {
    vec![
        r.period.kind.clone(),
        r.period.label.clone(),
        r.period.start.clone(),
        r.period.end.clone(),
        l.plan.clone(),
        l.source.clone(),
        l.repository.clone(),
        l.removed.to_string(),
        l.rpo_seconds.to_string(),
        l.protection_at_end.clone(),
        l.points_made.to_string(),
        l.points_made_recoverable.to_string(),
        l.points_made_restore_tested.to_string(),
        l.points_recoverable_at_end.to_string(),
        l.existed_seconds.to_string(),
        l.rpo_met.to_string(),
        l.rpo_missed_seconds.to_string(),
        l.rpo_longest_miss_seconds.to_string(),
        l.backups_failed.to_string(),
        l.restore_tests_passed.to_string(),
        l.restore_tests_failed.to_string(),
        l.restore_tests_complete.to_string(),
        l.verifications_failed.to_string(),
        l.anomalies.to_string(),
        l.stored_bytes_at_start.to_string(),
        l.stored_bytes_at_end.to_string(),
        l.newest_point_bytes
            .map(|b| b.to_string())
            .unwrap_or_default(),
    ]
}

/// The report's plans as CSV (RFC 4180, CRLF line ends): a header of
/// [`CSV_COLUMNS`], then one row per plan, in the order of the JSON's
/// `plans`. The lists (failures, restore tests, anomalies) are in the JSON
/// and the HTML.
pub fn csv(report: &Report) -> Vec<u8> {
    let mut out = String::new();
    out.push_str(&CSV_COLUMNS.join(","));
    out.push_str("\r\n");
    for l in &report.plans {
        let row: Vec<String> = plan_row(report, l).iter().map(|f| field(f)).collect();
        out.push_str(&row.join(","));
        out.push_str("\r\n");
    }
    out.into_bytes()
}

/// Escapes text for HTML (element content and quoted attributes).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Bytes for humans (binary units).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Seconds for humans: `2h 5m`, `40s`.
pub fn human_secs(s: u64) -> String {
    let (d, h, m, sec) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{sec}s"),
        (0, 0, _) => format!("{m}m {sec}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

const CHART_W: u32 = 720;
const CHART_H: u32 = 180;
const PAD: u32 = 30;

/// A bar chart of points made (and failures, red, beside them) per bucket.
fn activity_chart(series: &[Bucket]) -> String {
    let max = series
        .iter()
        .map(|b| b.points_made.max(b.failures))
        .max()
        .unwrap_or(0)
        .max(1);
    let n = series.len().max(1) as u32;
    let slot = (CHART_W - 2 * PAD) / n;
    let bar = (slot / 2).max(1);
    let plot_h = CHART_H - 2 * PAD;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"chart\" role=\"img\" aria-label=\"Points made and failures\" width=\"{CHART_W}\" height=\"{CHART_H}\" viewBox=\"0 0 {CHART_W} {CHART_H}\">"
    );
    let _ = write!(
        s,
        "<line x1=\"{PAD}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"#888\"/>",
        y = CHART_H - PAD,
        x2 = CHART_W - PAD
    );
    let _ = write!(
        s,
        "<text x=\"4\" y=\"{}\" font-size=\"10\">{max}</text><text x=\"4\" y=\"{}\" font-size=\"10\">0</text>",
        PAD + 4,
        CHART_H - PAD
    );
    for (i, b) in series.iter().enumerate() {
        let x = PAD + i as u32 * slot;
        let h = |v: u64| (v.min(max) * u64::from(plot_h) / max) as u32;
        let (hp, hf) = (h(b.points_made), h(b.failures));
        let _ = write!(
            s,
            "<rect class=\"made\" x=\"{x}\" y=\"{}\" width=\"{bar}\" height=\"{hp}\" fill=\"#2e7d32\"><title>{}: {} point(s)</title></rect>",
            CHART_H - PAD - hp,
            esc(&b.start),
            b.points_made
        );
        let _ = write!(
            s,
            "<rect class=\"failed\" x=\"{}\" y=\"{}\" width=\"{bar}\" height=\"{hf}\" fill=\"#c62828\"><title>{}: {} failure(s)</title></rect>",
            x + bar,
            CHART_H - PAD - hf,
            esc(&b.start),
            b.failures
        );
    }
    if let (Some(first), Some(last)) = (series.first(), series.last()) {
        let _ = write!(
            s,
            "<text x=\"{PAD}\" y=\"{}\" font-size=\"10\">{}</text><text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            CHART_H - 8,
            esc(&first.start),
            CHART_W - PAD,
            CHART_H - 8,
            esc(&last.start)
        );
    }
    s.push_str("</svg>");
    s
}

/// A step line of the bytes written by backups, cumulative over the
/// period, from `start_bytes`.
fn storage_chart(series: &[Bucket], start_bytes: u64) -> String {
    let mut cum = Vec::with_capacity(series.len() + 1);
    let mut total = start_bytes;
    cum.push(total);
    for b in series {
        total = total.saturating_add(b.stored_bytes);
        cum.push(total);
    }
    let max = total.max(1);
    let n = series.len().max(1) as u64;
    let plot_w = u64::from(CHART_W - 2 * PAD);
    let plot_h = u64::from(CHART_H - 2 * PAD);
    let point = |i: usize, v: u64| {
        let x = u64::from(PAD) + i as u64 * plot_w / n;
        let y = u64::from(CHART_H - PAD) - (v as u128 * plot_h as u128 / max as u128) as u64;
        format!("{x},{y}")
    };
    let pts: Vec<String> = cum.iter().enumerate().map(|(i, v)| point(i, *v)).collect();
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"chart\" role=\"img\" aria-label=\"Bytes stored by backups\" width=\"{CHART_W}\" height=\"{CHART_H}\" viewBox=\"0 0 {CHART_W} {CHART_H}\">"
    );
    let _ = write!(
        s,
        "<line x1=\"{PAD}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"#888\"/>",
        y = CHART_H - PAD,
        x2 = CHART_W - PAD
    );
    let _ = write!(
        s,
        "<polyline fill=\"none\" stroke=\"#1565c0\" stroke-width=\"2\" points=\"{}\"/>",
        pts.join(" ")
    );
    let _ = write!(
        s,
        "<text x=\"4\" y=\"{}\" font-size=\"10\">{}</text><text x=\"4\" y=\"{}\" font-size=\"10\">0</text>",
        PAD - 6,
        esc(&human_bytes(max)),
        CHART_H - PAD + 12
    );
    s.push_str("</svg>");
    s
}

/// Per plan, the share of the period the plan did not exist (grey), the
/// RPO held (green) and did not (red).
fn rpo_chart(plans: &[PlanLine], period_secs: u64) -> String {
    let row_h = 22u32;
    let label_w = 160u32;
    let h = row_h * plans.len().max(1) as u32 + 10;
    let w = CHART_W - label_w - 10;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"chart\" role=\"img\" aria-label=\"RPO met per plan\" width=\"{CHART_W}\" height=\"{h}\" viewBox=\"0 0 {CHART_W} {h}\">"
    );
    for (i, l) in plans.iter().enumerate() {
        let y = 5 + i as u32 * row_h;
        let total = period_secs.max(1);
        let scale = |v: u64| (v.min(total) * u64::from(w) / total) as u32;
        let existed = scale(l.existed_seconds);
        let red = scale(l.rpo_missed_seconds).min(existed);
        let _ = write!(
            s,
            "<text x=\"0\" y=\"{}\" font-size=\"11\">{}</text><rect x=\"{label_w}\" y=\"{y}\" width=\"{w}\" height=\"16\" fill=\"#cfcfcf\"><title>did not exist</title></rect><rect x=\"{}\" y=\"{y}\" width=\"{existed}\" height=\"16\" fill=\"#2e7d32\"><title>existed {}</title></rect><rect x=\"{}\" y=\"{y}\" width=\"{red}\" height=\"16\" fill=\"#c62828\"><title>missed {}</title></rect>",
            y + 12,
            esc(&l.plan),
            label_w + w - existed,
            esc(&human_secs(l.existed_seconds)),
            label_w + w - red,
            esc(&human_secs(l.rpo_missed_seconds))
        );
    }
    s.push_str("</svg>");
    s
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:12px}\
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}\
th{background:#f0f0f0}.bad{color:#c62828;font-weight:bold}.good{color:#2e7d32}\
.unknown{color:#8d6e00}.warn{color:#8a5100;font-weight:bold}code{font-size:11px}h1{font-size:20px}h2{font-size:16px;margin-top:1.5em}";

fn status_class(status: &str) -> &'static str {
    match status {
        "protected" => "good",
        "unprotected" | "removed" => "bad",
        _ => "unknown",
    }
}

/// The report as one self-contained HTML page: inline CSS and SVG, no
/// script, no image, font or link to fetch.
pub fn html(r: &Report) -> Vec<u8> {
    let mut s = String::new();
    let title = format!(
        "Vouch protection report, {} {} ({})",
        r.period.kind,
        r.period.label,
        r.scope.name()
    );
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(&title)
    );
    let _ = writeln!(
        s,
        "<p>From {} to {} (UTC). Folded from the event log up to seq {} (hash <code>{}</code>); {} event(s) in the period.</p>",
        esc(&r.period.start),
        esc(&r.period.end),
        r.log.last_seq,
        esc(&r.log.last_hash),
        r.log.events_in_period
    );
    let t = &r.totals;
    s.push_str("<h2>Summary</h2>\n<table>");
    for (k, v) in [
        ("Plans", t.plans.to_string()),
        (
            "Plans that met their RPO all period",
            format!("{} of {}", t.plans_rpo_met, t.plans),
        ),
        ("Points made", t.points_made.to_string()),
        (
            "Of which recoverable at the end",
            t.points_made_recoverable.to_string(),
        ),
        ("Failures", t.failures.to_string()),
        ("Backups failed", t.backups_failed.to_string()),
        (
            "Restore tests passed / failed",
            format!("{} / {}", t.restore_tests_passed, t.restore_tests_failed),
        ),
        ("Verifications failed", t.verifications_failed.to_string()),
        ("Anomalies (ransomware heuristic)", t.anomalies.to_string()),
        (
            "Stored by backups (start, end, growth)",
            format!(
                "{}, {}, +{}",
                human_bytes(t.stored_bytes_at_start),
                human_bytes(t.stored_bytes_at_end),
                human_bytes(
                    t.stored_bytes_at_end
                        .saturating_sub(t.stored_bytes_at_start)
                )
            ),
        ),
    ] {
        let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    s.push_str("</table>\n");
    s.push_str("<h2>Activity</h2>\n<p>Points made (green) and failures (red) per ");
    s.push_str(if r.period.kind == "daily" {
        "hour"
    } else {
        "day"
    });
    s.push_str(".</p>\n");
    s.push_str(&activity_chart(&r.series));
    s.push_str("\n<h2>Plans</h2>\n");
    let period_secs = r.series.len() as u64
        * if r.period.kind == "daily" {
            3_600
        } else {
            86_400
        };
    if !r.plans.is_empty() {
        s.push_str(
            "<p>Share of the period each plan met its RPO (green), missed it (red) and did not exist (grey); a plan removed in the period is drawn as if it had existed until the end.</p>\n",
        );
        s.push_str(&rpo_chart(&r.plans, period_secs));
    }
    s.push_str("\n<table><tr><th>Plan</th><th>Source</th><th>Protection at the end</th><th>RPO</th><th>RPO missed (longest)</th><th>Points made</th><th>Recoverable</th><th>Restore-tested</th><th>Backups failed</th><th>Restore tests passed / failed (complete)</th><th>Anomalies</th><th>Stored (growth)</th></tr>");
    for l in &r.plans {
        let _ = write!(
            s,
            "<tr><td>{}</td><td><code>{}</code></td><td class=\"{}\" title=\"{}\">{}</td><td>{}</td><td class=\"{}\">{} ({})</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} / {} ({})</td><td>{}</td><td>{} (+{})</td></tr>",
            esc(&l.plan),
            esc(&l.source),
            status_class(&l.protection_at_end),
            esc(&l.protection_reason),
            esc(&l.protection_at_end),
            esc(&human_secs(l.rpo_seconds)),
            if l.rpo_met { "good" } else { "bad" },
            esc(&human_secs(l.rpo_missed_seconds)),
            esc(&human_secs(l.rpo_longest_miss_seconds)),
            l.points_made,
            l.points_made_recoverable,
            l.points_made_restore_tested,
            l.backups_failed,
            l.restore_tests_passed,
            l.restore_tests_failed,
            l.restore_tests_complete,
            l.anomalies,
            esc(&human_bytes(l.stored_bytes_at_end)),
            esc(&human_bytes(l.stored_bytes_at_end.saturating_sub(l.stored_bytes_at_start)))
        );
    }
    s.push_str("</table>\n<h2>Storage</h2>\n<p>Bytes written to the repositories by backups (after compression and encryption), cumulative; space freed by prune is not in the log and not subtracted.</p>\n");
    s.push_str(&storage_chart(&r.series, t.stored_bytes_at_start));
    s.push_str("\n<h2>Failures</h2>\n");
    if r.failures.is_empty() {
        s.push_str("<p>None.</p>\n");
    } else {
        s.push_str("<table><tr><th>When</th><th>What</th><th>Plan</th><th>Point</th><th>Kind</th><th>Reason</th></tr>");
        for f in &r.failures {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&f.at),
                esc(&f.what),
                esc(f.plan.as_deref().unwrap_or("")),
                esc(f.point.as_deref().map_or("", |p| p.get(..12).unwrap_or(p))),
                esc(&f.kind),
                esc(&f.reason)
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str("<h2>Restore tests</h2>\n");
    if r.restore_tests.is_empty() {
        s.push_str("<p>None in the period.</p>\n");
    } else {
        s.push_str("<table><tr><th>When</th><th>Plan</th><th>Point</th><th>Result</th><th>Files restored (of)</th><th>Digests matched</th><th>Coverage</th></tr>");
        for t in &r.restore_tests {
            let coverage = match (t.complete, t.coverage_permille) {
                (true, _) => "complete".to_owned(),
                (false, Some(p)) => format!("sample, {}.{}%", p / 10, p % 10),
                (false, None) => "sample, unknown share".to_owned(),
            };
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td class=\"{}\">{}</td><td>{} ({})</td><td>{} of {}</td><td>{}</td></tr>",
                esc(&t.at),
                esc(t.plan.as_deref().unwrap_or("")),
                esc(t.point.get(..12).unwrap_or(&t.point)),
                if t.passed { "good" } else { "bad" },
                if t.passed { "passed".to_owned() } else { format!("failed: {}", esc(t.reason.as_deref().unwrap_or(""))) },
                t.files,
                t.files_in_point.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                t.digests_matched,
                t.digests_compared,
                esc(&coverage)
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str("<h2>Anomalies</h2>\n");
    if r.anomalies.is_empty() {
        s.push_str("<p>The ransomware heuristic flagged no point in the period.</p>\n");
    } else {
        s.push_str("<table><tr><th>When</th><th>Plan</th><th>Point</th><th>Signals</th><th>Paths that weighed most</th></tr>");
        for a in &r.anomalies {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
                esc(&a.at),
                esc(a.plan.as_deref().unwrap_or("")),
                esc(a.point.get(..12).unwrap_or(&a.point)),
                esc(&a.signals.join(", ")),
                esc(&a.paths.join(", "))
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str("<h2>Security center</h2>\n");
    let sec = &r.security;
    let count = |k: &str| sec.counts.get(k).copied().unwrap_or(0);
    if sec.counts.values().all(|&n| n == 0) {
        s.push_str("<p class=\"unknown\">No security check was recorded by the period's end: the state is unknown.</p>\n");
    } else {
        let _ = writeln!(
            s,
            "<p>At the period's end: {} failed, {} warning, {} unknown, {} ok.</p>",
            count("failed"),
            count("warning"),
            count("unknown"),
            count("ok")
        );
    }
    if !sec.not_ok.is_empty() {
        s.push_str("<table><tr><th>Check</th><th>Status</th><th>Why</th><th>What to do</th><th>Since</th></tr>");
        for c in &sec.not_ok {
            let class = match c.status.as_str() {
                "failed" => "bad",
                "warning" => "warn",
                _ => "unknown",
            };
            let _ = write!(
                s,
                "<tr><td><code>{}</code></td><td class=\"{class}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.check),
                esc(&c.status),
                esc(&c.reason),
                esc(&c.action),
                esc(&c.since)
            );
        }
        s.push_str("</table>\n");
    }
    if !sec.changes.is_empty() {
        s.push_str("<h3>Changes in the period</h3>\n<table><tr><th>When</th><th>Check</th><th>Became</th><th>Why</th></tr>");
        for c in &sec.changes {
            let _ = write!(
                s,
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&c.at),
                esc(&c.check),
                esc(&c.status),
                esc(&c.reason)
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str("</body></html>\n");
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_and_defused() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("=cmd()"), "'=cmd()");
        assert_eq!(field("-1+1"), "'-1+1");
    }

    #[test]
    fn html_text_is_escaped() {
        assert_eq!(
            esc("<a href='x'>&</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;"
        );
    }

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_secs(40), "40s");
        assert_eq!(human_secs(7_500), "2h 5m");
        assert_eq!(human_secs(90_000), "1d 1h");
    }
}

//! Periodic reports (`[reports]` of the configuration): at each period's
//! end (plus [`SETTLE`]), each configured delivery's report is made from
//! the log and sent to its targets (webhook receivers, e-mail), and each
//! success is recorded as `report.delivered`, each failed attempt as
//! `report.delivery_failed`. What was delivered is read back from the log,
//! so a restart sends nothing twice, and a period missed while the service
//! was down is sent once when it is back (up to [`MAX_CATCH_UP`] periods
//! per delivery). A failed attempt is retried with a doubling delay.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use vouch_events::{Event, ReportDelivered, ReportDeliveryFailed};

use super::alerting::Receiver;
use super::handle::ServiceHandle;
use super::webhook;
use crate::clock::duration_to_ns;
use crate::report::{self, Format, Period, PeriodKind, Report, Scope};

/// How long after a period's end its report is made: events recorded just
/// before the end may still be on their way to the disk (the API waits as
/// long).
pub const SETTLE: Duration = Duration::from_secs(60);
/// At most this many missed periods of one delivery are sent after a
/// downtime (the newest ones).
pub const MAX_CATCH_UP: usize = 31;
/// Attempts of an e-mail before giving up until the next start.
pub const EMAIL_ATTEMPTS: u32 = 8;
/// The longest delay between two attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// One message of a report, as an e-mail carries it.
#[derive(Clone, Debug)]
pub struct Mail {
    /// The subject line.
    pub subject: String,
    /// A plain-text summary.
    pub text: String,
    /// The HTML report (the body's alternative to the text).
    pub html: Vec<u8>,
    /// Attachments: file name, media type, bytes.
    pub attachments: Vec<(String, &'static str, Vec<u8>)>,
}

/// Sends e-mail (SMTP, implemented by the binary). Called off the actor
/// threads; blocking is fine.
pub trait Mailer: Send + Sync + std::fmt::Debug {
    /// Sends `mail` to `to`; the error is for humans (never a password).
    fn send(&self, to: &[String], mail: &Mail) -> Result<(), String>;
}

/// Where a delivery goes.
#[derive(Clone, Debug)]
pub enum Target {
    /// POST the report's JSON to a `[[webhooks]]` receiver.
    Webhook(Receiver),
    /// Mail the report (HTML inline, `formats` attached).
    Email {
        /// Recipients.
        to: Vec<String>,
        /// The SMTP client.
        mailer: Arc<dyn Mailer>,
    },
}

impl Target {
    /// Its name in events: `webhook:<receiver>` or `email`.
    pub fn name(&self) -> String {
        match self {
            Target::Webhook(r) => format!("webhook:{}", r.name),
            Target::Email { .. } => "email".into(),
        }
    }

    fn attempts(&self) -> u32 {
        match self {
            Target::Webhook(r) => r.max_attempts.max(1),
            Target::Email { .. } => EMAIL_ATTEMPTS,
        }
    }

    fn first_delay(&self) -> Duration {
        match self {
            Target::Webhook(r) => r.retry_initial,
            Target::Email { .. } => Duration::from_secs(30),
        }
    }
}

/// One configured delivery.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Its name (in events).
    pub name: String,
    /// Which periods.
    pub period: PeriodKind,
    /// Which plans.
    pub scope: Scope,
    /// Where to.
    pub targets: Vec<Target>,
    /// What an e-mail attaches (besides the HTML inline).
    pub attach: Vec<Format>,
}

/// The reporter's configuration.
#[derive(Clone, Debug)]
pub struct ReportsConfig {
    /// The deliveries.
    pub deliveries: Vec<Delivery>,
    /// How often due reports are looked for (the clock decides; this is a
    /// wake-up).
    pub check_every: Duration,
    /// The Chromium of PDF attachments.
    pub chromium: std::path::PathBuf,
    /// How long after a period's end its report is made.
    pub settle: Duration,
}

/// The periods of `kind` a target should have now, oldest first: the
/// newest ended one (by `settle` before `now`); when the target had any
/// delivered before (`delivered` non-empty), also the ones since the newest
/// delivered, at most [`MAX_CATCH_UP`]. Those in `delivered` are left out.
pub fn due_periods(
    kind: PeriodKind,
    now_ns: i64,
    settle: Duration,
    delivered: &BTreeSet<String>,
) -> Vec<Period> {
    let newest = Period::last_ended(kind, now_ns.saturating_sub(duration_to_ns(settle)));
    let mut out = Vec::new();
    let mut p = newest;
    loop {
        if delivered.contains(&p.label()) {
            break;
        }
        out.push(p);
        if delivered.is_empty() || out.len() >= MAX_CATCH_UP {
            break;
        }
        p = p.previous();
    }
    out.reverse();
    out
}

/// What the log says was delivered, and where the reading stopped.
#[derive(Default)]
struct Delivered {
    /// (delivery, period kind, target) -> labels delivered.
    done: HashMap<(String, String, String), BTreeSet<String>>,
    next_seq: u64,
}

/// An attempt that failed, and when to try again.
struct Retry {
    attempt: u32,
    due_ns: i64,
    delay: Duration,
    given_up: bool,
}

/// Runs the deliveries until the service stops.
pub async fn run_reports(handle: ServiceHandle, config: ReportsConfig) {
    if config.deliveries.is_empty() {
        return;
    }
    tracing::info!(deliveries = config.deliveries.len(), "periodic reports on");
    let mut delivered = Delivered {
        next_seq: 1,
        ..Delivered::default()
    };
    let mut retries: BTreeMap<(String, String, String), Retry> = BTreeMap::new();
    while !handle.is_stopping() {
        if let Err(e) = read_delivered(&handle, &mut delivered).await {
            tracing::warn!(error = %e, "reports: the log could not be read; trying again later");
        } else {
            for d in &config.deliveries {
                deliver_due(&handle, &config, d, &mut delivered, &mut retries).await;
            }
        }
        actix::clock::sleep(config.check_every).await;
    }
}

async fn read_delivered(
    handle: &ServiceHandle,
    delivered: &mut Delivered,
) -> Result<(), super::ServiceError> {
    let from = delivered.next_seq;
    let (found, next) = handle
        .scan_events(from, move |it| {
            let mut found = Vec::new();
            let mut next = from;
            for env in it {
                next = env.seq + 1;
                if let Event::ReportDelivered(d) = env.event {
                    found.push(d);
                }
            }
            (found, next)
        })
        .await?;
    for d in found {
        delivered
            .done
            .entry((d.delivery, d.period, d.target))
            .or_default()
            .insert(d.label);
    }
    delivered.next_seq = next;
    Ok(())
}

async fn deliver_due(
    handle: &ServiceHandle,
    config: &ReportsConfig,
    d: &Delivery,
    delivered: &mut Delivered,
    retries: &mut BTreeMap<(String, String, String), Retry>,
) {
    let now = handle.now_unix_ns();
    let empty = BTreeSet::new();
    // Periods due for some target, each made once.
    let mut wanted: BTreeMap<Period, Vec<&Target>> = BTreeMap::new();
    for t in &d.targets {
        let key = (d.name.clone(), d.period.as_str().to_owned(), t.name());
        let done = delivered.done.get(&key).unwrap_or(&empty);
        for p in due_periods(d.period, now, config.settle, done) {
            let rkey = (d.name.clone(), p.label(), t.name());
            if retries
                .get(&rkey)
                .is_some_and(|r| r.given_up || r.due_ns > now)
            {
                continue;
            }
            wanted.entry(p).or_default().push(t);
        }
    }
    for (period, targets) in wanted {
        let made = {
            let scope = d.scope.clone();
            handle
                .scan_events(1, move |it| report::build(period, &scope, it))
                .await
        };
        let report = match made {
            Ok(Some(r)) => r,
            Ok(None) => {
                tracing::warn!(delivery = %d.name, scope = d.scope.name(), "reports: no such plan by the period's end; nothing to send");
                for t in targets {
                    let rkey = (d.name.clone(), period.label(), t.name());
                    retries.insert(
                        rkey,
                        Retry {
                            attempt: 0,
                            due_ns: i64::MAX,
                            delay: Duration::ZERO,
                            given_up: true,
                        },
                    );
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(delivery = %d.name, error = %e, "reports: the report could not be made");
                continue;
            }
        };
        let report = Arc::new(report);
        for t in targets {
            let rkey = (d.name.clone(), period.label(), t.name());
            let attempt = retries.get(&rkey).map_or(1, |r| r.attempt + 1);
            let outcome = send(t, d, &report, config, handle.now_unix_ns()).await;
            let event: Event = match &outcome {
                Ok(digest) => {
                    tracing::info!(delivery = %d.name, period = %period.label(), target = %t.name(), attempt, "report delivered");
                    retries.remove(&rkey);
                    ReportDelivered {
                        delivery: d.name.clone(),
                        period: d.period.as_str().to_owned(),
                        label: period.label(),
                        scope: d.scope.name().to_owned(),
                        target: t.name(),
                        attempt,
                        digest: digest.clone(),
                    }
                    .into()
                }
                Err(error) => {
                    let will_retry = attempt < t.attempts();
                    tracing::warn!(delivery = %d.name, period = %period.label(), target = %t.name(), attempt, will_retry, error = %error, "report delivery failed");
                    let delay = retries
                        .get(&rkey)
                        .map_or(t.first_delay(), |r| (r.delay * 2).min(MAX_RETRY_DELAY));
                    retries.insert(
                        rkey.clone(),
                        Retry {
                            attempt,
                            due_ns: now.saturating_add(duration_to_ns(delay)),
                            delay,
                            given_up: !will_retry,
                        },
                    );
                    ReportDeliveryFailed {
                        delivery: d.name.clone(),
                        period: d.period.as_str().to_owned(),
                        label: period.label(),
                        scope: d.scope.name().to_owned(),
                        target: t.name(),
                        attempt,
                        error: error.clone(),
                        will_retry,
                    }
                    .into()
                }
            };
            match handle.append(vec![event]).await {
                Ok(_) => {
                    if outcome.is_ok() {
                        delivered
                            .done
                            .entry((d.name.clone(), d.period.as_str().to_owned(), t.name()))
                            .or_default()
                            .insert(period.label());
                    }
                }
                // Not recorded: a delivered report may be sent again after
                // a restart (receivers see the same digest).
                Err(e) => {
                    tracing::error!(delivery = %d.name, error = %e, "a report delivery could not be recorded")
                }
            }
        }
    }
}

/// Sends `report` to `t`; the report's JSON digest on success.
async fn send(
    t: &Target,
    d: &Delivery,
    report: &Arc<Report>,
    config: &ReportsConfig,
    now_ns: i64,
) -> Result<String, String> {
    let json = report::render::json(report).map_err(|e| e.to_string())?;
    let digest = blake3::hash(&json).to_hex().to_string();
    match t {
        Target::Webhook(r) => {
            let client =
                webhook::client(&r.name, &r.ca_certs, r.timeout).map_err(|e| e.to_string())?;
            let headers = webhook::auth_headers(
                &r.name,
                r.auth.as_ref(),
                now_ns.div_euclid(1_000_000_000),
                &json,
            )
            .map_err(|e| e.to_string())?;
            let mut req = client
                .post(&r.url)
                .insert_header(("Content-Type", "application/json"))
                .insert_header((
                    "X-Vouch-Report",
                    format!("{}/{}", d.name, report.period.label),
                ));
            for h in headers {
                req = req.insert_header(h);
            }
            match req.send_body(json).await {
                Ok(resp) if resp.status().is_success() => Ok(digest),
                Ok(resp) => Err(format!("the receiver answered {}", resp.status())),
                Err(e) => Err(format!("could not reach the receiver: {e}")),
            }
        }
        Target::Email { to, mailer } => {
            let (to, mailer, report) = (to.clone(), mailer.clone(), report.clone());
            let attach = d.attach.clone();
            let chromium = config.chromium.clone();
            tokio::task::spawn_blocking(move || {
                let mail = mail_of(&report, &attach, &chromium)?;
                mailer.send(&to, &mail)
            })
            .await
            .map_err(|e| format!("the mail task failed: {e}"))??;
            Ok(digest)
        }
    }
}

/// The e-mail of a report: its HTML inline, a text summary, and `attach`.
pub fn mail_of(r: &Report, attach: &[Format], chromium: &std::path::Path) -> Result<Mail, String> {
    let t = &r.totals;
    let subject = format!(
        "Vouch {} report {} ({}): {} of {} plans met their RPO, {} failure(s), {} anomaly(ies)",
        r.period.kind,
        r.period.label,
        r.scope.name(),
        t.plans_rpo_met,
        t.plans,
        t.failures,
        t.anomalies
    );
    let text = format!(
        "{subject}\n\nFrom {} to {} (UTC).\nPoints made: {} ({} recoverable at the end)\n\
         Backups failed: {}\nRestore tests passed / failed: {} / {}\n\
         Verifications failed: {}\nAnomalies: {}\nStored by backups: {} -> {} bytes\n\n\
         The full report is the HTML part of this message.\n",
        r.period.start,
        r.period.end,
        t.points_made,
        t.points_made_recoverable,
        t.backups_failed,
        t.restore_tests_passed,
        t.restore_tests_failed,
        t.verifications_failed,
        t.anomalies,
        t.stored_bytes_at_start,
        t.stored_bytes_at_end
    );
    let mut attachments = Vec::new();
    for f in attach {
        let bytes = report::render(r, *f, chromium).map_err(|e| e.to_string())?;
        attachments.push((report::file_name(r, *f), f.content_type(), bytes));
    }
    Ok(Mail {
        subject,
        text,
        html: report::render::html(r),
        attachments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        report::parse_instant(s).expect("instant")
    }

    #[test]
    fn a_new_delivery_sends_only_the_newest_ended_period() {
        let due = due_periods(
            PeriodKind::Daily,
            at("2026-12-06T00:00:59Z"),
            SETTLE,
            &BTreeSet::new(),
        );
        // 59 s after midnight the day is not settled yet.
        assert_eq!(
            due.iter().map(Period::label).collect::<Vec<_>>(),
            ["2026-12-04"]
        );
        let due = due_periods(
            PeriodKind::Daily,
            at("2026-12-06T00:01:00Z"),
            SETTLE,
            &BTreeSet::new(),
        );
        assert_eq!(
            due.iter().map(Period::label).collect::<Vec<_>>(),
            ["2026-12-05"]
        );
    }

    #[test]
    fn missed_periods_are_sent_once_oldest_first() {
        let done: BTreeSet<String> = ["2026-12-02".to_owned()].into();
        let due = due_periods(PeriodKind::Daily, at("2026-12-06T12:00:00Z"), SETTLE, &done);
        assert_eq!(
            due.iter().map(Period::label).collect::<Vec<_>>(),
            ["2026-12-03", "2026-12-04", "2026-12-05"]
        );
        let done: BTreeSet<String> = ["2026-12-05".to_owned()].into();
        assert!(
            due_periods(PeriodKind::Daily, at("2026-12-06T12:00:00Z"), SETTLE, &done).is_empty()
        );
        // A long downtime sends the newest MAX_CATCH_UP.
        let done: BTreeSet<String> = ["2020-01-01".to_owned()].into();
        let due = due_periods(PeriodKind::Daily, at("2026-12-06T12:00:00Z"), SETTLE, &done);
        assert_eq!(due.len(), MAX_CATCH_UP);
        assert_eq!(due.last().map(Period::label).as_deref(), Some("2026-12-05"));
    }
}

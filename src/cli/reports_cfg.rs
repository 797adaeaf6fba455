//! The `[reports]` section of `vouch serve`'s configuration
//! (docs/operations.md, "Reports"): PDF printing, and the periodic
//! deliveries with their targets.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;
use vouch_actors::report::{Format, PeriodKind, Scope};
use vouch_actors::service::{Delivery, Mailer, Receiver, ReportsConfig, Target, SETTLE};
use vouch_events::PlanId;

use super::report_mail::{SmtpMailer, SmtpSettings};

/// `[reports]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportsSection {
    /// The Chromium that prints PDF reports (default: the first of
    /// `chromium`, `chromium-browser`, `google-chrome` on `PATH`).
    pub chromium: Option<PathBuf>,
    /// How often due deliveries are looked for (default 60s).
    pub check_every: Option<String>,
    /// `[reports.smtp]`: the relay e-mails go through.
    pub smtp: Option<SmtpSection>,
    /// `[[reports.deliveries]]`.
    #[serde(default)]
    pub deliveries: Vec<DeliverySection>,
}

/// `[reports.smtp]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSection {
    /// The relay's host name (its certificate must name it).
    pub host: String,
    /// Default 587 (submission; STARTTLS is always required; implicit TLS,
    /// port 465, is not supported).
    pub port: Option<u16>,
    /// The sender, `Vouch <vouch@example.org>`.
    pub from: String,
    /// The login, if the relay wants one.
    pub username: Option<String>,
    /// A file holding the password (never in this file, never logged).
    pub password_file: Option<PathBuf>,
    /// PEM CA certificates the relay's certificate may chain to, besides
    /// Mozilla's roots (a private CA).
    pub ca_file: Option<PathBuf>,
    /// Time per connection and command (default 30s).
    pub timeout: Option<String>,
}

/// `[[reports.deliveries]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverySection {
    /// Its name (in `report.delivered`).
    pub name: String,
    /// `daily`, `weekly` or `monthly`.
    pub period: String,
    /// Only this plan (default: the whole installation).
    pub plan: Option<String>,
    /// Names of `[[webhooks]]` receivers the report's JSON is POSTed to.
    #[serde(default)]
    pub webhooks: Vec<String>,
    /// Addresses the report is mailed to (needs `[reports.smtp]`).
    #[serde(default)]
    pub email: Vec<String>,
    /// What e-mails attach besides the HTML inline: `json`, `csv`,
    /// `html`, `pdf` (default none).
    #[serde(default)]
    pub attach: Vec<String>,
}

fn duration(s: &str, what: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(s).with_context(|| format!("{what}: {s:?} is not a duration"))
}

/// The reporter's configuration from `[reports]`; `receivers` are the
/// `[[webhooks]]`.
pub fn reports_config(
    section: &ReportsSection,
    receivers: &[Receiver],
) -> anyhow::Result<ReportsConfig> {
    let mailer: Option<Arc<dyn Mailer>> = match &section.smtp {
        None => None,
        Some(s) => {
            let password = match &s.password_file {
                Some(p) => Some(
                    std::fs::read_to_string(p)
                        .with_context(|| format!("[reports.smtp] password_file {}", p.display()))?
                        .trim_end_matches(['\n', '\r'])
                        .to_owned(),
                ),
                None => None,
            };
            let credentials = match (&s.username, password) {
                (Some(u), Some(p)) => Some((u.clone(), p)),
                (None, None) => None,
                _ => bail!("[reports.smtp]: username and password_file go together"),
            };
            let ca_pem = match &s.ca_file {
                Some(p) => Some(
                    std::fs::read(p)
                        .with_context(|| format!("[reports.smtp] ca_file {}", p.display()))?,
                ),
                None => None,
            };
            Some(Arc::new(SmtpMailer::new(SmtpSettings {
                host: s.host.clone(),
                port: s.port.unwrap_or(587),
                from: s.from.clone(),
                credentials,
                ca_pem,
                timeout: match &s.timeout {
                    Some(t) => duration(t, "[reports.smtp] timeout")?,
                    None => Duration::from_secs(30),
                },
            })?))
        }
    };
    let mut deliveries = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for d in &section.deliveries {
        if d.name.is_empty() || !names.insert(d.name.clone()) {
            bail!(
                "[[reports.deliveries]]: name {:?} is empty or used twice",
                d.name
            );
        }
        let period: PeriodKind = d
            .period
            .parse()
            .map_err(|e| anyhow::anyhow!("delivery {:?}: {e}", d.name))?;
        let mut targets = Vec::new();
        for w in &d.webhooks {
            let r = receivers
                .iter()
                .find(|r| &r.name == w)
                .with_context(|| format!("delivery {:?}: no [[webhooks]] named {w:?}", d.name))?;
            if r.format == vouch_actors::service::WebhookFormat::AlertmanagerApi {
                bail!(
                    "delivery {:?}: webhook {w:?} has format = \"alertmanager-api\", which takes alerts only; send reports to a receiver of format \"json\"",
                    d.name
                );
            }
            targets.push(Target::Webhook(r.clone()));
        }
        if !d.email.is_empty() {
            let mailer = mailer.clone().with_context(|| {
                format!(
                    "delivery {:?}: e-mail needs a [reports.smtp] section",
                    d.name
                )
            })?;
            targets.push(Target::Email {
                to: d.email.clone(),
                mailer,
            });
        }
        if targets.is_empty() {
            bail!(
                "delivery {:?}: no webhooks and no email: it would go nowhere",
                d.name
            );
        }
        let attach = d
            .attach
            .iter()
            .map(|f| Format::parse(f).map_err(|e| anyhow::anyhow!("delivery {:?}: {e}", d.name)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        deliveries.push(Delivery {
            name: d.name.clone(),
            period,
            scope: match &d.plan {
                Some(p) => Scope::Plan(PlanId::new(p.clone())),
                None => Scope::Installation,
            },
            targets,
            attach,
        });
    }
    Ok(ReportsConfig {
        deliveries,
        check_every: match &section.check_every {
            Some(s) => duration(s, "[reports] check_every")?,
            None => Duration::from_secs(60),
        },
        chromium: section
            .chromium
            .clone()
            .unwrap_or_else(vouch_actors::report::pdf::default_chromium),
        settle: SETTLE,
    })
}

//! Alertmanager's two shapes of an alert: the array its API takes in
//! (`POST /api/v2/alerts`, format `alertmanager-api`) and the labels both
//! Alertmanager formats share. Pure functions of a [`Notification`], so
//! the identity of an alert (its labels) is the same in its firing
//! message, its re-sends and its resolution, before and after a restart.

use std::collections::BTreeMap;
use std::time::Duration;

use super::alerting::{rfc3339, Notification};
use crate::clock::duration_to_ns;

/// How many evaluation intervals ahead a firing alert sent to
/// Alertmanager's API ends (`endsAt`) unless it is sent again: three
/// re-sends may be lost before Alertmanager resolves it by itself.
pub const KEEP_FOR: u32 = 4;

/// The labels Alertmanager knows an alert by: the rule's labels (as
/// `alert.raised` recorded them), `alertname` (the rule), `severity` (the
/// alert's, as raised) and `service="vouch"`. The same for the firing, the
/// re-sent and the resolved message, before and after a restart.
pub fn alertmanager_labels(n: &Notification) -> BTreeMap<String, String> {
    let mut labels = n.labels.clone();
    labels.insert("alertname".into(), n.rule.clone());
    labels.insert("severity".into(), n.severity.into());
    labels.insert("service".into(), "vouch".into());
    labels
}

/// The console's alerts page under `external_url`, for `generatorURL`:
/// without credentials (`user:password@`), query or fragment, which must
/// not travel to Alertmanager and on to its receivers; empty when no
/// `http(s)://` URL is configured.
pub fn generator_url(external_url: &str) -> String {
    let base = external_url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = base.split_once("://") else {
        return String::new();
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return String::new();
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() {
        return String::new();
    }
    format!("{scheme}://{host}{}/#/alerts", path.trim_end_matches('/'))
}

/// One alert of Alertmanager's API (`POST /api/v2/alerts` takes an array
/// of these). `endsAt`: the resolution's time for a resolved alert, else
/// [`KEEP_FOR`] × `every` after `now_ns` (the alert is re-sent every
/// `every` while it is open; Alertmanager resolves it by itself when the
/// re-sends stop).
pub fn api_alert(
    n: &Notification,
    generator_url: &str,
    now_ns: i64,
    every: Duration,
) -> serde_json::Value {
    let ends_at = match &n.ends_at {
        Some(at) => at.clone(),
        None => rfc3339(now_ns.saturating_add(duration_to_ns(every.saturating_mul(KEEP_FOR)))),
    };
    let mut alert = serde_json::json!({
        "labels": alertmanager_labels(n),
        "annotations": {"summary": n.subject, "description": n.message},
        "startsAt": n.starts_at,
        "endsAt": ends_at,
    });
    if !generator_url.is_empty() {
        alert["generatorURL"] = generator_url.into();
    }
    alert
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::alerting::{render, RenderContext, WebhookFormat};
    use vouch_events::AlertId;

    const S: i64 = 1_000_000_000;
    /// 2026-12-01T00:00:00Z.
    const T0: i64 = 1_795_996_800 * S;

    fn firing() -> Notification {
        Notification {
            alert: AlertId::new("alert-1"),
            status: "firing",
            subject: "plan p1: backup failed".into(),
            message: "the latest backup of plan p1 failed: gone".into(),
            severity: "critical",
            rule: "BackupFailed".into(),
            labels: [("plan".to_owned(), "p1".to_owned())].into(),
            starts_at: rfc3339(T0),
            ends_at: None,
        }
    }

    fn resolved(at: i64) -> Notification {
        Notification {
            status: "resolved",
            ends_at: Some(rfc3339(at)),
            ..firing()
        }
    }

    fn api(n: &Notification, now: i64) -> serde_json::Value {
        render(
            n,
            WebhookFormat::AlertmanagerApi,
            RenderContext {
                receiver: "am",
                external_url: "https://vouch.example.org/",
                now_ns: now,
                every: Duration::from_secs(30),
            },
        )
    }

    #[test]
    fn the_api_format_is_an_array_of_alerts_with_the_same_labels_firing_resent_and_resolved() {
        let first = api(&firing(), T0);
        let again = api(&firing(), T0 + 30 * S);
        let over = api(&resolved(T0 + 45 * S), T0 + 45 * S);
        for body in [&first, &again, &over] {
            let list = body.as_array().expect("an array, as /api/v2/alerts takes");
            assert_eq!(list.len(), 1);
            let keys: Vec<&String> = list[0].as_object().expect("object").keys().collect();
            assert_eq!(
                keys,
                [
                    "annotations",
                    "endsAt",
                    "generatorURL",
                    "labels",
                    "startsAt"
                ],
                "only what Alertmanager's API takes in (no status, no fingerprint)"
            );
        }
        let labels = |b: &serde_json::Value| b[0]["labels"].clone();
        assert_eq!(
            labels(&first),
            serde_json::json!({
                "alertname": "BackupFailed",
                "severity": "critical",
                "service": "vouch",
                "plan": "p1",
            })
        );
        assert_eq!(labels(&again), labels(&first));
        assert_eq!(
            labels(&over),
            labels(&first),
            "the resolution keeps the severity and the plan (was info and no labels)"
        );
        assert_eq!(over[0]["startsAt"], first[0]["startsAt"]);
        assert_eq!(first[0]["annotations"]["summary"], "plan p1: backup failed");
    }

    #[test]
    fn a_firing_alert_ends_four_intervals_ahead_and_a_resolution_at_its_own_time() {
        let at = |b: &serde_json::Value| b[0]["endsAt"].as_str().map(str::to_owned);
        assert_eq!(KEEP_FOR, 4);
        assert_eq!(at(&api(&firing(), T0)), Some(rfc3339(T0 + 4 * 30 * S)));
        // Re-sent later: the end moves with it.
        assert_eq!(
            at(&api(&firing(), T0 + 90 * S)),
            Some(rfc3339(T0 + 90 * S + 4 * 30 * S))
        );
        // Resolved: the resolution's time, whenever it is sent (a retry,
        // the echo with the next re-send).
        let r = resolved(T0 + 45 * S);
        assert_eq!(at(&api(&r, T0 + 45 * S)), Some(rfc3339(T0 + 45 * S)));
        assert_eq!(at(&api(&r, T0 + 300 * S)), Some(rfc3339(T0 + 45 * S)));
        // Other intervals scale the same way.
        let a = api_alert(&firing(), "", T0, Duration::from_secs(2));
        assert_eq!(a["endsAt"], rfc3339(T0 + 8 * S));
        assert!(
            a.get("generatorURL").is_none(),
            "no URL configured: left out"
        );
    }

    #[test]
    fn the_generator_url_carries_no_credentials_query_or_fragment() {
        assert_eq!(
            generator_url("https://vouch.example.org/"),
            "https://vouch.example.org/#/alerts"
        );
        assert_eq!(
            generator_url("https://admin:s3cret@vouch.example.org:8443/vouch/?token=abc#x"),
            "https://vouch.example.org:8443/vouch/#/alerts"
        );
        assert_eq!(
            generator_url("http://u@[::1]:8080"),
            "http://[::1]:8080/#/alerts"
        );
        assert_eq!(generator_url(""), "");
        assert_eq!(generator_url("vouch.example.org"), "");
        assert_eq!(generator_url("ftp://vouch.example.org/"), "");
        assert_eq!(generator_url("https://user:pw@/x"), "");
    }

    #[test]
    fn the_webhook_format_keeps_its_version_4_payload() {
        let body = render(
            &resolved(T0 + 45 * S),
            WebhookFormat::AlertmanagerWebhook,
            RenderContext {
                receiver: "am",
                external_url: "https://vouch.example.org/",
                now_ns: T0 + 45 * S,
                every: Duration::from_secs(30),
            },
        );
        assert_eq!(body["version"], "4");
        assert_eq!(body["receiver"], "am");
        assert_eq!(body["status"], "resolved");
        assert_eq!(body["alerts"][0]["labels"]["severity"], "critical");
        assert_eq!(body["alerts"][0]["labels"]["plan"], "p1");
    }
}

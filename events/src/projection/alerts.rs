//! Alerts: raised, delivered per receiver (once), resolved.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::{Event, Severity};
use crate::ids::AlertId;
use crate::projection::{Inconsistency, Recorded};

/// Delivery of one alert to one receiver.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// Attempts so far.
    pub attempts: u32,
    /// When it was delivered (none: not yet).
    pub delivered: Option<Recorded>,
    /// The latest failure.
    pub last_error: Option<String>,
    /// Whether another attempt was announced after the latest failure.
    pub will_retry: bool,
}

/// Everything known about one alert.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// Its id.
    pub id: AlertId,
    /// How bad.
    pub severity: Severity,
    /// What it is about.
    pub subject: String,
    /// For humans.
    pub message: String,
    /// When it was raised.
    pub raised: Recorded,
    /// When it was resolved (none: open).
    pub resolved: Option<Recorded>,
    /// Per receiver name.
    pub deliveries: BTreeMap<String, Delivery>,
}

/// Every alert.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertsProjection {
    /// By id.
    pub alerts: BTreeMap<AlertId, Alert>,
}

impl AlertsProjection {
    /// Alerts not resolved yet.
    pub fn open(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values().filter(|a| a.resolved.is_none())
    }

    pub(crate) fn apply(&mut self, at: Recorded, event: &Event) -> Option<Inconsistency> {
        let bad = |message: String| {
            Some(Inconsistency {
                at,
                event_type: event.event_type().to_owned(),
                point: None,
                message,
            })
        };
        match event {
            Event::AlertRaised(e) => {
                if self
                    .alerts
                    .get(&e.alert)
                    .is_some_and(|a| a.resolved.is_none())
                {
                    return bad(format!("alert {} raised again while open", e.alert));
                }
                self.alerts.insert(
                    e.alert.clone(),
                    Alert {
                        id: e.alert.clone(),
                        severity: e.severity,
                        subject: e.subject.clone(),
                        message: e.message.clone(),
                        raised: at,
                        resolved: None,
                        deliveries: BTreeMap::new(),
                    },
                );
                None
            }
            Event::AlertDelivered(e) => {
                let Some(a) = self.alerts.get_mut(&e.alert) else {
                    return bad(format!("alert {} delivered but never raised", e.alert));
                };
                let d = a.deliveries.entry(e.receiver.clone()).or_default();
                if d.delivered.is_some() {
                    return bad(format!(
                        "alert {} delivered twice to {}",
                        e.alert, e.receiver
                    ));
                }
                d.attempts = d.attempts.max(e.attempt);
                d.delivered = Some(at);
                d.will_retry = false;
                None
            }
            Event::AlertDeliveryFailed(e) => {
                let Some(a) = self.alerts.get_mut(&e.alert) else {
                    return bad(format!(
                        "delivery of alert {} failed but it was never raised",
                        e.alert
                    ));
                };
                let d = a.deliveries.entry(e.receiver.clone()).or_default();
                d.attempts = d.attempts.max(e.attempt);
                d.last_error = Some(e.error.clone());
                d.will_retry = e.will_retry;
                None
            }
            Event::AlertResolved(e) => match self.alerts.get_mut(&e.alert) {
                Some(a) if a.resolved.is_none() => {
                    a.resolved = Some(at);
                    None
                }
                _ => bad(format!("alert {} resolved but not open", e.alert)),
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{AlertDelivered, AlertDeliveryFailed, AlertRaised, AlertResolved};

    fn at(seq: u64) -> Recorded {
        Recorded {
            seq,
            unix_ns: seq as i64,
        }
    }

    #[test]
    fn an_alert_is_delivered_once_per_receiver_then_resolved() {
        let id = AlertId::new("a");
        let mut p = AlertsProjection::default();
        let raised: Event = AlertRaised {
            alert: id.clone(),
            severity: Severity::Warning,
            subject: "plan p1".into(),
            message: "m".into(),
            rule: "BackupFailed".into(),
            labels: Default::default(),
        }
        .into();
        assert_eq!(p.apply(at(1), &raised), None);
        let failed: Event = AlertDeliveryFailed {
            alert: id.clone(),
            receiver: "ops".into(),
            attempt: 1,
            error: "timeout".into(),
            will_retry: true,
        }
        .into();
        assert_eq!(p.apply(at(2), &failed), None);
        assert!(p.alerts[&id].deliveries["ops"].will_retry);
        let delivered: Event = AlertDelivered {
            alert: id.clone(),
            receiver: "ops".into(),
            attempt: 2,
        }
        .into();
        assert_eq!(p.apply(at(3), &delivered), None);
        let d = &p.alerts[&id].deliveries["ops"];
        assert_eq!(
            (d.attempts, d.delivered, d.will_retry),
            (2, Some(at(3)), false)
        );
        assert!(
            p.apply(at(4), &delivered).is_some(),
            "a second delivery is flagged"
        );
        assert_eq!(
            p.apply(at(5), &raised).map(|i| i.at.seq),
            Some(5),
            "raised again while open"
        );
        assert_eq!(p.open().count(), 1);
        assert_eq!(
            p.apply(at(6), &AlertResolved { alert: id.clone() }.into()),
            None
        );
        assert_eq!(p.open().count(), 0);
        assert!(p
            .apply(at(7), &AlertResolved { alert: id }.into())
            .is_some());
    }
}

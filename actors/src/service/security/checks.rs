//! The security center's checks: a pure function of the log's state (the
//! projections), the installation's facts and the time. Each check says
//! `ok`, `warning`, `failed` or `unknown`, why, and what to do; a check
//! whose facts could not be read is `unknown`, never `ok`.
//!
//! Check ids are stable (`KIND` or `KIND/SUBJECT`): the metrics, the log
//! (`security.check_changed`) and the alerts key on them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use vouch_events::{
    CheckStatus, JobKind, JobState, Plan, PointState, Projections, ReplicaRequirement, RepositoryId,
};

use super::facts::{InstallationFacts, RepositoryFacts, Retention};
use crate::clock::duration_to_ns;
use crate::service::alerting::rfc3339;
use crate::service::policy;

/// One check's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable id, `KIND` or `KIND/SUBJECT`.
    pub id: String,
    /// What it checks.
    pub kind: String,
    /// What it is about (empty: the installation).
    pub subject: String,
    /// The verdict.
    pub status: CheckStatus,
    /// Why, in words.
    pub reason: String,
    /// What to do (empty: nothing).
    pub action: String,
}

/// The thresholds of the checks.
#[derive(Clone, Debug)]
pub struct SecurityPolicy {
    /// A token unused this long is to be revoked (default 90 days).
    pub token_unused_after: Duration,
    /// More admin tokens than this is a warning (default 3).
    pub max_admins: usize,
    /// A certificate expiring within this is a warning (default 30 days).
    pub cert_warn_within: Duration,
    /// ... and within this a failure (default 7 days).
    pub cert_fail_within: Duration,
    /// The log's head must have been exported this recently (default 7
    /// days).
    pub head_export_within: Duration,
    /// An agent unseen this long is lost (the alerter's setting).
    pub agent_lost_after: Duration,
}

impl Default for SecurityPolicy {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        SecurityPolicy {
            token_unused_after: Duration::from_secs(90 * DAY),
            max_admins: 3,
            cert_warn_within: Duration::from_secs(30 * DAY),
            cert_fail_within: Duration::from_secs(7 * DAY),
            head_export_within: Duration::from_secs(7 * DAY),
            agent_lost_after: Duration::from_secs(600),
        }
    }
}

fn check(
    kind: &str,
    subject: Option<&str>,
    status: CheckStatus,
    reason: impl Into<String>,
    action: impl Into<String>,
) -> Check {
    let (id, subject) = match subject {
        Some(s) => (format!("{kind}/{s}"), s.to_owned()),
        None => (kind.to_owned(), String::new()),
    };
    Check {
        id,
        kind: kind.to_owned(),
        subject,
        status,
        reason: reason.into(),
        action: action.into(),
    }
}

/// How long ago, to the minute (a reason that changed every second would
/// be recorded every evaluation); under a minute says so, not `0s`.
pub(crate) fn ago(now_ns: i64, then_ns: i64) -> String {
    let secs = u64::try_from(now_ns.saturating_sub(then_ns) / 1_000_000_000).unwrap_or(0);
    if secs < 60 {
        return "less than a minute".into();
    }
    humantime::format_duration(Duration::from_secs(secs - secs % 60)).to_string()
}

fn when(unix_ns: i64) -> String {
    rfc3339(unix_ns)
}

/// Every check, in a stable order (by kind, then subject).
pub fn evaluate(
    p: &Projections,
    facts: Option<&InstallationFacts>,
    now_ns: i64,
    policy: &SecurityPolicy,
) -> Vec<Check> {
    let mut out = Vec::new();
    match facts {
        Some(f) => {
            for r in &f.repositories {
                out.push(encryption(r));
                out.push(key_location(r));
                out.push(key_export(p, r));
            }
            out.extend(listeners(f, now_ns, policy));
            out.extend(tokens(f, now_ns, policy));
            out.push(log_chain(p, f, now_ns));
            out.push(head_export(p, f, now_ns, policy));
            for r in &f.repositories {
                out.push(read_back(p, f, r, now_ns));
            }
            for plan in policy::active_plans(p) {
                out.push(immutability(p, f, plan));
            }
        }
        None => out.push(check(
            "installation",
            None,
            CheckStatus::Unknown,
            "the installation's facts (repositories, listeners, tokens) have not been gathered yet",
            "wait for the first evaluation, or see the service's log if this stays",
        )),
    }
    out.push(agent_credentials(facts));
    for plan in policy::active_plans(p) {
        out.push(restore_tests(p, plan, now_ns));
        out.push(copies(p, facts, plan, now_ns));
    }
    out.push(open_damage(p));
    out.extend(agents(p, facts, now_ns, policy));
    out.push(server_version(facts));
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

fn encryption(r: &RepositoryFacts) -> Check {
    let subject = Some(r.id.as_str());
    match &r.encryption {
        Ok(cipher) => check(
            "encryption",
            subject,
            CheckStatus::Ok,
            format!(
                "repository {} ({}) seals every file with {cipher}; its master key is wrapped with Argon2id by the passphrase",
                r.id, r.location
            ),
            "",
        ),
        Err(why) => check(
            "encryption",
            subject,
            CheckStatus::Unknown,
            format!("the configuration of repository {} could not be read: {why}", r.id),
            "check that the repository is reachable (`vouch verify`)",
        ),
    }
}

fn key_location(r: &RepositoryFacts) -> Check {
    let subject = Some(r.id.as_str());
    let k = match &r.key {
        Ok(k) => k,
        Err(why) => {
            return check(
                "key-location",
                subject,
                CheckStatus::Unknown,
                format!(
                    "where the passphrase of repository {} lives could not be told: {why}",
                    r.id
                ),
                "check the repository's passphrase_file",
            )
        }
    };
    if k.inside_repository {
        return check(
            "key-location",
            subject,
            CheckStatus::Failed,
            format!(
                "the passphrase of repository {} ({}) is inside the repository: whoever copies the repository can read it",
                r.id, k.file
            ),
            "move the passphrase file out of the repository, onto another disk, and keep a key export away from this machine",
        );
    }
    if k.readable_by_others {
        return check(
            "key-location",
            subject,
            CheckStatus::Failed,
            format!(
                "the passphrase file {} of repository {} is readable by other users",
                k.file, r.id
            ),
            format!("chmod 600 {}", k.file),
        );
    }
    match k.same_disk {
        Some(true) => check(
            "key-location",
            subject,
            CheckStatus::Warning,
            format!(
                "the passphrase of repository {} ({}) is on the same disk as the repository: losing or stealing that disk loses or exposes both",
                r.id, k.file
            ),
            "keep a confirmed key export (`vouch key export`) away from this machine, or move the passphrase file to another disk",
        ),
        Some(false) => check(
            "key-location",
            subject,
            CheckStatus::Ok,
            format!("the passphrase of repository {} ({}) is on another disk than the repository", r.id, k.file),
            "",
        ),
        None if r.off_host => check(
            "key-location",
            subject,
            CheckStatus::Ok,
            format!("the passphrase of repository {} ({}) stays on this host; the repository is off-host", r.id, k.file),
            "",
        ),
        None => check(
            "key-location",
            subject,
            CheckStatus::Unknown,
            format!("whether the passphrase of repository {} shares the repository's disk could not be told", r.id),
            "check where the passphrase file and the repository are",
        ),
    }
}

fn key_export(p: &Projections, r: &RepositoryFacts) -> Check {
    let subject = Some(r.id.as_str());
    let export = p.security.key_exports.get(&r.id);
    match (&r.key_check, export) {
        (Err(why), _) => check(
            "key-export",
            subject,
            CheckStatus::Unknown,
            format!("the key of repository {} could not be read to compare with its exports: {why}", r.id),
            "check that the repository opens (`vouch verify`)",
        ),
        (Ok(_), None) => check(
            "key-export",
            subject,
            CheckStatus::Warning,
            format!(
                "no export of the key of repository {} was confirmed: if its passphrase file is lost, nobody can read its backups",
                r.id
            ),
            format!(
                "export the key (`vouch key export --paper`), store it away from this machine, and confirm it (console: Security, or POST /api/v1/security/key-exports with repository {} and the check code)",
                r.id
            ),
        ),
        (Ok(code), Some(e)) if &e.key_check == code => check(
            "key-export",
            subject,
            CheckStatus::Ok,
            format!(
                "an export of the key of repository {} was confirmed by {} at {}",
                r.id,
                e.by,
                when(e.at.unix_ns)
            ),
            "",
        ),
        (Ok(_), Some(e)) => check(
            "key-export",
            subject,
            CheckStatus::Warning,
            format!(
                "the export confirmed by {} at {} is of another key than repository {} has now",
                e.by,
                when(e.at.unix_ns),
                r.id
            ),
            "export the current key and confirm it",
        ),
    }
}

fn listeners(f: &InstallationFacts, now_ns: i64, policy: &SecurityPolicy) -> Vec<Check> {
    let now_s = now_ns / 1_000_000_000;
    f.listeners
        .iter()
        .map(|l| {
            let subject = Some(l.address.as_str());
            let Some(cert) = &l.tls else {
                return if l.loopback {
                    check(
                        "tls",
                        subject,
                        CheckStatus::Ok,
                        format!("{} is plain HTTP on loopback: only this host can reach it", l.address),
                        "",
                    )
                } else {
                    check(
                        "tls",
                        subject,
                        CheckStatus::Failed,
                        format!(
                            "{} serves plain HTTP beyond loopback (--insecure-http): tokens and file contents cross the network in clear",
                            l.address
                        ),
                        "configure [tls] with a certificate, or drop --insecure-http (Vouch then serves a self-signed certificate)",
                    )
                };
            };
            let not_after = match &cert.not_after_unix {
                Ok(t) => *t,
                Err(why) => {
                    return check(
                        "tls",
                        subject,
                        CheckStatus::Unknown,
                        format!("the certificate {} could not be read: {why}", cert.path),
                        "check the [tls] certificate file",
                    )
                }
            };
            let left = not_after.saturating_sub(now_s);
            let expiry = when(not_after.saturating_mul(1_000_000_000));
            let own = if cert.self_signed {
                " (self-signed by Vouch: clients pin its fingerprint)"
            } else {
                ""
            };
            let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if left <= 0 {
                check(
                    "tls",
                    subject,
                    CheckStatus::Failed,
                    format!("the certificate of {} expired at {expiry}{own}", l.address),
                    "install a new certificate ([tls] cert and key) and restart the service",
                )
            } else if left < secs(policy.cert_warn_within) {
                check(
                    "tls",
                    subject,
                    if left < secs(policy.cert_fail_within) {
                        CheckStatus::Failed
                    } else {
                        CheckStatus::Warning
                    },
                    format!("the certificate of {} expires at {expiry}, in {} days{own}", l.address, left / 86_400),
                    "renew the certificate before it expires",
                )
            } else {
                check(
                    "tls",
                    subject,
                    CheckStatus::Ok,
                    format!("{} serves HTTPS; its certificate is valid until {expiry}{own}", l.address),
                    "",
                )
            }
        })
        .collect()
}

fn tokens(f: &InstallationFacts, now_ns: i64, policy: &SecurityPolicy) -> Vec<Check> {
    let tokens = match &f.tokens {
        Ok(t) => t,
        Err(why) => {
            return ["tokens-admins", "tokens-unused", "tokens-expiry"]
                .into_iter()
                .map(|kind| {
                    check(
                        kind,
                        None,
                        CheckStatus::Unknown,
                        format!("the token file could not be read: {why}"),
                        "check the data directory's tokens.json",
                    )
                })
                .collect();
        }
    };
    let now_s = now_ns / 1_000_000_000;
    let live: Vec<_> = tokens
        .iter()
        .filter(|t| t.expires_unix.is_none_or(|e| e > now_s))
        .collect();
    let admins: Vec<&str> = live
        .iter()
        .filter(|t| t.role == "admin")
        .map(|t| t.name.as_str())
        .collect();
    let mut out = Vec::new();
    out.push(match admins.len() {
        0 => check(
            "tokens-admins",
            None,
            CheckStatus::Warning,
            "no valid admin token: nobody can manage tokens or repositories through the API",
            "make one on the server: `vouch token create --role admin --name NAME --expires 90d`",
        ),
        n if n > policy.max_admins => check(
            "tokens-admins",
            None,
            CheckStatus::Warning,
            format!(
                "{n} admin tokens ({}): each can delete plans and points",
                admins.join(", ")
            ),
            format!(
                "keep at most {}; give others a narrower role (`vouch token revoke NAME`)",
                policy.max_admins
            ),
        ),
        n => check(
            "tokens-admins",
            None,
            CheckStatus::Ok,
            format!("{n} admin token(s): {}", admins.join(", ")),
            "",
        ),
    });
    let unused_after = i64::try_from(policy.token_unused_after.as_secs()).unwrap_or(i64::MAX);
    let unused: Vec<String> = live
        .iter()
        .filter_map(|t| {
            let since = t.last_used_unix.or(t.created_unix)?;
            (now_s.saturating_sub(since) >= unused_after).then(|| match t.last_used_unix {
                Some(_) => format!("{} (last used {})", t.name, when(since * 1_000_000_000)),
                None => format!(
                    "{} (never used, made {})",
                    t.name,
                    when(since * 1_000_000_000)
                ),
            })
        })
        .collect();
    let days = policy.token_unused_after.as_secs() / 86_400;
    out.push(if unused.is_empty() {
        check(
            "tokens-unused",
            None,
            CheckStatus::Ok,
            format!("every valid token was used within {days} days (or is younger)"),
            "",
        )
    } else {
        check(
            "tokens-unused",
            None,
            CheckStatus::Warning,
            format!(
                "{} token(s) unused for {days} days or more: {}",
                unused.len(),
                unused.join(", ")
            ),
            "revoke what nobody uses: `vouch token revoke NAME`",
        )
    });
    let forever: Vec<&str> = live
        .iter()
        .filter(|t| t.expires_unix.is_none() && t.role != "agent")
        .map(|t| t.name.as_str())
        .collect();
    out.push(if forever.is_empty() {
        check(
            "tokens-expiry",
            None,
            CheckStatus::Ok,
            "every token but the agents' expires (agents' tokens are bound to their host and append-only)",
            "",
        )
    } else {
        check(
            "tokens-expiry",
            None,
            CheckStatus::Warning,
            format!("{} token(s) never expire: {}", forever.len(), forever.join(", ")),
            "replace them with expiring ones: `vouch token create --name NAME --role ROLE --expires 90d`, then revoke the old",
        )
    });
    out
}

fn log_chain(p: &Projections, f: &InstallationFacts, now_ns: i64) -> Check {
    let unsigned = if f.chain_key {
        ""
    } else {
        "; no chain key signs its checkpoints, so a rewrite by someone with write access to the data directory would go unnoticed"
    };
    let key_action = if f.chain_key {
        ""
    } else {
        "make a chain key (`vouch events keygen --out /etc/vouch/chain.key`) and set [log] chain_key_file"
    };
    let Some(scrub) = &p.security.last_scrub else {
        return check(
            "log-chain",
            None,
            if f.scrub_every.is_none() {
                CheckStatus::Warning
            } else {
                CheckStatus::Unknown
            },
            format!("the event log's hash chain has not been verified by a scrub yet{unsigned}"),
            if f.scrub_every.is_none() {
                "turn the scrub on ([log] scrub_every) or run `vouch events verify`".to_owned()
            } else {
                format!(
                    "wait for the first scrub (at most 15 minutes after a start){}{key_action}",
                    if key_action.is_empty() { "" } else { "; " }
                )
            },
        );
    };
    if let Some(problem) = &scrub.problem {
        return check(
            "log-chain",
            None,
            CheckStatus::Failed,
            format!("the scrub of the event log at {} found damage: {problem}", when(scrub.at.unix_ns)),
            "stop the service, keep a copy of the data directory, and see docs/operations.md (event log damage)",
        );
    }
    // Two periods and an hour: one missed scrub is late, not damage.
    let max_age = f.scrub_every.map(|e| {
        duration_to_ns(e)
            .saturating_mul(2)
            .saturating_add(3_600_000_000_000)
    });
    let stale = max_age.is_none_or(|m| now_ns.saturating_sub(scrub.at.unix_ns) > m);
    let status = if stale || !f.chain_key {
        CheckStatus::Warning
    } else {
        CheckStatus::Ok
    };
    check(
        "log-chain",
        None,
        status,
        format!(
            "the event log's hash chain verified up to seq {} at {} ({} ago){}{unsigned}",
            scrub.through_seq,
            when(scrub.at.unix_ns),
            ago(now_ns, scrub.at.unix_ns),
            if stale {
                ", longer ago than two scrub intervals"
            } else {
                ""
            }
        ),
        if stale {
            "see why the scrub did not run ([log] scrub_every, the service's log)".to_owned()
        } else {
            key_action.to_owned()
        },
    )
}

fn head_export(
    p: &Projections,
    f: &InstallationFacts,
    now_ns: i64,
    policy: &SecurityPolicy,
) -> Check {
    let action = "record the head elsewhere regularly: GET /api/v1/log/head (e.g. from a cron job on another host)";
    let Some(h) = &p.security.head_export else {
        return check(
            "log-head-export",
            None,
            CheckStatus::Warning,
            "the event log's head was never exported: a rewritten history could not be told from the true one by an outside record",
            action,
        );
    };
    let fresh = now_ns.saturating_sub(h.at.unix_ns) <= duration_to_ns(policy.head_export_within);
    let signed = h.signed && f.chain_key;
    check(
        "log-head-export",
        None,
        if fresh && signed {
            CheckStatus::Ok
        } else {
            CheckStatus::Warning
        },
        format!(
            "the log's head (seq {}) was last exported by {} at {} ({} ago){}",
            h.seq,
            h.by,
            when(h.at.unix_ns),
            ago(now_ns, h.at.unix_ns),
            if signed {
                ", with a signed checkpoint"
            } else {
                ", without a signed checkpoint (no chain key)"
            }
        ),
        if fresh && signed { "" } else { action },
    )
}

fn read_back(p: &Projections, f: &InstallationFacts, r: &RepositoryFacts, now_ns: i64) -> Check {
    let subject = Some(r.id.as_str());
    let state = p.read_back.repositories.get(&r.id);
    if let Some(s) = state.filter(|s| !s.damaged.is_empty()) {
        return check(
            "read-back",
            subject,
            CheckStatus::Failed,
            format!("reading back repository {} found damage in {} of {} slices", r.id, s.damaged.len(), s.of),
            "run `vouch verify --read-data` on it to see which points and paths it hits, then `vouch repair`",
        );
    }
    let Some(window) = f.read_back_window else {
        return check(
            "read-back",
            subject,
            CheckStatus::Warning,
            format!("the rolling read-back is off: nothing proves the packs of repository {} still read", r.id),
            "set [verification] read_back_window (default 30d)",
        );
    };
    let days = window.as_secs() / 86_400;
    let Some(s) = state else {
        return check(
            "read-back",
            subject,
            CheckStatus::Warning,
            format!("no pack of repository {} was read back yet", r.id),
            "the rolling read-back reads a slice an hour; wait, or run `vouch verify --read-data`",
        );
    };
    let coverage = s.coverage(now_ns, duration_to_ns(window));
    if coverage >= 1.0 {
        check(
            "read-back",
            subject,
            CheckStatus::Ok,
            format!(
                "every pack of repository {} was read back intact within {days} days",
                r.id
            ),
            "",
        )
    } else {
        check(
            "read-back",
            subject,
            CheckStatus::Warning,
            format!(
                "{:.1} % of the packs of repository {} were read back intact within {days} days",
                coverage * 100.0,
                r.id
            ),
            "the window fills a slice at a time; if it does not, see the read-back jobs' failures",
        )
    }
}

fn retention_of<'a>(f: &'a InstallationFacts, id: &RepositoryId) -> Option<&'a RepositoryFacts> {
    f.repositories.iter().find(|r| &r.id == id)
}

fn immutability(p: &Projections, f: &InstallationFacts, plan: &Plan) -> Check {
    let id = plan.id.to_string();
    let subject = Some(id.as_str());
    let none = || {
        check(
            "immutability",
            subject,
            CheckStatus::Warning,
            format!(
                "no copy of plan {id}'s points is locked: whoever gets write access to repository {} can delete every point",
                plan.definition.repository
            ),
            "give the plan a replica with lock_for into an S3 bucket with Object Lock (or a directory with the immutable attribute)",
        )
    };
    let Some(replica) = &plan.definition.replica else {
        return none();
    };
    if replica.lock_for.is_none() {
        return none();
    }
    let Some(target) = retention_of(f, &replica.repository) else {
        return check(
            "immutability",
            subject,
            CheckStatus::Unknown,
            format!(
                "plan {id}'s replica repository {} is not served by this service",
                replica.repository
            ),
            "configure it in [[repositories]]",
        );
    };
    // What the newest copy recorded, when there is one: the log's word on
    // what the storage enforced then.
    let newest = p
        .points
        .copies_of_plan(&plan.id)
        .filter(|pt| pt.expired.is_none())
        .max_by_key(|pt| pt.since.seq);
    match &target.retention {
        Err(why) => check(
            "immutability",
            subject,
            CheckStatus::Unknown,
            format!("how repository {} keeps locked files could not be told: {why}", replica.repository),
            "check that the repository is reachable",
        ),
        Ok(Retention::ObjectLock) | Ok(Retention::ImmutableAttribute) => {
            let by = if target.retention == Ok(Retention::ObjectLock) {
                "the store (S3 Object Lock)"
            } else {
                "the file system (immutable attribute)"
            };
            match newest {
                Some(pt)
                    if !pt.copy.as_ref().is_some_and(|c| {
                        c.locks_enforced_by == vouch_events::LockEnforcement::Storage
                    }) => check(
                    "immutability",
                    subject,
                    CheckStatus::Warning,
                    format!(
                        "repository {} enforces locks by {by}, but the newest copy ({}) was recorded as locked by Vouch only",
                        replica.repository,
                        pt.id.short()
                    ),
                    "see the copy job's log; the next copy should be locked by the storage",
                ),
                _ => check(
                    "immutability",
                    subject,
                    CheckStatus::Ok,
                    format!(
                        "copies of plan {id} in {} are locked for {} and enforced by {by}",
                        replica.repository,
                        humantime::format_duration(replica.lock_for.unwrap_or_default())
                    ),
                    "",
                ),
            }
        }
        Ok(Retention::VouchOnly) => check(
            "immutability",
            subject,
            CheckStatus::Warning,
            format!(
                "copies of plan {id} in {} are locked by Vouch only: anyone with write access to that storage can still delete them",
                replica.repository
            ),
            "move the replica to an S3 bucket with Object Lock, or a directory on ext4/xfs/btrfs with the immutable attribute (immutable_locks)",
        ),
    }
}

fn agent_credentials(facts: Option<&InstallationFacts>) -> Check {
    let Some(Ok(tokens)) = facts.map(|f| &f.tokens) else {
        return check(
            "agent-credentials",
            None,
            CheckStatus::Unknown,
            "the token file could not be read",
            "check the data directory's tokens.json",
        );
    };
    let agents = tokens.iter().filter(|t| t.role == "agent").count();
    let appenders = tokens.iter().filter(|t| t.role == "append").count();
    check(
        "agent-credentials",
        None,
        CheckStatus::Ok,
        format!(
            "{agents} agent token(s) and {appenders} append-only token(s): each may only add to its repository (the repository protocol refuses their deletes and rewrites); only admin tokens can delete"
        ),
        "",
    )
}

fn restore_tests(p: &Projections, plan: &Plan, now_ns: i64) -> Check {
    let id = plan.id.to_string();
    let subject = Some(id.as_str());
    let rt = &plan.definition.restore_test;
    let Some(every) = rt.every else {
        return check(
            "restore-tests",
            subject,
            CheckStatus::Failed,
            format!(
                "plan {id} has no restore tests: none of its points can ever be proven recoverable"
            ),
            "set restore_test.every on the plan",
        );
    };
    let live = policy::live_points(p, &plan.id);
    let tests: Vec<_> = live
        .iter()
        .filter_map(|pt| pt.last_restore_test.as_ref())
        .collect();
    if live.is_empty() {
        return check(
            "restore-tests",
            subject,
            CheckStatus::Unknown,
            format!("plan {id} has no point yet"),
            "run the plan now, or wait for its schedule",
        );
    }
    let newest = tests.iter().filter(|t| t.proves()).max_by_key(|t| t.at.seq);
    let newest_full = tests
        .iter()
        .filter(|t| t.is_complete())
        .max_by_key(|t| t.at.seq);
    // The window, and slack for jitter and the test's own run.
    let window = duration_to_ns(every).saturating_add(duration_to_ns(every) / 2);
    let age_of = |at: i64| now_ns.saturating_sub(at);
    let Some(t) = newest else {
        let since = plan
            .epoch
            .unix_ns
            .max(live.last().map_or(0, |pt| pt.since.unix_ns));
        return check(
            "restore-tests",
            subject,
            if age_of(since) > window {
                CheckStatus::Failed
            } else {
                CheckStatus::Unknown
            },
            format!("no restore test of plan {id}'s points passed yet"),
            "see the restore-test jobs of the plan (console: Jobs)",
        );
    };
    let full = match (rt.full_every, newest_full) {
        (None, _) => "samples suffice for this plan".to_owned(),
        (Some(_), Some(f)) => format!("the newest complete one at {}", when(f.at.unix_ns)),
        (Some(_), None) => "no complete one yet".to_owned(),
    };
    let full_late = match (rt.full_every, newest_full) {
        (Some(fe), Some(f)) => {
            age_of(f.at.unix_ns) > duration_to_ns(fe).saturating_add(duration_to_ns(fe) / 2)
        }
        (Some(_), None) => true,
        (None, _) => false,
    };
    let late = age_of(t.at.unix_ns) > window;
    let kind = if t.is_complete() {
        "complete"
    } else {
        "sampled"
    };
    check(
        "restore-tests",
        subject,
        if late {
            CheckStatus::Failed
        } else if full_late {
            CheckStatus::Warning
        } else {
            CheckStatus::Ok
        },
        format!(
            "the newest passing restore test of plan {id} ({kind}, {} of {} files) ran at {} ({} ago; every {}); {full}",
            t.evidence.files,
            t.evidence.files_in_point.map_or("?".into(), |n| n.to_string()),
            when(t.at.unix_ns),
            ago(now_ns, t.at.unix_ns),
            humantime::format_duration(every)
        ),
        if late {
            "see why restore tests stopped (console: Jobs; the plan's restore_test)"
        } else if full_late {
            "a complete restore test is due: run one (POST /api/v1/points/{id}/restore-test with full)"
        } else {
            ""
        },
    )
}

fn copies(p: &Projections, facts: Option<&InstallationFacts>, plan: &Plan, now_ns: i64) -> Check {
    let id = plan.id.to_string();
    let subject = Some(id.as_str());
    let Some(replica) = &plan.definition.replica else {
        return check(
            "copies",
            subject,
            CheckStatus::Warning,
            format!(
                "plan {id} keeps one copy, in repository {}: 3-2-1 wants a second, off-host",
                plan.definition.repository
            ),
            "give the plan a replica in another repository, off this host (S3), with lock_for",
        );
    };
    let last_copy_job = p
        .jobs
        .jobs
        .values()
        .filter(|j| {
            j.kind == JobKind::Copy && j.plan.as_ref() == Some(&plan.id) && j.state.is_terminal()
        })
        .max_by_key(|j| j.updated.seq);
    if let Some(j) =
        last_copy_job.filter(|j| matches!(j.state, JobState::Failed | JobState::Abandoned))
    {
        return check(
            "copies",
            subject,
            if replica.require == ReplicaRequirement::Nothing {
                CheckStatus::Warning
            } else {
                CheckStatus::Failed
            },
            format!(
                "the latest copy of plan {id} into {} failed: {}",
                replica.repository,
                j.last_error
                    .as_ref()
                    .map_or("no reason recorded", |e| e.message.as_str())
            ),
            "see the copy job (console: Jobs); the next backup copies again",
        );
    }
    let newest = p
        .points
        .copies_of_plan(&plan.id)
        .filter(|pt| pt.expired.is_none())
        .max_by_key(|pt| pt.snapshot_time_unix_ns);
    let Some(copy) = newest else {
        return check(
            "copies",
            subject,
            CheckStatus::Unknown,
            format!("plan {id} has no copy in {} yet", replica.repository),
            "copies follow each backup; run the plan, or see the copy jobs if they fail",
        );
    };
    let off_host = copy.copy.as_ref().is_some_and(|c| c.off_host)
        || facts
            .and_then(|f| retention_of(f, &replica.repository))
            .is_some_and(|r| r.off_host);
    let fresh = now_ns.saturating_sub(copy.snapshot_time_unix_ns.min(copy.since.unix_ns))
        <= duration_to_ns(plan.definition.rpo);
    let proven = copy.state == PointState::Recoverable;
    let status = if fresh && off_host {
        CheckStatus::Ok
    } else {
        CheckStatus::Warning
    };
    check(
        "copies",
        subject,
        status,
        format!(
            "2 copies of plan {id}: {} and {} ({}); the newest copy ({}) is {}{}",
            plan.definition.repository,
            replica.repository,
            if off_host { "off-host" } else { "on this host" },
            copy.id.short(),
            if fresh {
                "within the RPO"
            } else {
                "older than the RPO"
            },
            if proven {
                ", recoverable"
            } else {
                ", not restore-tested yet"
            }
        ),
        match (fresh, off_host) {
            (false, _) => "see why copies stopped (console: Jobs)",
            (true, false) => "put the replica off this host (an S3 repository)",
            _ => "",
        },
    )
}

fn open_damage(p: &Projections) -> Check {
    let mut damaged: Vec<String> = Vec::new();
    for plan in policy::active_plans(p) {
        for pt in policy::live_points(p, &plan.id) {
            match pt.state {
                PointState::Corrupt => damaged.push(format!(
                    "point {} of {} (verification failed)",
                    pt.id.short(),
                    plan.id
                )),
                PointState::Unrecoverable => damaged.push(format!(
                    "point {} of {} (restore test failed)",
                    pt.id.short(),
                    plan.id
                )),
                _ => {}
            }
        }
    }
    let repos: Vec<String> = p
        .read_back
        .repositories
        .iter()
        .filter(|(_, r)| !r.damaged.is_empty())
        .map(|(id, r)| format!("repository {id} ({} damaged slices)", r.damaged.len()))
        .collect();
    damaged.extend(repos);
    if damaged.is_empty() {
        check(
            "open-damage",
            None,
            CheckStatus::Ok,
            "no live point failed its checks and no read-back found damage",
            "",
        )
    } else {
        let shown: Vec<&str> = damaged.iter().take(10).map(String::as_str).collect();
        check(
            "open-damage",
            None,
            CheckStatus::Failed,
            format!("{} open damage(s): {}{}", damaged.len(), shown.join("; "), if damaged.len() > 10 { "; ..." } else { "" }),
            "see the points' pages; `vouch verify --read-data` and `vouch repair` fix what can be fixed, a new backup replaces the rest",
        )
    }
}

fn agents(
    p: &Projections,
    facts: Option<&InstallationFacts>,
    now_ns: i64,
    policy: &SecurityPolicy,
) -> Vec<Check> {
    let server = facts.map(|f| f.version.as_str());
    p.agents
        .agents
        .values()
        .map(|a| {
            let name = a.id.to_string();
            let subject = Some(name.as_str());
            let mut problems = Vec::new();
            let mut status = CheckStatus::Ok;
            let mut worse = |s: CheckStatus, why: String, problems: &mut Vec<String>| {
                if s.badness() > status.badness() {
                    status = s;
                }
                problems.push(why);
            };
            match a.last_seen_unix_ns {
                Some(seen) if now_ns.saturating_sub(seen) > duration_to_ns(policy.agent_lost_after) => worse(
                    CheckStatus::Warning,
                    format!("last seen {} ago", ago(now_ns, seen)),
                    &mut problems,
                ),
                Some(_) => {}
                None => worse(CheckStatus::Unknown, "never seen".into(), &mut problems),
            }
            match (&a.version, server) {
                (Some(v), Some(s)) if v != s => worse(
                    CheckStatus::Warning,
                    format!("runs vouch {v}, the server {s}"),
                    &mut problems,
                ),
                (None, _) => worse(CheckStatus::Unknown, "its version is not known".into(), &mut problems),
                _ => {}
            }
            if let Some(skew) = a.clock_skew_ms {
                if skew.unsigned_abs() > 5 * 60 * 1000 {
                    worse(
                        CheckStatus::Warning,
                        format!("its clock is {} {} the server's", humantime::format_duration(Duration::from_millis(skew.unsigned_abs())), if skew > 0 { "ahead of" } else { "behind" }),
                        &mut problems,
                    );
                }
            }
            let summary = format!(
                "agent {name} ({}): vouch {}, last seen {}{}",
                a.hostname.as_deref().unwrap_or("host unknown"),
                a.version.as_deref().unwrap_or("?"),
                a.last_seen_unix_ns.map_or("never".into(), |s| format!("{} ago", ago(now_ns, s))),
                a.clock_skew_ms.map_or(String::new(), |s| format!(", clock skew {s} ms")),
            );
            check(
                "agent",
                subject,
                status,
                if problems.is_empty() { summary } else { format!("{summary}: {}", problems.join("; ")) },
                match status {
                    CheckStatus::Ok => "",
                    _ => "upgrade the agent to the server's version, check that it runs and reaches the server, and that its host keeps time (NTP)",
                },
            )
        })
        .collect()
}

fn server_version(facts: Option<&InstallationFacts>) -> Check {
    let Some(f) = facts else {
        return check(
            "server-version",
            None,
            CheckStatus::Unknown,
            "the server's version is not known yet",
            "wait for the first evaluation",
        );
    };
    check(
        "server-version",
        None,
        CheckStatus::Ok,
        format!("the server runs vouch {}", f.version),
        "",
    )
}

/// The worst status of `checks` (`ok` when there is none), with how many
/// have each status.
pub fn rollup(checks: &[Check]) -> (CheckStatus, BTreeMap<&'static str, usize>) {
    let mut counts: BTreeMap<&'static str, usize> =
        CheckStatus::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    let mut worst = CheckStatus::Ok;
    for c in checks {
        *counts.entry(c.status.as_str()).or_default() += 1;
        if c.status.badness() > worst.badness() {
            worst = c.status;
        }
    }
    (worst, counts)
}

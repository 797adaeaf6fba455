//! `verify`, `forget`, `prune`.

use std::sync::Arc;

use clap::Args;
use serde_json::json;
use vouch_events::retention::KeepPolicy;

use super::Ctx;
use crate::error::{exit_code, Error, Result};
use crate::progress::Progress;
use crate::util::human_bytes;

/// `vouch verify`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch check                            structure: every snapshot, tree and index
  vouch check --read-data                and every byte of every pack
  vouch check --read-data-subset 1/7     one seventh (day N of 7 reads part N)
  vouch check --read-data-subset 10%

EXIT STATUS
  0  no damage; 1 it failed; 10 no repository there; 12 wrong passphrase; 13 damage found (the report names the
  packs, blobs and the snapshots they affect)")]
pub struct VerifyArgs {
    /// Read back all data.
    #[arg(long)]
    pub read_data: bool,
    /// Read back a subset of packs: `10%` (chosen at random), or `n/t`,
    /// part n of t (fixed parts that together cover every pack once, for
    /// rotating runs: 1/7 on Mondays, 2/7 on Tuesdays...).
    #[arg(long, value_name = "N%|n/t")]
    pub read_data_subset: Option<String>,
    /// Do not send the findings to the service that owns the repository.
    #[arg(long)]
    pub no_report: bool,
}

/// `n/t` of `--read-data-subset`: `Some((n, t))`, `None` when the text is
/// no fraction (a percentage then), an error for a fraction out of range.
fn parse_part(s: &str) -> Result<Option<(u64, u64)>> {
    let Some((n, t)) = s.split_once('/') else {
        return Ok(None);
    };
    let bad = || {
        Error::InvalidArgument(format!(
            "--read-data-subset {s:?}: n/t needs whole numbers with 1 <= n <= t (e.g. 3/7)"
        ))
    };
    let n: u64 = n.trim().parse().map_err(|_| bad())?;
    let t: u64 = t.trim().parse().map_err(|_| bad())?;
    if n == 0 || t == 0 || n > t {
        return Err(bad());
    }
    Ok(Some((n, t)))
}

/// Checks the repository; exit code 13 on damage.
pub fn verify(ctx: &Ctx, a: VerifyArgs) -> Result<i32> {
    let repo = ctx.open()?;
    let part = match a.read_data_subset.as_deref().map(parse_part).transpose()? {
        Some(Some(p)) => Some(p),
        _ => None,
    };
    let subset = match &a.read_data_subset {
        None => None,
        Some(_) if part.is_some() => None,
        Some(s) => {
            let n: f64 = s.trim_end_matches('%').parse().map_err(|_| {
                Error::InvalidArgument(format!(
                    "--read-data-subset takes a percentage like 10% or a part like 3/7, not {s:?}"
                ))
            })?;
            if !(n > 0.0 && n <= 100.0) {
                return Err(Error::InvalidArgument(
                    "--read-data-subset must be in (0, 100]%".into(),
                ));
            }
            Some(n / 100.0)
        }
    };
    let opts = crate::verify::VerifyOptions {
        read_data: a.read_data || subset.is_some() || part.is_some(),
        subset: subset.or(part.map(|(_, t)| 1.0 / t as f64)),
        part,
        threads: 0,
    };
    let progress = Arc::new(Progress::default());
    let reporter = ctx.out.progress("verify", progress.clone());
    let report = crate::verify::verify(&repo, &opts, &progress);
    reporter.finish();
    let mut report = report?;
    let service = tell_the_service(&repo, &mut report, &opts, a.no_report)?;
    if ctx.out.json {
        ctx.out.json_line(
            &json!({"type": "verify", "damaged": report.is_damaged(), "report": report, "service": service}),
        );
    } else {
        for d in &report.damage {
            eprintln!(
                "damage: {}{}{}",
                d.pack
                    .as_ref()
                    .map(|p| format!("pack {} ", &p[..8.min(p.len())]))
                    .unwrap_or_default(),
                d.blob
                    .as_ref()
                    .map(|b| format!("blob {} ", &b[..8.min(b.len())]))
                    .unwrap_or_default(),
                d.problem
            );
        }
        for a in &report.affected {
            eprintln!(
                "snapshot {} is affected: {} paths, e.g. {}",
                &a.snapshot[..8],
                a.path_count,
                a.paths
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        ctx.out.say(format!(
            "{} snapshots, {} packs checked{}; {}",
            report.snapshots,
            report.packs,
            if opts.read_data {
                format!(
                    ", {} packs ({}) read back",
                    report.packs_read,
                    human_bytes(report.bytes_read)
                )
            } else {
                String::new()
            },
            if report.is_damaged() {
                format!("{} problems found", report.damage.len())
            } else {
                "no damage found".into()
            }
        ));
        if report.unindexed_packs > 0 {
            ctx.out.say(format!(
                "{} packs are in no index (leftovers of interrupted backups; prune removes them)",
                report.unindexed_packs
            ));
        }
    }
    Ok(if report.is_damaged() {
        exit_code::DAMAGED
    } else {
        exit_code::OK
    })
}

/// Sends the per-point findings to the service that owns the repository,
/// if one does; warns loudly on stderr when it cannot. A damaged ownership
/// record is damage of the repository, and is never followed. Returns what
/// to put under `service` in the JSON output.
fn tell_the_service(
    repo: &crate::repo::Repository,
    report: &mut crate::verify::VerifyReport,
    opts: &crate::verify::VerifyOptions,
    no_report: bool,
) -> Result<serde_json::Value> {
    use super::service_link::{ownership, report_bodies, send_report, token, Ownership};
    let owner = match ownership(repo)? {
        Ownership::Free => return Ok(serde_json::Value::Null),
        Ownership::Damaged(why) => {
            eprintln!(
                "*** WARNING: this repository's ownership record does not authenticate ({why}).
                 *** It is damaged or was tampered with, so it is not followed: no service was told what this verify found.
                 *** Restart the service that serves this repository (it rewrites the record), then run verify again."
            );
            report.damage.push(crate::verify::Damage {
                pack: None,
                blob: None,
                problem: format!("ownership record (owner) does not authenticate: {why}"),
            });
            return Ok(json!({"reported": false, "error": "the ownership record is damaged"}));
        }
        Ownership::Owned(r) => r,
    };
    let warn = |why: &str| {
        eprintln!(
            "*** WARNING: service {} at {} owns this repository (as {:?}) and was NOT told what this verify found: {why}.
             *** Until it is, the service shows its own, older view of these points{}.
             *** Run verify again with VOUCH_TOKEN or VOUCH_TOKEN_FILE set to an operator or admin token of that service
             *** (`vouch token create --role operator` on the service's host), or let the service verify the points itself.",
            owner.service_id,
            owner.url,
            owner.repository,
            if report.is_damaged() { ", damage included" } else { "" }
        );
    };
    let base =
        json!({"service_id": owner.service_id, "url": owner.url, "repository": owner.repository});
    let with = |mut v: serde_json::Value, extra: serde_json::Value| {
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        v
    };
    if no_report {
        warn("--no-report was given");
        return Ok(with(
            base,
            json!({"reported": false, "error": "--no-report"}),
        ));
    }
    let token = match token() {
        Ok(Some(t)) => t,
        Ok(None) => {
            warn("no token (VOUCH_TOKEN or VOUCH_TOKEN_FILE) is set");
            return Ok(with(base, json!({"reported": false, "error": "no token"})));
        }
        Err(e) => {
            warn(&e);
            return Ok(with(base, json!({"reported": false, "error": e})));
        }
    };
    let bodies = report_bodies(report, opts.read_data, opts.subset);
    if bodies.is_empty() {
        return Ok(with(base, json!({"reported": true, "recorded": 0})));
    }
    match send_report(&owner, &token, &bodies) {
        Ok(r) => {
            eprintln!(
                "reported to service {} at {}: {} verdicts recorded ({} failed); {} points unknown to it, {} forgotten there",
                owner.service_id, owner.url, r.recorded, r.failed, r.unknown, r.forgotten
            );
            Ok(with(base, json!({"reported": true, "result": r})))
        }
        Err(e) => {
            warn(&e);
            Ok(with(base, json!({"reported": false, "error": e})))
        }
    }
}

/// `vouch forget`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch forget --keep-daily 7 --keep-weekly 5 --keep-monthly 12 --dry-run
  vouch forget --keep-last 3 --host db-1 --prune
  vouch forget --keep-within 30d --tag nightly --group-by host,tags
  vouch forget 3fa9c2d1 77b0e4aa          by id

A snapshot locked until a date stays whatever the rules say. The data stays
until `vouch prune`.

EXIT STATUS
  0  done; 1 it failed; 2 wrong usage (no rule given); 10 no repository there; 12 wrong passphrase; 11 the
  repository is locked; 19 no such snapshot; 20 a service owns the
  repository; 21 a snapshot named by id is locked")]
pub struct ForgetArgs {
    /// Snapshots to forget by id (instead of keep rules).
    pub snapshots: Vec<String>,
    /// Keep the N newest snapshots.
    #[arg(long)]
    pub keep_last: Option<u32>,
    /// Keep the newest snapshot of each of the last N hours.
    #[arg(long)]
    pub keep_hourly: Option<u32>,
    /// ... days.
    #[arg(long)]
    pub keep_daily: Option<u32>,
    /// ... ISO weeks.
    #[arg(long)]
    pub keep_weekly: Option<u32>,
    /// ... months.
    #[arg(long)]
    pub keep_monthly: Option<u32>,
    /// ... years.
    #[arg(long)]
    pub keep_yearly: Option<u32>,
    /// Keep snapshots newer than this (e.g. `30d`, `1y 6months`).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub keep_within: Option<std::time::Duration>,
    /// Keep snapshots with this tag (repeatable).
    #[arg(long)]
    pub keep_tag: Vec<String>,
    /// Only snapshots of this host (repeatable).
    #[arg(long = "host", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Only snapshots with these tags (`a,b`: both; repeatable: any of the
    /// lists).
    #[arg(long = "tag", value_name = "TAG[,TAG]")]
    pub tags: Vec<String>,
    /// Only snapshots whose sources include this path (repeatable: all).
    #[arg(long = "path", value_name = "PATH")]
    pub paths: Vec<String>,
    /// Apply the rules to each group of snapshots with the same of these:
    /// a comma-separated subset of host, paths and tags ("" for one group).
    #[arg(long, value_name = "host,paths,tags", default_value = "host,paths")]
    pub group_by: String,
    /// Only show what would be removed and why the rest is kept.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Run prune afterwards.
    #[arg(long)]
    pub prune: bool,
    /// Act on a repository a service owns, behind its back (its
    /// reconciliation then records the forgotten points as vanished).
    #[arg(long)]
    pub outside_service: bool,
}

/// Forgets snapshots.
pub fn forget(ctx: &Ctx, a: ForgetArgs) -> Result<i32> {
    let repo = ctx.open()?;
    if !a.dry_run {
        if let Some(code) =
            super::service_link::refuse_if_owned(&repo, "forget", a.outside_service)?
        {
            return Ok(code);
        }
    }
    let policy = KeepPolicy {
        last: a.keep_last,
        hourly: a.keep_hourly,
        daily: a.keep_daily,
        weekly: a.keep_weekly,
        monthly: a.keep_monthly,
        yearly: a.keep_yearly,
        within: a.keep_within,
        tags: a.keep_tag.clone(),
    };
    if !a.snapshots.is_empty() {
        if !policy.is_empty() {
            return Err(Error::InvalidArgument(
                "give snapshot ids or keep rules, not both".into(),
            ));
        }
        if !(a.hosts.is_empty() && a.tags.is_empty() && a.paths.is_empty()) {
            return Err(Error::InvalidArgument(
                "--host, --tag and --path choose what keep rules apply to; snapshots named by id are forgotten as named"
                    .into(),
            ));
        }
        let ids = crate::forget::forget_ids(&repo, &a.snapshots, a.dry_run)?;
        if ctx.out.json {
            ctx.out.json_line(&json!({"type": "forget", "dry_run": a.dry_run, "removed": ids.iter().map(|i| i.to_hex()).collect::<Vec<_>>()}));
        } else {
            for id in &ids {
                ctx.out.say(format!(
                    "{} {}",
                    if a.dry_run { "would remove" } else { "removed" },
                    id.short()
                ));
            }
        }
    } else {
        let mut scope = crate::forget::ForgetScope {
            hosts: a.hosts.clone(),
            tags: a
                .tags
                .iter()
                .map(|t| {
                    t.split(',')
                        .map(|x| x.trim().to_string())
                        .filter(|x| !x.is_empty())
                        .collect()
                })
                .collect(),
            paths: a.paths.clone(),
            ..Default::default()
        };
        scope.set_group_by(&a.group_by)?;
        let groups =
            crate::forget::forget(&repo, &policy, &scope, a.dry_run, crate::util::now_ns())?;
        if ctx.out.json {
            ctx.out
                .json_line(&json!({"type": "forget", "dry_run": a.dry_run, "groups": groups}));
        } else {
            for g in &groups {
                let mut what = Vec::new();
                if scope.by_host {
                    what.push(format!("host {}", g.host));
                }
                if scope.by_paths {
                    what.push(format!("paths {}", g.paths.join(" ")));
                }
                if scope.by_tags {
                    what.push(format!("tags {}", g.tags.join(",")));
                }
                if what.is_empty() {
                    what.push("all snapshots".into());
                }
                ctx.out.say(format!("{}:", what.join(", ")));
                for d in &g.decisions {
                    let verb = match (d.keep, a.dry_run) {
                        (true, _) => "keep  ",
                        (false, true) => "would remove",
                        (false, false) => "remove",
                    };
                    ctx.out.say(format!(
                        "  {verb} {} {} {}",
                        &d.snapshot[..8],
                        d.time,
                        d.reasons.join(", ")
                    ));
                }
            }
        }
    }
    if a.prune && !a.dry_run {
        return prune(
            ctx,
            PruneArgs {
                dry_run: false,
                repack_below: 50.0,
                outside_service: a.outside_service,
            },
        );
    }
    Ok(exit_code::OK)
}

/// `vouch prune`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch prune --dry-run                 what would be deleted and repacked
  vouch prune
  vouch prune --repack-below 80          also repack packs up to 80% used

EXIT STATUS
  0  done; 1 it failed; 10 no repository there; 12 wrong passphrase; 11 the repository is locked; 13 refusing:
  the index does not account for everything (run `vouch repair index`);
  20 a service owns the repository")]
pub struct PruneArgs {
    /// Only report what would be deleted.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Repack packs with less than this percentage of used bytes.
    #[arg(long, default_value_t = 50.0)]
    pub repack_below: f64,
    /// Act on a repository a service owns, behind its back.
    #[arg(long)]
    pub outside_service: bool,
}

/// Prunes.
pub fn prune(ctx: &Ctx, a: PruneArgs) -> Result<i32> {
    let repo = ctx.open()?;
    if !a.dry_run {
        if let Some(code) = super::service_link::refuse_if_owned(&repo, "prune", a.outside_service)?
        {
            return Ok(code);
        }
    }
    let opts = crate::prune::PruneOptions {
        repack_below: (a.repack_below / 100.0).clamp(0.0, 1.0),
        dry_run: a.dry_run,
        grace: None,
    };
    let r = crate::prune::prune(&repo, &opts)?;
    if ctx.out.json {
        ctx.out.json_line(&json!({"type": "prune", "report": r}));
    } else {
        ctx.out.say(format!(
            "{}{} of {} packs deleted, {} repacked into {}, {} leftovers removed; {} freed",
            if r.dry_run { "dry run: " } else { "" },
            r.packs_deleted,
            r.packs_before,
            r.packs_repacked,
            r.packs_written,
            r.leftover_packs,
            human_bytes(r.bytes_freed)
        ));
        if r.unreadable_packs_kept > 0 {
            ctx.out.say(format!(
                "{} packs in no index do not read and were kept; `vouch repair index` salvages what they hold",
                r.unreadable_packs_kept
            ));
        }
    }
    Ok(exit_code::OK)
}

/// `vouch unlock`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch unlock                           remove stale locks only
  vouch unlock --force                   every lock (no other vouch may run)

EXIT STATUS
  0  done; 1 it failed; 10 no repository there")]
pub struct UnlockArgs {
    /// Remove every lock, live ones too: only when no other vouch process
    /// uses the repository.
    #[arg(long)]
    pub force: bool,
}

/// Removes stale locks (every lock with `--force`).
pub fn unlock(ctx: &Ctx, a: UnlockArgs) -> Result<i32> {
    let backend = ctx.backend()?;
    let report = crate::repo::lock::unlock(backend.as_ref(), a.force)?;
    if ctx.out.json {
        ctx.out
            .json_line(&json!({"type": "unlock", "locks": report}));
    } else if report.is_empty() {
        ctx.out.say("no locks");
    } else {
        for r in &report {
            ctx.out.say(format!(
                "{} locks/{}: {}",
                match (r.removed, r.stale) {
                    (true, true) => "removed stale",
                    (true, false) => "removed live (--force)",
                    (false, _) => "kept live",
                },
                r.name,
                r.description
            ));
        }
    }
    Ok(exit_code::OK)
}

/// `vouch lock`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch lock latest --until 2027-12-31T00:00:00Z
  vouch lock 3fa9c2d1 --until 2030-01-01

No tool may forget a locked snapshot before the date, and nothing can
shorten a lock; on S3 with Object Lock the store itself refuses to delete
its files.

EXIT STATUS
  0  locked; 1 it failed; 2 a date in the past or not RFC 3339; 10 no repository there; 12 wrong passphrase; 19
  no such snapshot")]
pub struct LockArgs {
    /// Snapshot id, unique id prefix, or `latest`.
    pub snapshot: String,
    /// Until when, RFC 3339 (`2027-01-31T00:00:00Z`).
    #[arg(long)]
    pub until: String,
    /// Which snapshot `latest` is.
    #[command(flatten)]
    pub latest: super::LatestArgs,
}

/// Locks a snapshot until a date: a record in the repository that every
/// tool honours, and a retention of its files where the storage has one.
pub fn lock(ctx: &Ctx, a: LockArgs) -> Result<i32> {
    let until = humantime::parse_rfc3339_weak(&a.until)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i64)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "--until {:?} is not an RFC 3339 time (2027-01-31T00:00:00Z)",
                a.until
            ))
        })?;
    let repo = ctx.open()?;
    let (id, _) = repo.find_snapshot_of(&a.snapshot, &a.latest.filter())?;
    let by = format!("{}@{}", crate::util::user_name(), crate::util::host_name());
    let outcome = repo.lock_point(&id, until, &by)?;
    if ctx.out.json {
        ctx.out.json_line(&json!({
            "type": "lock", "snapshot": id.to_hex(), "until": crate::util::rfc3339(outcome.until_ns),
            "record": outcome.record, "files_retained": outcome.files_retained,
            "enforced_by": outcome.enforced_by,
        }));
    } else {
        let by_whom = match outcome.enforced_by {
            crate::backend::Retained::ByStorage => format!(
                "enforced by the storage: {} files retained until then (compliance mode)",
                outcome.files_retained
            ),
            crate::backend::Retained::ByVouch => {
                "enforced by vouch (this storage cannot refuse deletions itself)".to_string()
            }
        };
        ctx.out.say(format!(
            "snapshot {} locked until {}; {by_whom}",
            id.short(),
            crate::util::rfc3339(outcome.until_ns)
        ));
    }
    Ok(exit_code::OK)
}

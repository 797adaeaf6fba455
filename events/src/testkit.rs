//! Test helpers: one sample event of every type, ids from small numbers.

use std::time::Duration;

use crate::event::*;
use crate::ids::*;
use crate::plan::*;
use crate::retention::KeepPolicy;

pub(crate) fn sid(n: u8) -> SnapshotId {
    SnapshotId([n; 32])
}

pub(crate) fn plan_def(rpo_secs: u64, max_evidence_secs: u64) -> PlanDefinition {
    PlanDefinition {
        source: "agent:web-1:/etc".into(),
        schedule: "daily 02:00".into(),
        retention: KeepPolicy {
            last: Some(3),
            daily: Some(7),
            ..Default::default()
        },
        verification: VerificationPolicy {
            after_backup: true,
            every: Some(Duration::from_secs(86_400)),
            depth: VerifyDepth::ReadSample(10),
        },
        restore_test: RestoreTestPolicy {
            every: Some(Duration::from_secs(7 * 86_400)),
            max_evidence_age: Duration::from_secs(max_evidence_secs),
            sample_files: Some(100),
            full_every: Some(Duration::from_secs(7 * 86_400)),
            boot: Some(BootCheck {
                marker: BootCheck::DEFAULT_MARKER.into(),
                timeout: Duration::from_secs(120),
                memory_mib: 512,
            }),
        },
        rpo: Duration::from_secs(rpo_secs),
        repository: RepositoryId::new("main"),
        paused: false,
        replica: None,
        proxmox: Some(ProxmoxPolicy {
            mode: DumpMode::Stop,
            remove_dump: true,
        }),
        anomaly_lock: Some(Duration::from_secs(30 * 86_400)),
        files: FileSelection {
            also: vec!["/var/www".into()],
            exclude: vec!["*.tmp".into(), "/etc/ssl/private".into()],
            exclude_files: vec!["/etc/vouch/excludes".into()],
            exclude_caches: true,
            one_file_system: true,
            exclude_if_present: vec![".nobackup".into()],
            exclude_larger_than: Some(1 << 30),
        },
        hooks: BackupHooks {
            pre: Some(Hook {
                name: "dump-db".into(),
                args: vec!["--all".into()],
                timeout: Duration::from_secs(600),
            }),
            post: None,
        },
        time_zone: Some("Europe/Berlin".into()),
    }
}

pub(crate) fn evidence() -> RestoreEvidence {
    RestoreEvidence {
        restored: vec!["/etc".into()],
        files: 120,
        bytes: 4096,
        digests_compared: 120,
        digests_matched: 120,
        duration_ms: 1500,
        location: "server:/var/lib/vouch/sandbox/1".into(),
        files_in_point: Some(120),
        bytes_in_point: Some(4096),
        complete: true,
        guest: Some(GuestEvidence {
            check: "boot".into(),
            command: "qemu-system-x86_64 -accel tcg -net none".into(),
            accelerator: Some("tcg".into()),
            marker: Some("login:".into()),
            came_up: true,
            took_ms: 2555,
            console_tail: vec!["vouch-guest login:".into()],
        }),
    }
}

/// One event of every type, in the order of `EVENT_TYPES`.
pub(crate) fn sample_events() -> Vec<Event> {
    let job = JobId::new("j1");
    let agent = AgentId::new("a1");
    let alert = AlertId::new("al1");
    vec![
        PlanCreated {
            plan: PlanId::new("p1"),
            definition: plan_def(86_400, 30 * 86_400),
        }
        .into(),
        PlanChanged {
            plan: PlanId::new("p1"),
            definition: PlanDefinition {
                replica: Some(ReplicaPolicy {
                    repository: RepositoryId::new("offsite"),
                    lock_for: Some(Duration::from_secs(30 * 86_400)),
                    require: ReplicaRequirement::ImmutableOffHost,
                }),
                ..plan_def(3_600, 86_400)
            },
        }
        .into(),
        PlanRemoved {
            plan: PlanId::new("p1"),
        }
        .into(),
        JobScheduled {
            job: job.clone(),
            kind: JobKind::Backup,
            plan: Some(PlanId::new("p1")),
            point: None,
            due_unix_ns: 1_000,
            attempt: 1,
            spec: JobSpec {
                repository: Some(RepositoryId::new("main")),
                depth: None,
                sample_files: None,
                slices: Vec::new(),
                of: 0,
                why: "schedule".into(),
                restore: Some(RestoreSpec {
                    path: "/etc".into(),
                    destination: "/srv/restore".into(),
                    agent: Some("web-1".into()),
                }),
            },
        }
        .into(),
        JobStarted {
            job: job.clone(),
            agent: Some(agent.clone()),
        }
        .into(),
        JobProgress {
            job: job.clone(),
            checkpoint: vec![1, 2, 3],
            done_bytes: 10,
            total_bytes: Some(20),
        }
        .into(),
        JobFinished { job: job.clone() }.into(),
        JobFailed {
            job: job.clone(),
            error_kind: "io".into(),
            message: "disk full".into(),
            retryable: true,
        }
        .into(),
        JobAbandoned {
            job: job.clone(),
            reason: "lease expired".into(),
        }
        .into(),
        BackupCommitted {
            job: Some(job.clone()),
            plan: Some(PlanId::new("p1")),
            repository: RepositoryId::new("main"),
            snapshot: sid(1),
            snapshot_time_unix_ns: 2_000,
            summary: BackupSummary {
                files: 3,
                bytes: 300,
                added_bytes: 100,
                stored_bytes: 60,
                duration_ms: 7,
                total_bytes: Some(4000),
                warnings: Some(2),
            },
            changes: Some(ChangeFigures {
                compared_with: sid(2),
                files_before: 9,
                added: 1,
                changed: 2,
                deleted: 3,
                renamed: 4,
                became_incompressible: Some(5),
                churn_extension: Some("locked".into()),
                churn_files: 4,
                note_name: Some("HOW_TO_DECRYPT.txt".into()),
                note_dirs: 3,
            }),
        }
        .into(),
        PointDiscovered {
            repository: RepositoryId::new("main"),
            snapshot: sid(2),
            snapshot_time_unix_ns: 3,
            plan: None,
        }
        .into(),
        VerificationStarted {
            point: sid(1),
            job: Some(job.clone()),
            depth: VerifyDepth::Structure,
        }
        .into(),
        VerificationPassed {
            point: sid(1),
            job: Some(job.clone()),
            depth: VerifyDepth::ReadAll,
            bytes_read: 300,
            blobs_checked: 3,
        }
        .into(),
        VerificationFailed {
            point: sid(1),
            job: None,
            depth: VerifyDepth::ReadSample(5),
            bytes_read: 30,
            damaged: vec!["pack 00ab".into()],
        }
        .into(),
        RestoreTestStarted {
            point: sid(1),
            job: Some(job.clone()),
        }
        .into(),
        RestoreTestPassed {
            point: sid(1),
            job: Some(job.clone()),
            evidence: evidence(),
        }
        .into(),
        RestoreTestFailed {
            point: sid(1),
            job: None,
            evidence: evidence(),
            reason: "digest mismatch".into(),
            cause: "mismatch".into(),
        }
        .into(),
        PointForgotten {
            point: sid(1),
            rule: "keep-last 3".into(),
        }
        .into(),
        PointLocked {
            point: sid(1),
            until_unix_ns: 9_000,
        }
        .into(),
        AnomalyDetected {
            point: sid(1),
            compared_with: Some(sid(2)),
            signals: vec![AnomalySignal {
                kind: "entropy-jump".into(),
                score_permille: 900,
                detail: "x".into(),
            }],
            paths: vec!["/home/a.doc.locked".into()],
        }
        .into(),
        AlertRaised {
            alert: alert.clone(),
            severity: Severity::Critical,
            subject: "plan p1".into(),
            message: "m".into(),
            rule: "BackupFailed".into(),
            labels: [("plan".to_owned(), "p1".to_owned())].into_iter().collect(),
        }
        .into(),
        AlertDelivered {
            alert: alert.clone(),
            receiver: "ops".into(),
            attempt: 1,
        }
        .into(),
        AlertDeliveryFailed {
            alert: alert.clone(),
            receiver: "ops".into(),
            attempt: 2,
            error: "timeout".into(),
            will_retry: true,
        }
        .into(),
        AlertResolved { alert }.into(),
        AgentRegistered {
            agent: agent.clone(),
            hostname: "web-1".into(),
            os: "linux".into(),
            version: "0.1.0".into(),
        }
        .into(),
        AgentSeen {
            agent: agent.clone(),
            clock_skew_ms: Some(-1_500),
            version: Some("0.1.0".into()),
        }
        .into(),
        LeaseGranted {
            agent: agent.clone(),
            job: job.clone(),
            expires_unix_ns: 5_000,
        }
        .into(),
        LeaseExpired { agent, job }.into(),
        ServiceStarted {
            version: "0.1.0".into(),
        }
        .into(),
        ConfigurationChanged {
            digest: "00".repeat(32),
            summary: "alerts.receivers".into(),
        }
        .into(),
        PacksReadBack {
            repository: RepositoryId::new("main"),
            job: Some(JobId::new("j1")),
            slices: vec![3, 4],
            of: 720,
            packs: 2,
            bytes_read: 300,
            damaged: vec!["pack 00ab: blob 01 does not decrypt".into()],
            damaged_packs: vec!["00ab".into()],
            affected_points: Some(vec![sid(1)]),
        }
        .into(),
        PointVanished {
            point: sid(1),
            repository: RepositoryId::new("main"),
            reason: "reconciliation".into(),
        }
        .into(),
        LogRepaired {
            from_seq: 41,
            bytes: 512,
            acknowledged_seq: 42,
            lost_acknowledged: true,
            reason: "record 41 fails its checksum".into(),
        }
        .into(),
        ClockStepped {
            previous_unix_ns: 2_000,
            now_unix_ns: 1_000,
        }
        .into(),
        LogScrubbed {
            through_seq: 42,
            events: 40,
            segments: 1,
            bytes: 6_000,
            head_hash: "ab".repeat(32),
            damaged_seq: Some(41),
            problem: Some("record 41 fails its checksum".into()),
            took_ms: 3,
        }
        .into(),
        ActionAudited {
            principal: "alice".into(),
            role: "operator".into(),
            action: "plan.create".into(),
            target: "home".into(),
        }
        .into(),
        ContentRead {
            principal: "bob".into(),
            role: "restore".into(),
            point: sid(1),
            path: "/home/bob/notes.txt".into(),
            kind: "file".into(),
        }
        .into(),
        PointUnlocked {
            point: sid(1),
            reason: "legal hold lifted (ticket 4711)".into(),
        }
        .into(),
        AccessRefused {
            principal: "web-2".into(),
            role: "agent".into(),
            action: "repo.put".into(),
            target: "agent-web-1/snapshots".into(),
            reason: "an agent writes only into its own repository".into(),
        }
        .into(),
        RestoreCompleted {
            job: JobId::new("restore-1"),
            point: sid(1),
            path: "/etc".into(),
            destination: "/srv/restore".into(),
            agent: Some("web-1".into()),
            files: 12,
            bytes: 3456,
        }
        .into(),
        CopyCommitted {
            job: Some(JobId::new("copy-1")),
            plan: Some(PlanId::new("p1")),
            source: sid(1),
            repository: RepositoryId::new("offsite"),
            snapshot: sid(2),
            snapshot_time_unix_ns: 1_700_000_000_000_000_000,
            summary: BackupSummary {
                files: 12,
                bytes: 3456,
                added_bytes: 3000,
                stored_bytes: 1200,
                duration_ms: 87,
                total_bytes: Some(3456),
                warnings: None,
            },
            off_host: true,
            locks_enforced_by: LockEnforcement::Storage,
            locked_until_unix_ns: Some(1_702_592_000_000_000_000),
        }
        .into(),
        SecurityCheckChanged {
            check: "key-location/main".into(),
            kind: "key-location".into(),
            subject: "repository main".into(),
            status: CheckStatus::Warning,
            reason: "the passphrase file is on the repository's disk".into(),
            action: "move it to another disk".into(),
        }
        .into(),
        KeyExportConfirmed {
            repository: RepositoryId::new("main"),
            key_check: "0123-4567-89ab-cdef".into(),
            by: "admin".into(),
        }
        .into(),
        LogHeadExported {
            seq: 42,
            signed: true,
            by: "auditor".into(),
        }
        .into(),
        ReportDelivered {
            delivery: "weekly-ops".into(),
            period: "weekly".into(),
            label: "2026-W49".into(),
            scope: "installation".into(),
            target: "webhook:ops".into(),
            attempt: 1,
            digest: "ab".repeat(32),
        }
        .into(),
        ReportDeliveryFailed {
            delivery: "weekly-ops".into(),
            period: "weekly".into(),
            label: "2026-W49".into(),
            scope: "installation".into(),
            target: "email".into(),
            attempt: 2,
            error: "connection refused".into(),
            will_retry: true,
        }
        .into(),
        ServiceRebuilt {
            repository: "offsite".into(),
            log: "0123456789abcdef".into(),
            recovered_seq: 4242,
            files: 7,
        }
        .into(),
        RepositoryPruned {
            job: JobId::new("prune-main-1"),
            repository: RepositoryId::new("main"),
            packs_before: 40,
            packs_deleted: 7,
            packs_repacked: 2,
            packs_written: 1,
            leftover_packs: 1,
            young_packs_kept: 1,
            packs_kept_for_locks: 3,
            bytes_freed: 123_456_789,
            took_ms: 4_200,
        }
        .into(),
        HookFailed {
            job: JobId::new("backup-web-7"),
            plan: PlanId::new("web"),
            phase: HookPhase::Pre,
            hook: "dump-db".into(),
            exit_code: Some(3),
            timed_out: false,
            reason: "exited with status 3: pg_dump: connection refused".into(),
            took_ms: 850,
        }
        .into(),
    ]
}

//! Golden bytes: the encoding of every event type and of the envelope is
//! pinned. A failure here means the on-disk format changed: add a schema
//! version and an upcaster instead (see `upcast.rs`). After adding a new
//! (type, version), `VOUCH_BLESS=1` appends its golden line (and creates a
//! missing fixture log); it refuses to change an existing line or fixture.

use std::collections::BTreeMap;

use crate::codec::{decode_envelope, decode_event, encode_body};
use crate::event::{Event, EVENT_TYPES};
use crate::format::{EventHash, GENESIS_HASH};
use crate::ids::SnapshotId;
use crate::testkit::{sample_events, sid};

const GOLDEN_V1: &str = include_str!("golden/v1.txt");

fn encodings() -> BTreeMap<String, String> {
    sample_events()
        .iter()
        .map(|e| {
            let bytes = e.encode_payload().expect("encode");
            (
                format!("{}@v{}", e.event_type(), e.schema_version()),
                hex::encode(bytes),
            )
        })
        .collect()
}

#[test]
fn every_event_type_has_a_sample() {
    let samples = sample_events();
    assert_eq!(samples.len(), EVENT_TYPES.len());
    for (e, (name, version)) in samples.iter().zip(EVENT_TYPES) {
        assert_eq!((e.event_type(), e.schema_version()), (*name, *version));
    }
}

fn golden() -> BTreeMap<String, String> {
    GOLDEN_V1
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn payload_encodings_match_golden_bytes() {
    let now = encodings();
    let golden = golden();
    if std::env::var_os("VOUCH_BLESS").is_some() {
        // Existing lines are a frozen contract: blessing only appends the
        // lines of new (type, version) pairs and refuses to change any.
        for (k, v) in &now {
            if let Some(old) = golden.get(k) {
                assert_eq!(
                    old, v,
                    "refusing to bless: the encoding of {k} changed; add a schema version instead"
                );
            }
        }
        let new: String = now
            .iter()
            .filter(|(k, _)| !golden.contains_key(*k))
            .map(|(k, v)| format!("{k} {v}\n"))
            .collect();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/golden/v1.txt");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .expect("open golden file");
        std::io::Write::write_all(&mut f, new.as_bytes()).expect("bless");
        return;
    }
    for (k, v) in &now {
        assert_eq!(golden.get(k), Some(v), "encoding of {k} changed");
    }
    // Lines of older versions stay (they must keep upcasting, see
    // `regression_t2_...`); every other line is a current (type, version).
    let current: Vec<&String> = golden
        .keys()
        .filter(|k| {
            let (t, v) = k.split_once("@v").expect("key");
            EVENT_TYPES
                .iter()
                .any(|(name, version)| *name == t && v.parse::<u16>().ok() >= Some(*version))
        })
        .collect();
    assert_eq!(current.len(), now.len(), "golden file lists other types");
}

/// What the first release's samples read as today: the v1 events lifted by
/// the upcasters, with the values that say what v1 did not record.
fn first_release_samples_upcast() -> Vec<Event> {
    use crate::event::*;
    let mut out = sample_events();
    out.truncate(30);
    for e in &mut out {
        match e {
            Event::PlanCreated(p) => pre_v4(&mut p.definition, true),
            Event::PlanChanged(p) => pre_v4(&mut p.definition, true),
            Event::JobScheduled(j) => j.spec = JobSpec::default(),
            Event::RestoreTestPassed(r) => unknown_coverage(&mut r.evidence),
            Event::RestoreTestFailed(r) => {
                unknown_coverage(&mut r.evidence);
                r.cause = "mismatch".into();
            }
            Event::AlertRaised(a) => {
                a.rule = String::new();
                a.labels.clear();
            }
            Event::BackupCommitted(b) => {
                b.changes = None;
                b.summary.total_bytes = None;
                b.summary.warnings = None;
            }
            Event::CopyCommitted(c) => c.summary.total_bytes = None,
            Event::AnomalyDetected(a) => a.paths.clear(),
            Event::AgentSeen(a) => {
                a.clock_skew_ms = None;
                a.version = None;
            }
            // Plans: the samples are unpaused and weekly already.
            _ => {}
        }
    }
    out
}

fn unknown_coverage(e: &mut crate::event::RestoreEvidence) {
    e.guest = None;
    e.files_in_point = None;
    e.bytes_in_point = None;
    e.complete = false;
}

#[test]
fn v1_golden_lines_upcast_to_what_v1_knew() {
    let golden = golden();
    let lifted = first_release_samples_upcast();
    for e in &lifted {
        let key = format!("{}@v1", e.event_type());
        let line = golden
            .get(&key)
            .unwrap_or_else(|| panic!("no v1 line for {key}"));
        let got = decode_event(e.event_type(), 1, &hex::decode(line).expect("hex"));
        assert_eq!(&got, e, "{key} upcasts to something else");
    }
    // The read-back of v1 names its damaged packs only in its text lines.
    let line = golden.get("repository.read_back@v1").expect("read_back v1");
    match decode_event("repository.read_back", 1, &hex::decode(line).expect("hex")) {
        Event::PacksReadBack(r) => {
            assert_eq!(r.damaged_packs, vec!["00ab".to_owned()]);
            assert_eq!(r.affected_points, None, "v1 never said which points");
        }
        other => panic!("read_back v1 reads as {other:?}"),
    }
}

#[test]
fn regression_t2_every_sample_encodes_to_its_golden_line_and_back() {
    let golden = golden();
    for e in sample_events() {
        let key = format!("{}@v{}", e.event_type(), e.schema_version());
        let line = golden
            .get(&key)
            .unwrap_or_else(|| panic!("no golden line for {key}"));
        let bytes = e.encode_payload().expect("encode");
        assert_eq!(&hex::encode(&bytes), line, "encoding of {key} changed");
        let pinned = hex::decode(line).expect("hex");
        assert_eq!(
            decode_event(e.event_type(), e.schema_version(), &pinned),
            e,
            "golden bytes of {key} no longer decode to the sample"
        );
    }
    for line in GOLDEN_V1.lines() {
        let (k, v) = line.split_once(' ').expect("line");
        let (t, ver) = k.split_once("@v").expect("key");
        let bytes = hex::decode(v).expect("hex");
        let e = decode_event(t, ver.parse().expect("version"), &bytes);
        assert!(!matches!(e, Event::Unknown(_)), "{k} did not decode");
    }
}

#[test]
fn snapshot_id_is_bin8_not_an_array() {
    let bytes = rmp_serde::to_vec(&sid(0xab)).expect("encode");
    assert_eq!(bytes.len(), 34);
    assert_eq!(&bytes[..2], &[0xc4, 0x20]);
    let back: SnapshotId = rmp_serde::from_slice(&bytes).expect("decode");
    assert_eq!(back, sid(0xab));
}

#[test]
fn envelope_encoding_is_pinned() {
    let e = sample_events().remove(28); // service.started
    let body = encode_body(7, 1_700_000_000_000_000_000, &GENESIS_HASH, &e).expect("encode");
    assert_eq!(
        hex::encode(&body),
        concat!(
            "96",                               // array of 6
            "07",                               // seq
            "cf17979cfe362a0000",               // recorded_unix_ns (uint64)
            "af736572766963652e73746172746564", // "service.started"
            "01",                               // schema version
            "c420",
            "0000000000000000000000000000000000000000000000000000000000000000", // prev hash
            "c407",
            "91a5302e312e30", // payload: ["0.1.0"]
        )
    );
    let env = decode_envelope(&body, EventHash::of(&body)).expect("decode");
    assert_eq!(
        (env.seq, env.recorded_unix_ns, env.schema_version, env.event),
        (7, 1_700_000_000_000_000_000, 1, e)
    );
}

#[test]
fn unknown_types_and_newer_versions_are_kept_raw() {
    let e = decode_event("teleport.started", 1, &[0x90]);
    assert_eq!(
        e,
        Event::Unknown(crate::event::UnknownEvent {
            event_type: "teleport.started".into(),
            schema_version: 1,
            payload: vec![0x90]
        })
    );
    // A newer version of a known type is unknown too, and re-encodes as is.
    let e = decode_event("service.started", 9, &[0x91, 0xa1, 0x78]);
    assert!(matches!(&e, Event::Unknown(u) if u.schema_version == 9));
    assert_eq!(e.encode_payload().expect("encode"), vec![0x91, 0xa1, 0x78]);
    assert_eq!(e.event_type(), "service.started");
    // A current version whose payload does not decode is kept, not dropped.
    let e = decode_event("service.started", 1, &[0xc1]);
    assert!(matches!(e, Event::Unknown(_)));
}

/// The committed fixture log of schema version 1 (every event type once)
/// must keep opening, verifying and decoding to the same events forever.
#[test]
fn the_v1_fixture_log_still_reads() {
    use std::sync::Arc;

    use crate::clock::ManualClock;
    use crate::log::{verify_chain, EventLog, LogOptions, LogReader};

    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/log-v1");
    if std::env::var_os("VOUCH_BLESS").is_some() && !fixture.exists() {
        // A committed fixture is never rewritten: bless only creates a
        // missing one (a new version gets a new directory).
        let clock = ManualClock::new(1_800_000_000_000_000_000);
        let mut log =
            EventLog::open(&fixture, LogOptions::default(), Arc::new(clock)).expect("open");
        log.append(&sample_events()).expect("append");
        drop(log);
        let _ = std::fs::remove_file(fixture.join("LOCK"));
        return;
    }
    // Read-only: readers take no lock and write nothing.
    // It holds the 30 event types of the first release, in the order of
    // `sample_events`; types added later are appended to the samples and
    // pinned by their golden lines instead.
    const FIRST_RELEASE_TYPES: usize = 30;
    let report = verify_chain(&fixture).expect("verify");
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.events, FIRST_RELEASE_TYPES as u64);
    let events: Vec<Event> = LogReader::new(&fixture)
        .replay_from(1)
        .expect("replay")
        .map(|e| e.expect("envelope").event)
        .collect();
    let mut expected = first_release_samples_upcast();
    // The v1 read-back's packs are read off its text; it named no points.
    for e in &mut expected {
        if let Event::PacksReadBack(r) = e {
            r.affected_points = None;
        }
    }
    assert_eq!(events[..], expected[..FIRST_RELEASE_TYPES]);
}

#[test]
fn regression_l12_paused_is_always_written_and_v1_plans_read_both_shapes() {
    let mut def = crate::testkit::plan_def(3600, 7200);
    let unpaused = rmp_serde::to_vec(&def).expect("encode");
    def.paused = true;
    let paused = rmp_serde::to_vec(&def).expect("encode");
    assert_eq!(
        unpaused.len(),
        paused.len(),
        "v2 writes the flag either way"
    );
    let back: crate::plan::PlanDefinition = rmp_serde::from_slice(&paused).expect("decode");
    assert!(back.paused);
    // A v1 plan.created without the flag (as v1 wrote unpaused plans) and
    // one with it (as v1 wrote paused ones) both lift to v2.
    let golden = golden();
    let v1 = hex::decode(golden.get("plan.created@v1").expect("v1 line")).expect("hex");
    match decode_event("plan.created", 1, &v1) {
        Event::PlanCreated(p) => {
            assert!(!p.definition.paused);
            assert_eq!(
                p.definition.restore_test.full_every,
                Some(std::time::Duration::from_secs(
                    crate::upcast::V1_FULL_EVERY_SECS
                ))
            );
        }
        other => panic!("plan.created v1 reads as {other:?}"),
    }
    let mut with_flag = v1.clone();
    // [plan, def]: def is the second element, a fixarray of 7 (0x97); make
    // it 8 with a trailing `true`.
    let def_at = with_flag
        .iter()
        .position(|b| *b == 0x97)
        .expect("fixarray 7");
    with_flag[def_at] = 0x98;
    with_flag.push(0xc3);
    match decode_event("plan.created", 1, &with_flag) {
        Event::PlanCreated(p) => assert!(p.definition.paused),
        other => panic!("paused plan.created v1 reads as {other:?}"),
    }
}

#[test]
fn snapshot_ids_are_hex_in_json_and_bin8_in_msgpack() {
    let id = crate::ids::SnapshotId([0xab; 32]);
    let json = serde_json::to_string(&id).expect("json");
    assert_eq!(json, format!("\"{}\"", "ab".repeat(32)));
    let back: crate::ids::SnapshotId = serde_json::from_str(&json).expect("json back");
    assert_eq!(back, id);
    let mp = rmp_serde::to_vec(&id).expect("msgpack");
    assert_eq!(&mp[..2], &[0xc4, 32]);
}

/// What a plan of schema v3 (`replica` kept) or older knew: no boot check,
/// no dump policy.
fn pre_v4(d: &mut crate::plan::PlanDefinition, pre_v3: bool) {
    pre_v5(d);
    d.restore_test.boot = None;
    d.proxmox = None;
    if pre_v3 {
        d.replica = None;
    }
}

/// What a plan event of before schema v5 did not record.
fn pre_v5(d: &mut crate::plan::PlanDefinition) {
    pre_v6(d);
    d.anomaly_lock = None;
}

/// What a plan event of before schema v6 did not record: its source's
/// path alone, nothing excluded, no hooks, UTC.
fn pre_v6(d: &mut crate::plan::PlanDefinition) {
    d.files = Default::default();
    d.hooks = Default::default();
    d.time_zone = None;
}

#[test]
fn plan_v5_golden_lines_upcast_to_plans_of_one_path_no_hooks_in_utc() {
    let golden = golden();
    let mut seen = 0;
    for sample in sample_events() {
        let name = sample.event_type();
        if name != "plan.created" && name != "plan.changed" {
            continue;
        }
        let line = golden
            .get(&format!("{name}@v5"))
            .unwrap_or_else(|| panic!("no v5 line for {name}"));
        let got = decode_event(name, 5, &hex::decode(line).expect("hex"));
        let mut want = sample.clone();
        match &mut want {
            Event::PlanCreated(p) => pre_v6(&mut p.definition),
            Event::PlanChanged(p) => pre_v6(&mut p.definition),
            _ => unreachable!(),
        }
        assert_eq!(got, want, "{name} v5 upcasts to the plan v5 knew");
        seen += 1;
    }
    assert_eq!(seen, 2);
}

#[test]
fn plan_v4_golden_lines_upcast_to_plans_without_an_anomaly_lock() {
    let golden = golden();
    for sample in sample_events() {
        let name = sample.event_type();
        if name != "plan.created" && name != "plan.changed" {
            continue;
        }
        let line = golden
            .get(&format!("{name}@v4"))
            .unwrap_or_else(|| panic!("no v4 line for {name}"));
        let got = decode_event(name, 4, &hex::decode(line).expect("hex"));
        let mut want = sample.clone();
        match &mut want {
            Event::PlanCreated(p) => pre_v5(&mut p.definition),
            Event::PlanChanged(p) => pre_v5(&mut p.definition),
            _ => unreachable!(),
        }
        assert_eq!(
            got, want,
            "{name} v4 upcasts to a plan without an anomaly lock"
        );
    }
}

/// The golden lines of `backup.committed` at `backup_version` and
/// `copy.committed` at `copy_version` upcast to the samples with `forget`
/// applied to their summaries (what those versions did not record), the
/// rest as written.
fn summary_lines_upcast(
    backup_version: u16,
    copy_version: u16,
    forget: impl Fn(&mut crate::event::BackupSummary, bool),
) {
    let golden = golden();
    let mut seen = 0;
    for sample in sample_events() {
        let (name, version) = match sample.event_type() {
            "backup.committed" => ("backup.committed", backup_version),
            "copy.committed" => ("copy.committed", copy_version),
            _ => continue,
        };
        let line = golden
            .get(&format!("{name}@v{version}"))
            .unwrap_or_else(|| panic!("no v{version} line for {name}"));
        let got = decode_event(name, version, &hex::decode(line).expect("hex"));
        let mut want = sample.clone();
        match &mut want {
            Event::BackupCommitted(b) => forget(&mut b.summary, true),
            Event::CopyCommitted(c) => forget(&mut c.summary, false),
            other => panic!("{other:?}"),
        }
        assert_eq!(got, want, "{name}@v{version} upcasts to something else");
        seen += 1;
    }
    assert_eq!(seen, 2, "both samples were checked");
}

/// `backup.committed` v2 and `copy.committed` v1 did not record the
/// point's size: they upcast with `total_bytes` none, the rest as written.
#[test]
fn backup_and_copy_golden_lines_of_before_the_size_upcast_to_an_unknown_size() {
    summary_lines_upcast(2, 1, |summary, _| {
        assert!(summary.total_bytes.is_some(), "the sample has a size");
        summary.total_bytes = None;
        summary.warnings = None;
    });
}

/// `backup.committed` v3 and `copy.committed` v2 did not count warnings:
/// they upcast with `warnings` none (not "no warnings"), the rest as
/// written.
#[test]
fn backup_and_copy_golden_lines_of_before_warnings_upcast_to_uncounted() {
    summary_lines_upcast(3, 2, |summary, backup| {
        if backup {
            assert_eq!(summary.warnings, Some(2), "the sample counts some");
        }
        summary.warnings = None;
    });
}

#[test]
fn restore_test_v2_golden_lines_upcast_to_tests_that_started_no_guest() {
    let golden = golden();
    for sample in sample_events() {
        let name = sample.event_type();
        if !name.starts_with("restore_test.") || name == "restore_test.started" {
            continue;
        }
        let line = golden
            .get(&format!("{name}@v2"))
            .unwrap_or_else(|| panic!("no v2 line for {name}"));
        let got = decode_event(name, 2, &hex::decode(line).expect("hex"));
        let mut want = sample.clone();
        match &mut want {
            Event::RestoreTestPassed(t) => {
                assert!(t.evidence.guest.is_some(), "the sample starts a guest");
                t.evidence.guest = None;
            }
            Event::RestoreTestFailed(t) => t.evidence.guest = None,
            other => panic!("{other:?}"),
        }
        assert_eq!(got, want, "{name}@v2 upcasts to something else");
    }
}

#[test]
fn plan_v3_golden_lines_upcast_to_plans_that_boot_nothing() {
    let golden = golden();
    let samples = sample_events();
    for (i, name) in [(0, "plan.created"), (1, "plan.changed")] {
        let line = golden
            .get(&format!("{name}@v3"))
            .unwrap_or_else(|| panic!("no v3 line for {name}"));
        let got = decode_event(name, 3, &hex::decode(line).expect("hex"));
        let mut want = samples[i].clone();
        match &mut want {
            Event::PlanCreated(p) => pre_v4(&mut p.definition, false),
            Event::PlanChanged(p) => pre_v4(&mut p.definition, false),
            other => panic!("sample {i} is {other:?}"),
        }
        assert_eq!(got, want, "{name}@v3 upcasts to something else");
    }
    // The v4 sample does boot and remove its dumps: the test is not vacuous.
    assert!(matches!(&samples[0], Event::PlanCreated(p)
        if p.definition.restore_test.boot.is_some() && p.definition.proxmox.is_some()));
}

#[test]
fn plan_v2_golden_lines_upcast_to_plans_without_a_replica() {
    let golden = golden();
    let samples = sample_events();
    for (i, name) in [(0, "plan.created"), (1, "plan.changed")] {
        let line = golden
            .get(&format!("{name}@v2"))
            .unwrap_or_else(|| panic!("no v2 line for {name}"));
        let got = decode_event(name, 2, &hex::decode(line).expect("hex"));
        let mut want = samples[i].clone();
        match &mut want {
            Event::PlanCreated(p) => pre_v4(&mut p.definition, true),
            Event::PlanChanged(p) => pre_v4(&mut p.definition, true),
            other => panic!("sample {i} is {other:?}"),
        }
        assert_eq!(got, want, "{name}@v2 upcasts to something else");
    }
    // The sample of v3 does carry one, so the test above is not vacuous.
    assert!(matches!(&samples[1], Event::PlanChanged(p) if p.definition.replica.is_some()));
}

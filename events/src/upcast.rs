//! Upcasting: lifting payloads written with an older schema version to the
//! current one.
//!
//! Upcasters work on the wire shape (a msgpack value: structs are
//! positional arrays), never on today's Rust types, so an upcaster written
//! once stays right however the structs change later. When a payload struct
//! in `event.rs` changes:
//!
//! 1. add a function here that lifts the old array to the new one (append
//!    the new fields with the value that states what the old event knew:
//!    "not known" rather than a guess that looks good);
//! 2. add a row to [`UPCASTERS`];
//! 3. bump the version in `event.rs`'s table and bless the golden bytes of
//!    the new version (the old line stays: it must keep upcasting); keep the
//!    fixture log of the old version under `events/tests/fixtures/`.

/// Lifts a payload of `(event type, from version)` to `from version + 1`.
pub type Upcaster = fn(&[u8]) -> Result<Vec<u8>, String>;

/// Every upcaster, as (event type, from version, function).
pub const UPCASTERS: &[(&str, u16, Upcaster)] = &[
    ("plan.created", 1, plan_v1_to_v2),
    ("plan.changed", 1, plan_v1_to_v2),
    ("plan.created", 2, plan_v2_to_v3),
    ("plan.changed", 2, plan_v2_to_v3),
    ("plan.created", 3, plan_v3_to_v4),
    ("plan.changed", 3, plan_v3_to_v4),
    ("plan.created", 4, plan_v4_to_v5),
    ("plan.changed", 4, plan_v4_to_v5),
    ("plan.created", 5, plan_v5_to_v6),
    ("plan.changed", 5, plan_v5_to_v6),
    ("job.scheduled", 1, job_scheduled_v1_to_v2),
    ("job.scheduled", 2, job_scheduled_v2_to_v3),
    ("restore_test.passed", 1, restore_test_passed_v1_to_v2),
    ("restore_test.failed", 1, restore_test_failed_v1_to_v2),
    ("restore_test.passed", 2, restore_test_v2_to_v3),
    ("restore_test.failed", 2, restore_test_v2_to_v3),
    ("alert.raised", 1, alert_raised_v1_to_v2),
    ("repository.read_back", 1, read_back_v1_to_v2),
    ("backup.committed", 1, backup_committed_v1_to_v2),
    ("anomaly.detected", 1, anomaly_detected_v1_to_v2),
    ("agent.seen", 1, agent_seen_v1_to_v2),
    ("backup.committed", 2, backup_committed_v2_to_v3),
    ("copy.committed", 1, copy_committed_v1_to_v2),
    ("backup.committed", 3, backup_committed_v3_to_v4),
    ("copy.committed", 2, copy_committed_v2_to_v3),
];

use rmpv::Value;

/// How often a v1 plan wants a complete restore test (seconds): v1 had no
/// proof policy, and the default of new plans is weekly.
pub const V1_FULL_EVERY_SECS: u64 = 7 * 86_400;

fn decode(payload: &[u8]) -> Result<Vec<Value>, String> {
    let mut r = payload;
    match rmpv::decode::read_value(&mut r).map_err(|e| e.to_string())? {
        Value::Array(a) if r.is_empty() => Ok(a),
        Value::Array(_) => Err("trailing bytes after the payload".into()),
        other => Err(format!("payload is not an array but {other}")),
    }
}

fn encode(fields: Vec<Value>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &Value::Array(fields)).map_err(|e| e.to_string())?;
    Ok(out)
}

fn expect_len(
    fields: &[Value],
    len: std::ops::RangeInclusive<usize>,
    what: &str,
) -> Result<(), String> {
    if len.contains(&fields.len()) {
        Ok(())
    } else {
        Err(format!(
            "{what} has {} fields, expected {len:?}",
            fields.len()
        ))
    }
}

/// `plan.created` / `plan.changed` v1 → v2: the definition's `paused` is
/// always written (v1 wrote it only when true) and its restore-test policy
/// gains `full_every` (weekly).
fn plan_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 2..=2, "plan event")?;
    let Value::Array(def) = &mut fields[1] else {
        return Err("plan definition is not an array".into());
    };
    expect_len(def, 7..=8, "plan definition")?;
    if def.len() == 7 {
        def.push(Value::Boolean(false));
    }
    let Value::Array(restore_test) = &mut def[4] else {
        return Err("restore-test policy is not an array".into());
    };
    expect_len(restore_test, 3..=3, "restore-test policy")?;
    restore_test.push(Value::Array(vec![
        Value::from(V1_FULL_EVERY_SECS),
        Value::from(0u32),
    ]));
    encode(fields)
}

/// `plan.*` v2 -> v3: the definition gains `replica` (none: a v2 plan had
/// no second copy).
fn plan_v2_to_v3(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 2..=2, "plan event")?;
    let Value::Array(def) = &mut fields[1] else {
        return Err("plan definition is not an array".into());
    };
    expect_len(def, 8..=8, "plan definition")?;
    def.push(Value::Nil);
    encode(fields)
}

/// `plan.*` v3 -> v4: the restore-test policy gains `boot` and the
/// definition `proxmox` (none: a v3 plan booted nothing and dumped its
/// guests in snapshot mode, keeping the dumps).
fn plan_v3_to_v4(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 2..=2, "plan event")?;
    let Value::Array(def) = &mut fields[1] else {
        return Err("plan definition is not an array".into());
    };
    expect_len(def, 9..=9, "plan definition")?;
    let Value::Array(restore_test) = &mut def[4] else {
        return Err("restore-test policy is not an array".into());
    };
    expect_len(restore_test, 4..=4, "restore-test policy")?;
    restore_test.push(Value::Nil);
    def.push(Value::Nil);
    encode(fields)
}

/// Plan events v4 → v5: no anomaly lock.
fn plan_v4_to_v5(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 2..=2, "plan event")?;
    let Value::Array(def) = &mut fields[1] else {
        return Err("plan definition is not an array".into());
    };
    expect_len(def, 10..=10, "plan definition")?;
    def.push(Value::Nil);
    encode(fields)
}

/// Plan events v5 → v6: the source's path alone, nothing excluded, no
/// hooks, UTC.
fn plan_v5_to_v6(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 2..=2, "plan event")?;
    let Value::Array(def) = &mut fields[1] else {
        return Err("plan definition is not an array".into());
    };
    expect_len(def, 11..=11, "plan definition")?;
    def.push(Value::Array(vec![
        Value::Array(Vec::new()),
        Value::Array(Vec::new()),
        Value::Array(Vec::new()),
        Value::Boolean(false),
        Value::Boolean(false),
        Value::Array(Vec::new()),
        Value::Nil,
    ]));
    def.push(Value::Array(vec![Value::Nil, Value::Nil]));
    def.push(Value::Nil);
    encode(fields)
}

/// `job.scheduled` v1 → v2: an empty spec (what v1 did not record).
fn job_scheduled_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 6..=6, "job.scheduled")?;
    fields.push(Value::Array(vec![
        Value::Nil,
        Value::Nil,
        Value::Nil,
        Value::Array(Vec::new()),
        Value::from(0u32),
        Value::from(""),
    ]));
    encode(fields)
}

/// `job.scheduled` v2 → v3: the spec gains `restore` (no restore: nil).
fn job_scheduled_v2_to_v3(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 7..=7, "job.scheduled")?;
    let Value::Array(spec) = &mut fields[6] else {
        return Err("job.scheduled: the spec is not an array".into());
    };
    expect_len(spec, 6..=6, "job.scheduled spec")?;
    spec.push(Value::Nil);
    encode(fields)
}

/// Restore evidence v1 → v2: coverage not known (`None`, `None`, not
/// complete).
fn evidence_v1_to_v2(evidence: &mut Value) -> Result<(), String> {
    let Value::Array(e) = evidence else {
        return Err("restore evidence is not an array".into());
    };
    expect_len(e, 7..=7, "restore evidence")?;
    e.extend([Value::Nil, Value::Nil, Value::Boolean(false)]);
    Ok(())
}

fn restore_test_passed_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 3..=3, "restore_test.passed")?;
    evidence_v1_to_v2(&mut fields[2])?;
    encode(fields)
}

/// v1 failures came only from a restore that completed and compared
/// unequal: cause `mismatch`.
fn restore_test_failed_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 4..=4, "restore_test.failed")?;
    evidence_v1_to_v2(&mut fields[2])?;
    fields.push(Value::from("mismatch"));
    encode(fields)
}

/// `restore_test.*` v2 → v3: the evidence gains `guest` (none: v2 tests
/// started no guest).
fn restore_test_v2_to_v3(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 3..=5, "restore_test event")?;
    let Value::Array(e) = &mut fields[2] else {
        return Err("restore evidence is not an array".into());
    };
    expect_len(e, 10..=10, "restore evidence")?;
    e.push(Value::Nil);
    encode(fields)
}

/// `alert.raised` v1 → v2: no rule (rendered `VouchAlert`), no labels.
fn alert_raised_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 4..=4, "alert.raised")?;
    fields.push(Value::from(""));
    fields.push(Value::Map(Vec::new()));
    encode(fields)
}

/// `repository.read_back` v1 → v2: the damaged packs are read off the v1
/// lines (`pack <hex>: ...`); which points they touch was not recorded, so
/// every live point of the repository is suspect (`None`).
fn read_back_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 7..=7, "repository.read_back")?;
    let Value::Array(lines) = &fields[6] else {
        return Err("damaged is not an array".into());
    };
    let mut packs: Vec<String> = Vec::new();
    for line in lines {
        let Some(pack) = line.as_str().and_then(pack_of_damage_line) else {
            continue;
        };
        if !packs.contains(&pack) {
            packs.push(pack);
        }
    }
    fields.push(Value::Array(packs.into_iter().map(Value::from).collect()));
    fields.push(Value::Nil);
    encode(fields)
}

/// `backup.committed` v1 → v2: no change figures (v1 did not count what
/// changed; the heuristic's baseline skips such points).
fn backup_committed_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 6..=6, "backup.committed")?;
    fields.push(Value::Nil);
    encode(fields)
}

/// `backup.committed` v2 → v3: the snapshot's size was not told
/// (`summary.total_bytes` none; `summary.bytes` was always the bytes read).
fn backup_committed_v2_to_v3(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 7..=7, "backup.committed")?;
    summary_without_total(&mut fields[5], "backup.committed")?;
    encode(fields)
}

/// `copy.committed` v1 → v2: the copy's size was not told.
fn copy_committed_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 10..=10, "copy.committed")?;
    summary_without_total(&mut fields[6], "copy.committed")?;
    encode(fields)
}

/// `backup.committed` v3 → v4: warnings not counted.
fn backup_committed_v3_to_v4(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 7..=7, "backup.committed")?;
    summary_without_warnings(&mut fields[5], "backup.committed")?;
    encode(fields)
}

/// `copy.committed` v2 → v3: warnings not counted.
fn copy_committed_v2_to_v3(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 10..=10, "copy.committed")?;
    summary_without_warnings(&mut fields[6], "copy.committed")?;
    encode(fields)
}

/// A `BackupSummary` of six fields gets its seventh, `warnings`, none.
fn summary_without_warnings(summary: &mut Value, what: &str) -> Result<(), String> {
    match summary {
        Value::Array(a) if a.len() == 6 => {
            a.push(Value::Nil);
            Ok(())
        }
        other => Err(format!(
            "{what}: the summary is not an array of 6 fields but {other}"
        )),
    }
}

/// A `BackupSummary` of five fields gets its sixth, `total_bytes`, none.
fn summary_without_total(summary: &mut Value, what: &str) -> Result<(), String> {
    match summary {
        Value::Array(a) if a.len() == 5 => {
            a.push(Value::Nil);
            Ok(())
        }
        other => Err(format!(
            "{what}: the summary is not an array of 5 fields but {other}"
        )),
    }
}

/// `anomaly.detected` v1 → v2: no paths named.
fn anomaly_detected_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 3..=3, "anomaly.detected")?;
    fields.push(Value::Array(Vec::new()));
    encode(fields)
}

/// `agent.seen` v1 → v2: no clock skew, no version told.
fn agent_seen_v1_to_v2(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut fields = decode(payload)?;
    expect_len(&fields, 1..=1, "agent.seen")?;
    fields.push(Value::Nil);
    fields.push(Value::Nil);
    encode(fields)
}

/// The pack id a damage line of the read-back names (`pack <hex>: ...`).
pub fn pack_of_damage_line(line: &str) -> Option<String> {
    let rest = line.strip_prefix("pack ")?;
    let hex = rest.split(':').next()?;
    (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hex.to_owned())
}

/// Lifts `payload` step by step while an upcaster exists; returns the final
/// version and payload, or `None` if no upcaster applies at all.
pub fn upcast(
    event_type: &str,
    version: u16,
    payload: &[u8],
) -> Option<Result<(u16, Vec<u8>), String>> {
    upcast_with(UPCASTERS, event_type, version, payload)
}

pub(crate) fn upcast_with(
    table: &[(&str, u16, Upcaster)],
    event_type: &str,
    version: u16,
    payload: &[u8],
) -> Option<Result<(u16, Vec<u8>), String>> {
    let mut v = version;
    let mut p: Option<Vec<u8>> = None;
    while let Some((_, _, f)) = table
        .iter()
        .find(|(t, from, _)| *t == event_type && *from == v)
    {
        let input = p.as_deref().unwrap_or(payload);
        match f(input) {
            Ok(next) => {
                p = Some(next);
                v += 1;
            }
            Err(e) => return Some(Err(e)),
        }
    }
    p.map(|p| Ok((v, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add_one(p: &[u8]) -> Result<Vec<u8>, String> {
        let mut v = p.to_vec();
        v.push(1);
        Ok(v)
    }

    fn refuse(_: &[u8]) -> Result<Vec<u8>, String> {
        Err("no".into())
    }

    #[test]
    fn upcasters_chain_step_by_step() {
        let table: &[(&str, u16, Upcaster)] =
            &[("a", 1, add_one), ("a", 2, add_one), ("b", 1, refuse)];
        assert_eq!(
            upcast_with(table, "a", 1, &[9]),
            Some(Ok((3, vec![9, 1, 1])))
        );
        assert_eq!(upcast_with(table, "a", 2, &[9]), Some(Ok((3, vec![9, 1]))));
        assert_eq!(upcast_with(table, "a", 3, &[9]), None);
        assert_eq!(upcast_with(table, "c", 1, &[9]), None);
        assert_eq!(upcast_with(table, "b", 1, &[9]), Some(Err("no".into())));
    }
}

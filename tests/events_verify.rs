//! `vouch events verify` and `vouch events keygen`, the real binary on a
//! log written by a real `vouch serve` (security review finding 11, issue
//! 13): it verifies while the service runs, names the seq of a flipped
//! byte, lets a consistent rewrite through without a key (the documented
//! limitation) and catches it with the chain key; a key file inside the
//! data directory is refused.

use std::borrow::Cow;
use std::path::Path;
use std::process::{Command, Output};

use vouch_events::format::{self, EventHash, PersistedEnvelope};
use vouch_events::{encode_body, Event, JobFinished, JobId};

mod common;

use common::served::*;

fn vouch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args(args)
        .env_remove("VOUCH_DATA_DIR")
        .env_remove("VOUCH_CHAIN_KEY_FILE")
        .env_remove("VOUCH_CONFIG")
        .output()
        .expect("running vouch")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn verify(data: &Path, key: Option<&Path>) -> Output {
    let mut args = vec![
        "events",
        "verify",
        "--data-dir",
        data.to_str().expect("utf-8"),
    ];
    if let Some(k) = key {
        args.extend(["--chain-key-file", k.to_str().expect("utf-8")]);
    }
    vouch(&args)
}

/// Rewrites event `seq` of the first segment as `job.finished "forged"`
/// and recomputes its checksum, every later `prev_hash` and checksum, and
/// `HEAD`, with the crate's own format functions: what someone with write
/// access to `events/` and no key can do.
fn rewrite_consistently(log: &Path, seq: u64) {
    let path = log.join(format::segment_file_name(1));
    let data = std::fs::read(&path).expect("read");
    let mut out = data[..format::SEGMENT_HEADER_LEN].to_vec();
    let mut pos = format::SEGMENT_HEADER_LEN;
    let mut prev = format::GENESIS_HASH;
    let mut head = (0, prev);
    while pos < data.len() {
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().expect("4")) as usize;
        let body = &data[pos + format::RECORD_HEADER_LEN..pos + format::RECORD_HEADER_LEN + len];
        let env: PersistedEnvelope<'_> = rmp_serde::from_slice(body).expect("decode");
        let new_body = if env.seq == seq {
            let forged: Event = JobFinished {
                job: JobId::new("forged"),
            }
            .into();
            encode_body(env.seq, env.recorded_unix_ns, &prev, &forged).expect("encode")
        } else {
            rmp_serde::to_vec(&PersistedEnvelope {
                prev_hash: prev.0,
                event_type: Cow::Owned(env.event_type.into_owned()),
                payload: Cow::Owned(env.payload.into_owned()),
                ..env
            })
            .expect("encode")
        };
        let hash = EventHash::of(&new_body);
        out.extend_from_slice(&(new_body.len() as u32).to_le_bytes());
        out.extend_from_slice(&hash.0);
        out.extend_from_slice(&new_body);
        head = (env.seq, hash);
        prev = hash;
        pos += format::RECORD_HEADER_LEN + len;
    }
    std::fs::write(&path, out).expect("write");
    let mut slot = b"VOUCHHD1".to_vec();
    slot.extend_from_slice(&u64::MAX.to_le_bytes());
    slot.extend_from_slice(&head.0.to_le_bytes());
    slot.extend_from_slice(&head.1 .0);
    let sum = blake3::hash(&slot);
    slot.extend_from_slice(sum.as_bytes());
    let mut file = vec![0u8; 1024];
    file[..88].copy_from_slice(&slot);
    std::fs::write(log.join("HEAD"), file).expect("write head");
}

#[test]
fn events_verify_on_a_served_log_flags_flips_and_keyed_rewrites() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let key = dir.path().join("keys").join("chain.key");
    std::fs::create_dir_all(key.parent().expect("parent")).expect("mkdir");
    let o = vouch(&["events", "keygen", "--out", key.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", text(&o));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).expect("key").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key is private");
    let secret = std::fs::read_to_string(&key).expect("key");
    assert!(
        !text(&o).contains(secret.trim()),
        "the key is never printed"
    );
    // Keygen never overwrites.
    let o = vouch(&["events", "keygen", "--out", key.to_str().expect("utf-8")]);
    assert!(!o.status.success());

    let config = dir.path().join("vouch.toml");
    std::fs::write(
        &config,
        format!(
            "[log]\nchain_key_file = {:?}\n",
            key.to_str().expect("utf-8")
        ),
    )
    .expect("config");
    let svc = start(&data, &config, None);
    // While the service runs (it holds the log's lock): read-only, no lock.
    let o = verify(&data, Some(&key));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("AUTHENTICATED up to seq"), "{out}");
    assert!(out.contains("result:     OK"), "{out}");
    assert!(!out.contains(secret.trim()), "the key is never printed");
    let o = verify(&data, None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("UNAUTHENTICATED"), "{}", text(&o));
    // The key named by the service's configuration file.
    let o = vouch(&[
        "events",
        "verify",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--config",
        config.to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("AUTHENTICATED up to seq"), "{}", text(&o));

    // The head is exported for anchoring: the API and /metrics agree with
    // what the offline verify finds.
    let api = get(&svc, "/api/v1/log/head");
    let (status, metrics) = http(svc.addr, "GET", "/metrics", Some(&svc.token), None);
    assert_eq!(status, 200);
    let mut args = vec!["--json", "events", "verify", "--data-dir"];
    args.push(data.to_str().expect("utf-8"));
    args.extend(["--chain-key-file", key.to_str().expect("utf-8")]);
    let o = vouch(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(report["authenticated"], true, "{report}");
    let seq = api["seq"].as_u64().expect("seq");
    assert!(seq >= 1, "{api}");
    let cp = &api["checkpoint"];
    assert_eq!(cp["mac"].as_str().map(str::len), Some(64), "{api}");
    assert!(cp["seq"].as_u64().expect("cp seq") <= seq, "{api}");
    if report["head_seq"].as_u64() == Some(seq) {
        assert_eq!(report["head_hash"], api["hash"], "{report} {api}");
        assert_eq!(
            report["latest_checkpoint"]["mac"], cp["mac"],
            "{report} {api}"
        );
    }
    let hash = api["hash"].as_str().expect("hash");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("vouch_event_log_head_seq ")),
        "{metrics}"
    );
    // The head's hash as a label-free number (its first 48 bits), one
    // series whatever the head.
    let prefix: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("vouch_event_log_head_hash_prefix"))
        .collect();
    assert_eq!(prefix.len(), 1, "one series: {metrics}");
    assert!(!metrics.contains("vouch_event_log_head_info"), "{metrics}");
    if metrics.contains(&format!("vouch_event_log_head_seq {seq}\n")) {
        let expected = i64::from_str_radix(&hash[..12], 16).expect("hex");
        assert_eq!(
            prefix[0],
            format!("vouch_event_log_head_hash_prefix {expected}")
        );
    }
    drop(svc);

    let log = data.join("events");
    let pristine = std::fs::read(log.join(format::segment_file_name(1))).expect("read");
    let head = std::fs::read(log.join("HEAD")).expect("read");
    rewrite_consistently(&log, 1);
    let o = verify(&data, None);
    assert_eq!(
        o.status.code(),
        Some(0),
        "without a key a consistent rewrite verifies (documented): {}",
        text(&o)
    );
    assert!(text(&o).contains("UNAUTHENTICATED"), "{}", text(&o));
    let o = verify(&data, Some(&key));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("was rewritten"), "{}", text(&o));
    assert!(text(&o).contains("what to do"), "{}", text(&o));

    // A flipped byte in the first record of the genuine log: seq 1 named.
    let mut flipped = pristine;
    let len = u32::from_le_bytes(
        flipped[format::SEGMENT_HEADER_LEN..format::SEGMENT_HEADER_LEN + 4]
            .try_into()
            .expect("4"),
    ) as usize;
    flipped[format::SEGMENT_HEADER_LEN + format::RECORD_HEADER_LEN + len - 1] ^= 0x01;
    std::fs::write(log.join(format::segment_file_name(1)), flipped).expect("write");
    std::fs::write(log.join("HEAD"), head).expect("write");
    let o = verify(&data, None);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("FAILED at seq 1 ("), "{out}");
    assert!(out.contains("byte 24"), "{out}");
}

#[test]
fn a_chain_key_inside_the_data_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("events")).expect("mkdir");
    let key = data.join("chain.key");
    let o = vouch(&["events", "keygen", "--out", key.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", text(&o));
    let o = verify(&data, Some(&key));
    assert!(!o.status.success());
    assert!(
        text(&o).contains("inside the data directory"),
        "{}",
        text(&o)
    );
    let o = vouch(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--chain-key-file",
        key.to_str().expect("utf-8"),
    ]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("inside the data directory"),
        "{}",
        text(&o)
    );
    assert!(
        !data.join("events").join("CHECKPOINTS").exists(),
        "refused before the log is opened"
    );
}

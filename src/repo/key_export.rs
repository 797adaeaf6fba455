//! Exports of a repository's master key, for when its passphrase is lost
//! (`vouch key export`, `vouch key recover`), and the key's check code,
//! which an administrator gives the service to confirm they hold an
//! export (the security center's `key-export` check).
//!
//! Two forms, both holding the 96 bytes of the master key and the
//! repository's id:
//!
//! * a JSON file (`"vouch_key_export": 1`), mode 0600;
//! * a paper key: the bytes as 8 lines of 6 groups of 4 hex digits, each
//!   line ending in a 4-digit checksum of its number and digits, so a typo
//!   is found on its line when it is typed back in.
//!
//! The check code is a keyed hash of the key (BLAKE3 `derive_key` with its
//! own context): it names the key without revealing it.

use serde::{Deserialize, Serialize};

use crate::crypto::MasterKey;
use crate::error::{Error, Result};

/// BLAKE3 `derive_key` context of the check code.
const CHECK_CONTEXT: &str = "vouch 2026-12 master key check code v1";
/// BLAKE3 `derive_key` context of a paper line's checksum.
const LINE_CONTEXT: &str = "vouch 2026-12 paper key line checksum v1";
/// The first line of a paper key.
const PAPER_HEADER: &str = "VOUCH PAPER KEY v1";
/// Bytes per paper line (6 groups of 2 bytes).
const LINE_BYTES: usize = 12;

/// The check code of `key`: 16 hex digits in groups of 4.
pub fn check_code(key: &MasterKey) -> String {
    let mut material = zeroize::Zeroizing::new([0u8; 96]);
    material[..32].copy_from_slice(&key.data_key);
    material[32..64].copy_from_slice(&key.id_key);
    material[64..].copy_from_slice(&key.chunker_key);
    let digest = blake3::derive_key(CHECK_CONTEXT, &material[..]);
    groups(&hex::encode(&digest[..8]))
}

fn groups(hex: &str) -> String {
    hex.as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("-")
}

/// The JSON form.
#[derive(Serialize, Deserialize)]
struct ExportFile {
    vouch_key_export: u32,
    repository: String,
    check: String,
    data_key: String,
    id_key: String,
    chunker_key: String,
}

/// A recovered export: the key and the repository it says it is of.
pub struct Recovered {
    /// The master key.
    pub key: MasterKey,
    /// The repository id it was exported from (hex).
    pub repository: String,
}

/// The JSON export of `key` of repository `repository` (its config id).
pub fn to_json(key: &MasterKey, repository: &str) -> zeroize::Zeroizing<String> {
    let file = ExportFile {
        vouch_key_export: 1,
        repository: repository.to_owned(),
        check: check_code(key),
        data_key: hex::encode(key.data_key),
        id_key: hex::encode(key.id_key),
        chunker_key: hex::encode(key.chunker_key),
    };
    let mut text = serde_json::to_string_pretty(&file).unwrap_or_default();
    text.push('\n');
    zeroize::Zeroizing::new(text)
}

fn line_checksum(number: usize, digits: &str) -> String {
    let digest = blake3::derive_key(LINE_CONTEXT, format!("{number}:{digits}").as_bytes());
    hex::encode(&digest[..2])
}

/// The paper form of `key` of repository `repository`.
pub fn to_paper(key: &MasterKey, repository: &str) -> zeroize::Zeroizing<String> {
    let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(96));
    bytes.extend_from_slice(&key.data_key);
    bytes.extend_from_slice(&key.id_key);
    bytes.extend_from_slice(&key.chunker_key);
    let mut out = format!(
        "{PAPER_HEADER}\nrepository {repository}\ncheck {}\n",
        check_code(key)
    );
    for (i, line) in bytes.chunks(LINE_BYTES).enumerate() {
        let digits = hex::encode(line);
        let grouped = groups(&digits).replace('-', " ");
        out.push_str(&format!(
            "{:>2}: {grouped}  {}\n",
            i + 1,
            line_checksum(i + 1, &digits)
        ));
    }
    zeroize::Zeroizing::new(out)
}

fn key_of(bytes: &[u8]) -> Result<MasterKey> {
    if bytes.len() != 96 {
        return Err(Error::InvalidArgument(format!(
            "a key export holds 96 bytes of key, this one {}",
            bytes.len()
        )));
    }
    let part = |r: std::ops::Range<usize>| {
        let mut a = [0u8; 32];
        a.copy_from_slice(&bytes[r]);
        a
    };
    Ok(MasterKey {
        data_key: part(0..32),
        id_key: part(32..64),
        chunker_key: part(64..96),
    })
}

/// Reads an export in either form. A typo in a paper line is reported
/// with the line's number.
pub fn parse(text: &str) -> Result<Recovered> {
    let bad = |why: String| Error::InvalidArgument(format!("not a readable key export: {why}"));
    let trimmed = text.trim_start();
    let recovered = if trimmed.starts_with('{') {
        let f: ExportFile = serde_json::from_str(trimmed).map_err(|e| bad(format!("JSON: {e}")))?;
        if f.vouch_key_export != 1 {
            return Err(bad(format!("version {} is not known", f.vouch_key_export)));
        }
        let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(96));
        for (name, h) in [
            ("data_key", &f.data_key),
            ("id_key", &f.id_key),
            ("chunker_key", &f.chunker_key),
        ] {
            let b = hex::decode(h).map_err(|e| bad(format!("{name}: {e}")))?;
            if b.len() != 32 {
                return Err(bad(format!("{name} is not 32 bytes")));
            }
            bytes.extend_from_slice(&b);
        }
        let key = key_of(&bytes)?;
        if check_code(&key) != f.check {
            return Err(bad(
                "its check code does not match its key (the file was altered or damaged)".into(),
            ));
        }
        Recovered {
            key,
            repository: f.repository,
        }
    } else {
        let mut lines = trimmed.lines().map(str::trim).filter(|l| !l.is_empty());
        if lines.next() != Some(PAPER_HEADER) {
            return Err(bad(format!("the first line is not {PAPER_HEADER:?}")));
        }
        let mut repository = String::new();
        let mut check = String::new();
        let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(96));
        let mut expected = 1;
        for line in lines {
            if let Some(r) = line.strip_prefix("repository ") {
                repository = r.trim().to_owned();
                continue;
            }
            if let Some(c) = line.strip_prefix("check ") {
                check = c.trim().to_ascii_lowercase();
                continue;
            }
            let (number, rest) = line
                .split_once(':')
                .ok_or_else(|| bad(format!("line {line:?} has no number")))?;
            let number: usize = number
                .trim()
                .parse()
                .map_err(|_| bad(format!("line {line:?} has no number")))?;
            if number != expected {
                return Err(bad(format!(
                    "line {number} came where line {expected} was expected"
                )));
            }
            let mut words: Vec<String> = rest
                .split_whitespace()
                .map(str::to_ascii_lowercase)
                .collect();
            let sum = words
                .pop()
                .ok_or_else(|| bad(format!("line {number} is empty")))?;
            let digits: String = words.concat();
            if digits.len() != 2 * LINE_BYTES {
                return Err(bad(format!(
                    "line {number} has {} hex digits, not {}",
                    digits.len(),
                    2 * LINE_BYTES
                )));
            }
            if line_checksum(number, &digits) != sum {
                return Err(bad(format!(
                    "line {number} does not match its checksum {sum}: a digit was mistyped on that line"
                )));
            }
            let b = hex::decode(&digits).map_err(|e| bad(format!("line {number}: {e}")))?;
            bytes.extend_from_slice(&b);
            expected += 1;
        }
        let key = key_of(&bytes)?;
        if !check.is_empty() && check_code(&key) != check {
            return Err(bad("its check code does not match its key".into()));
        }
        Recovered { key, repository }
    };
    Ok(recovered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_read_back_to_the_same_key_and_check_code() {
        let key = MasterKey::generate();
        let code = check_code(&key);
        assert_eq!(code.len(), 19, "{code}");
        for text in [to_json(&key, "ab12"), to_paper(&key, "ab12")] {
            let r = parse(&text).expect("reads back");
            assert_eq!(check_code(&r.key), code);
            assert_eq!(r.key.data_key, key.data_key);
            assert_eq!(r.key.chunker_key, key.chunker_key);
            assert_eq!(r.repository, "ab12");
        }
        assert_ne!(check_code(&MasterKey::generate()), code);
    }

    #[test]
    fn a_mistyped_paper_digit_is_found_on_its_line() {
        let key = MasterKey::generate();
        let paper = to_paper(&key, "ab12");
        let lines: Vec<&str> = paper.lines().collect();
        let third = lines
            .iter()
            .position(|l| l.starts_with(" 3:"))
            .expect("line 3");
        let mut typo: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        let digit = typo[third].chars().nth(5).expect("a digit");
        let other = if digit == '0' { '1' } else { '0' };
        typo[third].replace_range(5..6, &other.to_string());
        let err = parse(&typo.join("\n"))
            .err()
            .expect("the typo is found")
            .to_string();
        assert!(err.contains("line 3"), "{err}");
        let mut short: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        short.remove(third);
        assert!(parse(&short.join("\n")).is_err(), "a missing line is found");
    }

    #[test]
    fn an_altered_json_export_is_refused() {
        let key = MasterKey::generate();
        let json = to_json(&key, "ab12");
        let v: serde_json::Value = serde_json::from_str(&json).expect("json");
        let mut altered = v.clone();
        let mut data = v["data_key"].as_str().expect("hex").to_owned();
        data.replace_range(0..2, if data.starts_with("00") { "11" } else { "00" });
        altered["data_key"] = data.into();
        let err = parse(&altered.to_string())
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("check code"), "{err}");
    }
}

//! The service's event log, mirrored into the repository (`eventlog/`,
//! format v1 extension) so that a server whose data directory is lost can
//! be rebuilt from the repository alone (`vouch dr rebuild`).
//!
//! - A file `eventlog/<log>-<first>-<last>` holds the exact records (frames:
//!   length, checksum, body) of seqs `first..=last` of one log. `<log>` is
//!   16 hex digits of the hash of that log's first record, so two services
//!   (or a service started afresh beside a rebuilt one) never mix their
//!   files; the seqs are 20 decimal digits, so names sort by seq.
//! - The content is a sealed file (kind 5: encrypted and authenticated with
//!   the repository's master key) whose plaintext repeats the log and the
//!   range: a file renamed to claim other seqs is damage, never believed.
//! - Files are only added, then replaced by larger ones that cover them
//!   (compaction); a file that could not be deleted (immutable storage)
//!   stays and is harmless: readers take, from seq 1 on, the file that
//!   reaches furthest.
//!
//! Builds older than this extension ignore `eventlog/`.

use serde::{Deserialize, Serialize};

use super::{sealed, Repository};
use crate::backend::{FileKind, WriteSync};
use crate::error::{Error, Result};
use crate::format::{decode, encode, SealedKind};

/// The content of a mirror file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct MirrorContent {
    /// The log's id (hex, 16 digits).
    log: String,
    /// The first seq held.
    first_seq: u64,
    /// The last seq held.
    last_seq: u64,
    /// The records, framed as in the log's segments.
    #[serde(with = "serde_bytes")]
    frames: Vec<u8>,
}

/// One mirror file, as its name describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorFile {
    /// The file's name in `eventlog/`.
    pub name: String,
    /// The log it belongs to (hex).
    pub log: String,
    /// The first seq it holds.
    pub first_seq: u64,
    /// The last seq it holds.
    pub last_seq: u64,
    /// Its size on storage, in bytes.
    pub size: u64,
}

impl MirrorFile {
    /// How many records it holds.
    pub fn records(&self) -> u64 {
        self.last_seq - self.first_seq + 1
    }
}

/// The name of the file of `log` holding `first..=last`.
pub fn mirror_file_name(log: &str, first_seq: u64, last_seq: u64) -> String {
    format!("{log}-{first_seq:020}-{last_seq:020}")
}

/// Parses a mirror file's name; `None` for anything else (a temporary
/// file, a name of a later format).
pub fn parse_mirror_file_name(name: &str) -> Option<(String, u64, u64)> {
    let mut parts = name.split('-');
    let log = parts.next()?;
    let first = parts.next()?;
    let last = parts.next()?;
    if parts.next().is_some()
        || log.len() != 16
        || !log
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        || first.len() != 20
        || last.len() != 20
    {
        return None;
    }
    let first: u64 = first.parse().ok()?;
    let last: u64 = last.parse().ok()?;
    (first >= 1 && last >= first).then(|| (log.to_owned(), first, last))
}

/// The files that carry `log` from seq 1 as far as it goes without a gap:
/// from each seq reached, the file that reaches furthest. Returns them in
/// seq order with the last seq covered (0: not even seq 1).
pub fn covering_chain<'a>(files: &'a [MirrorFile], log: &str) -> (Vec<&'a MirrorFile>, u64) {
    let mut chain = Vec::new();
    let mut covered = 0u64;
    loop {
        let next = files
            .iter()
            .filter(|f| f.log == log && f.first_seq <= covered + 1 && f.last_seq > covered)
            .max_by_key(|f| (f.last_seq, std::cmp::Reverse(f.first_seq)));
        match next {
            Some(f) => {
                covered = f.last_seq;
                chain.push(f);
            }
            None => return (chain, covered),
        }
    }
}

impl Repository {
    /// Every mirror file of every log, by log then first seq.
    pub fn list_log_mirror(&self) -> Result<Vec<MirrorFile>> {
        let mut out: Vec<MirrorFile> = self
            .backend()
            .list(FileKind::LogMirror)?
            .into_iter()
            .filter_map(|(name, size)| {
                let (log, first_seq, last_seq) = parse_mirror_file_name(&name)?;
                Some(MirrorFile {
                    name,
                    log,
                    first_seq,
                    last_seq,
                    size,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (a.log.as_str(), a.first_seq, a.last_seq).cmp(&(
                b.log.as_str(),
                b.first_seq,
                b.last_seq,
            ))
        });
        Ok(out)
    }

    /// Writes the records `first..=last` of `log` (framed), durably.
    pub fn write_log_mirror(
        &self,
        log: &str,
        first_seq: u64,
        last_seq: u64,
        frames: Vec<u8>,
    ) -> Result<MirrorFile> {
        let name = mirror_file_name(log, first_seq, last_seq);
        if parse_mirror_file_name(&name).is_none() {
            return Err(Error::InvalidArgument(format!(
                "not a mirror file: log {log:?}, seqs {first_seq} to {last_seq}"
            )));
        }
        let content = MirrorContent {
            log: log.to_owned(),
            first_seq,
            last_seq,
            frames,
        };
        let sealed = sealed::seal(self.key(), SealedKind::LogMirror, &encode(&content));
        self.backend()
            .write(FileKind::LogMirror, &name, &sealed, WriteSync::Now)?;
        Ok(MirrorFile {
            name,
            log: log.to_owned(),
            first_seq,
            last_seq,
            size: sealed.len() as u64,
        })
    }

    /// The framed records of a mirror file, checked to be what its name
    /// says.
    pub fn read_log_mirror(&self, file: &MirrorFile) -> Result<Vec<u8>> {
        let what = format!("event log mirror file eventlog/{}", file.name);
        let bytes = self.backend().read(FileKind::LogMirror, &file.name)?;
        let plain = sealed::open(self.key(), SealedKind::LogMirror, &bytes, &what)?;
        let content: MirrorContent = decode(&plain).map_err(|e| Error::corrupt(&what, e))?;
        if content.log != file.log
            || content.first_seq != file.first_seq
            || content.last_seq != file.last_seq
        {
            return Err(Error::corrupt(
                &what,
                format!(
                    "it holds seqs {} to {} of log {}, not what its name says",
                    content.first_seq, content.last_seq, content.log
                ),
            ));
        }
        Ok(content.frames)
    }

    /// Removes a mirror file (one a larger file now covers).
    pub fn delete_log_mirror(&self, file: &MirrorFile) -> Result<()> {
        self.backend().delete(FileKind::LogMirror, &file.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(log: &str, first_seq: u64, last_seq: u64) -> MirrorFile {
        MirrorFile {
            name: mirror_file_name(log, first_seq, last_seq),
            log: log.into(),
            first_seq,
            last_seq,
            size: 1,
        }
    }

    #[test]
    fn names_round_trip_and_foreign_names_are_ignored() {
        let log = "0123456789abcdef";
        let name = mirror_file_name(log, 1, 42);
        assert_eq!(
            name,
            "0123456789abcdef-00000000000000000001-00000000000000000042"
        );
        assert_eq!(parse_mirror_file_name(&name), Some((log.into(), 1, 42)));
        for bad in [
            ".tmp-00ff",
            "0123456789ABCDEF-00000000000000000001-00000000000000000042",
            "0123456789abcdef-00000000000000000042-00000000000000000001",
            "0123456789abcdef-00000000000000000000-00000000000000000001",
            "0123456789abcdef-1-42",
            "0123456789abcdef-00000000000000000001-00000000000000000042-x",
        ] {
            assert_eq!(parse_mirror_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_chain_takes_the_furthest_file_and_stops_at_a_gap() {
        let a = "aaaaaaaaaaaaaaaa";
        let b = "bbbbbbbbbbbbbbbb";
        let files = vec![
            f(a, 1, 10),
            f(a, 1, 40), // a compaction that replaced 1-10, 11-20, ...
            f(a, 11, 20),
            f(a, 41, 50),
            f(a, 45, 60), // overlapping leftover: fine
            f(a, 70, 80), // after a gap: not reached
            f(b, 1, 500), // another log
        ];
        let (chain, covered) = covering_chain(&files, a);
        let names: Vec<(u64, u64)> = chain.iter().map(|f| (f.first_seq, f.last_seq)).collect();
        assert_eq!(names, vec![(1, 40), (41, 50), (45, 60)]);
        assert_eq!(covered, 60);
        assert_eq!(covering_chain(&files, "cccccccccccccccc").1, 0);
    }
}

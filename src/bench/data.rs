//! Benchmark data: generating incompressible data, describing data sets, and
//! the checks that keep compressible data out of throughput figures.
//!
//! A data set is sampled (up to [`MAX_PIECES`] pieces of [`PIECE`] bytes,
//! spread evenly over its bytes in file order) and each piece is compressed
//! with zstd level 3. Random data stays at a ratio of about 1.0; anything
//! below [`MIN_INCOMPRESSIBLE_RATIO`] is refused as throughput data.
//! Identical pieces betray periodic data, which is refused everywhere.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{BenchError, Ctx, Result};

/// compressed / raw of a sample at or above which data counts as incompressible.
pub const MIN_INCOMPRESSIBLE_RATIO: f64 = 0.95;
/// compressed / raw below which "real" data must be synthetic (the 1021x trap).
pub const MIN_REAL_RATIO: f64 = 0.02;
/// Bytes per sampled piece.
pub const PIECE: usize = 64 * 1024;
/// Pieces per sample.
pub const MAX_PIECES: usize = 64;

/// What kind of data a figure was measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataKind {
    /// Random, checked incompressible: the only kind for throughput figures.
    Incompressible,
    /// Real files (source trees): for real-world figures.
    Real,
    /// Generated, half random and half text-like: the scale figures of a
    /// mixed tree (bytes per second of the source, not of what is stored).
    Mixed,
}

/// A described data set.
#[derive(Clone, Debug, Serialize)]
pub struct DataSet {
    /// Where it is.
    pub path: PathBuf,
    /// What it is, in words.
    pub description: String,
    /// Its kind.
    pub kind: DataKind,
    /// Bytes in regular files.
    pub bytes: u64,
    /// Regular files.
    pub files: u64,
    /// zstd-3 compressed / raw of the sample.
    pub sample_ratio: f64,
}

/// Statistics of a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleStats {
    /// Raw bytes sampled.
    pub raw: u64,
    /// Their zstd-3 size.
    pub compressed: u64,
    /// Pieces (of at least 4 KiB) identical to an earlier piece.
    pub duplicates: usize,
}

impl SampleStats {
    /// compressed / raw (1.0 for an empty sample).
    pub fn ratio(&self) -> f64 {
        if self.raw == 0 {
            1.0
        } else {
            self.compressed as f64 / self.raw as f64
        }
    }
}

/// Compresses each piece and looks for repeated pieces.
pub fn check_samples<P: AsRef<[u8]>>(pieces: &[P]) -> SampleStats {
    let mut seen = HashSet::new();
    let mut stats = SampleStats {
        raw: 0,
        compressed: 0,
        duplicates: 0,
    };
    for p in pieces {
        let p = p.as_ref();
        if p.is_empty() {
            continue;
        }
        stats.raw += p.len() as u64;
        let c = zstd::bulk::compress(p, 3).map_or(p.len(), |c| c.len().min(p.len()));
        stats.compressed += c as u64;
        if p.len() >= 4096 && !seen.insert(blake3::hash(p)) {
            stats.duplicates += 1;
        }
    }
    stats
}

/// Data proven incompressible. Only [`Incompressible::check`] and
/// [`Incompressible::from_sample`] construct it, and they refuse
/// compressible or periodic data: a throughput result cannot be built from
/// anything else.
#[derive(Clone, Debug)]
pub struct Incompressible(DataSet);

impl Incompressible {
    /// Samples the file or directory at `path` and accepts it only if incompressible.
    pub fn check(path: &Path, description: impl Into<String>) -> Result<Self> {
        let (files, bytes, pieces) = sample_path(path)?;
        Self::from_sample(path, description, files, bytes, &pieces)
    }

    /// Accepts an already-read sample (also used for in-memory buffers).
    pub fn from_sample<P: AsRef<[u8]>>(
        path: &Path,
        description: impl Into<String>,
        files: u64,
        bytes: u64,
        pieces: &[P],
    ) -> Result<Self> {
        let description = description.into();
        if bytes == 0 {
            return Err(BenchError::NoData(path.to_path_buf()));
        }
        let stats = check_samples(pieces);
        if stats.duplicates > 0 {
            return Err(BenchError::Periodic {
                what: description,
                duplicates: stats.duplicates,
            });
        }
        if stats.ratio() < MIN_INCOMPRESSIBLE_RATIO {
            return Err(BenchError::Compressible {
                what: description,
                ratio: stats.ratio(),
                min: MIN_INCOMPRESSIBLE_RATIO,
            });
        }
        Ok(Self(DataSet {
            path: path.to_path_buf(),
            description,
            kind: DataKind::Incompressible,
            bytes,
            files,
            sample_ratio: stats.ratio(),
        }))
    }

    /// The data set.
    pub fn data(&self) -> &DataSet {
        &self.0
    }
}

/// Real data: any tree of files that is not synthetic (periodic).
#[derive(Clone, Debug)]
pub struct RealData(DataSet);

impl RealData {
    /// Samples the tree at `path` and accepts it unless it is periodic.
    pub fn check(path: &Path, description: impl Into<String>) -> Result<Self> {
        let (files, bytes, pieces) = sample_path(path)?;
        Self::from_sample(path, description, files, bytes, &pieces)
    }

    /// Accepts an already-read sample.
    pub fn from_sample<P: AsRef<[u8]>>(
        path: &Path,
        description: impl Into<String>,
        files: u64,
        bytes: u64,
        pieces: &[P],
    ) -> Result<Self> {
        let description = description.into();
        if bytes == 0 {
            return Err(BenchError::NoData(path.to_path_buf()));
        }
        let stats = check_samples(pieces);
        // Real trees do hold a few identical files (licence texts, empty
        // Kconfigs): only a sample that is mostly repeats is periodic.
        if stats.duplicates * 2 > pieces.len() {
            return Err(BenchError::Periodic {
                what: description,
                duplicates: stats.duplicates,
            });
        }
        if stats.ratio() < MIN_REAL_RATIO {
            return Err(BenchError::NotReal {
                what: description,
                ratio: stats.ratio(),
            });
        }
        Ok(Self(DataSet {
            path: path.to_path_buf(),
            description,
            kind: DataKind::Real,
            bytes,
            files,
            sample_ratio: stats.ratio(),
        }))
    }

    /// The data set.
    pub fn data(&self) -> &DataSet {
        &self.0
    }
}

/// Regular files under `path` (or `path` itself), sorted, with their sizes.
pub(crate) fn list_files(path: &Path) -> Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    let meta = fs::symlink_metadata(path).ctx(|| format!("reading {}", path.display()))?;
    if meta.is_file() {
        out.push((path.to_path_buf(), meta.len()));
        return Ok(out);
    }
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).ctx(|| format!("listing {}", dir.display()))?;
        for e in entries {
            let e = e.ctx(|| format!("listing {}", dir.display()))?;
            let ft = e
                .file_type()
                .ctx(|| format!("stat {}", e.path().display()))?;
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                let len = e
                    .metadata()
                    .ctx(|| format!("stat {}", e.path().display()))?
                    .len();
                out.push((e.path(), len));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Counts files and bytes and reads an evenly spread sample.
fn sample_path(path: &Path) -> Result<(u64, u64, Vec<Vec<u8>>)> {
    let files = list_files(path)?;
    let total: u64 = files.iter().map(|f| f.1).sum();
    let mut pieces = Vec::new();
    if total == 0 {
        return Ok((files.len() as u64, 0, pieces));
    }
    let n = MAX_PIECES.min(total.div_ceil(PIECE as u64) as usize).max(1);
    let step = total / n as u64;
    let (mut idx, mut file_start) = (0usize, 0u64);
    for k in 0..n as u64 {
        let at = k * step;
        while idx < files.len() && file_start + files[idx].1 <= at {
            file_start += files[idx].1;
            idx += 1;
        }
        let Some((p, len)) = files.get(idx) else {
            break;
        };
        let off = at - file_start;
        let take = (PIECE as u64).min(len - off) as usize;
        let mut f = File::open(p).ctx(|| format!("opening {}", p.display()))?;
        f.seek(SeekFrom::Start(off))
            .ctx(|| format!("seeking {}", p.display()))?;
        let mut buf = vec![0u8; take];
        f.read_exact(&mut buf)
            .ctx(|| format!("reading {}", p.display()))?;
        pieces.push(buf);
    }
    Ok((files.len() as u64, total, pieces))
}

/// Fills `buf` with random bytes (BLAKE3 in XOF mode from an OS-random seed:
/// as incompressible as the OS's own random source, and fast).
pub fn fill_random(buf: &mut [u8]) {
    let seed: [u8; 32] = crate::crypto::random_array();
    blake3::Hasher::new_keyed(&seed).finalize_xof().fill(buf);
}

/// Writes `bytes` of random data to `path` (atomically, via a temporary name).
pub fn generate_random_file(path: &Path, bytes: u64) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).ctx(|| format!("creating {}", tmp.display()))?;
    let seed: [u8; 32] = crate::crypto::random_array();
    let mut xof = blake3::Hasher::new_keyed(&seed).finalize_xof();
    let mut block = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        xof.fill(&mut block[..n]);
        f.write_all(&block[..n])
            .ctx(|| format!("writing {}", tmp.display()))?;
        left -= n as u64;
    }
    f.sync_all().ctx(|| format!("syncing {}", tmp.display()))?;
    fs::rename(&tmp, path).ctx(|| format!("renaming {}", tmp.display()))
}

/// A random file of `bytes` at `path`, generated unless already there.
pub(crate) fn ensure_random_file(path: &Path, bytes: u64) -> Result<()> {
    if fs::metadata(path)
        .map(|m| m.len() == bytes)
        .unwrap_or(false)
    {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).ctx(|| format!("creating {}", parent.display()))?;
    }
    generate_random_file(path, bytes)
}

/// `count` random files of `size` bytes in `dir`, `per_dir` to a
/// subdirectory, generated unless a completion marker says they are there
/// in this layout (a set made in another layout is made again).
pub(crate) fn ensure_random_files(dir: &Path, count: u64, size: usize, per_dir: u64) -> Result<()> {
    let marker = dir.with_extension("done");
    let layout = format!("{count} files of {size} bytes, {per_dir} per directory\n");
    if dir.exists() && fs::read_to_string(&marker).is_ok_and(|m| m == layout) {
        return Ok(());
    }
    let _ = fs::remove_file(&marker);
    if dir.exists() {
        fs::remove_dir_all(dir).ctx(|| format!("removing {}", dir.display()))?;
    }
    let per_dir = per_dir.max(1);
    let mut buf = vec![0u8; size];
    for i in 0..count {
        let sub = dir.join(format!("d{:05}", i / per_dir));
        if i % per_dir == 0 {
            fs::create_dir_all(&sub).ctx(|| format!("creating {}", sub.display()))?;
            if crate::util::interrupted() {
                return Err(BenchError::Interrupted);
            }
        }
        fill_random(&mut buf);
        let p = sub.join(format!("f{i:07}"));
        fs::write(&p, &buf).ctx(|| format!("writing {}", p.display()))?;
    }
    fs::write(&marker, layout).ctx(|| format!("creating {}", marker.display()))?;
    Ok(())
}

/// Words of the text-like half of a mixed tree.
const WORDS: [&str; 32] = [
    "backup",
    "restore",
    "verify",
    "pack",
    "index",
    "snapshot",
    "tree",
    "blob",
    "chunk",
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "with",
    "on",
    "file",
    "data",
    "error",
    "point",
    "plan",
    "job",
    "lock",
    "key",
    "repository",
    "agent",
    "event",
    "log",
    "proof",
];

/// Fills `buf` with text of random words and numbers (zstd-3 keeps about a
/// third of it; no two buffers alike).
pub fn fill_text(buf: &mut [u8]) {
    // A piece takes at most two random bytes and writes at least two (a
    // word of two letters or a digit, and its separator): this never runs
    // out, so the text never turns into a repeated fallback word.
    let mut rnd = vec![0u8; buf.len() + 2];
    fill_random(&mut rnd);
    let mut at = 0;
    let mut r = rnd.iter().copied();
    while at < buf.len() {
        let b = r.next().unwrap_or(0);
        let piece: std::borrow::Cow<'_, str> = if b < 200 {
            WORDS[usize::from(b) % WORDS.len()].into()
        } else {
            format!("{}", u16::from_le_bytes([b, r.next().unwrap_or(0)])).into()
        };
        let sep: &[u8] = if b % 16 == 0 { b"\n" } else { b" " };
        for &c in piece.as_bytes().iter().chain(sep) {
            if at == buf.len() {
                break;
            }
            buf[at] = c;
            at += 1;
        }
    }
}

/// A tree of `total` bytes in files of `file_bytes`, 64 to a directory,
/// each random or text-like (see [`fill_text`]) as a hash of its number
/// says: half of each, in no period an evenly spread sample could fall in
/// step with (strict alternation did: every sampled piece was random); made
/// unless a completion marker says it is there.
pub(crate) fn ensure_mixed_tree(dir: &Path, total: u64, file_bytes: u64) -> Result<()> {
    let marker = dir.with_extension("done");
    let layout = format!("{total} bytes in files of {file_bytes}, random or text by hash\n");
    if dir.exists() && fs::read_to_string(&marker).is_ok_and(|m| m == layout) {
        return Ok(());
    }
    let _ = fs::remove_file(&marker);
    if dir.exists() {
        fs::remove_dir_all(dir).ctx(|| format!("removing {}", dir.display()))?;
    }
    let mut block = vec![0u8; 1 << 20];
    let files = total.div_ceil(file_bytes.max(1));
    for i in 0..files {
        let sub = dir.join(format!("d{:03}", i / 64));
        if i % 64 == 0 {
            fs::create_dir_all(&sub).ctx(|| format!("creating {}", sub.display()))?;
        }
        if crate::util::interrupted() {
            return Err(BenchError::Interrupted);
        }
        let p = sub.join(format!("f{i:05}"));
        let mut f = File::create(&p).ctx(|| format!("creating {}", p.display()))?;
        let mut left = file_bytes.min(total - i * file_bytes);
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            if is_text_file(i) {
                fill_text(&mut block[..n]);
            } else {
                fill_random(&mut block[..n]);
            }
            f.write_all(&block[..n])
                .ctx(|| format!("writing {}", p.display()))?;
            left -= n as u64;
        }
    }
    fs::write(&marker, layout).ctx(|| format!("creating {}", marker.display()))?;
    Ok(())
}

/// Whether file `i` of a mixed tree is text-like (half of them, by hash).
fn is_text_file(i: u64) -> bool {
    blake3::hash(&i.to_le_bytes()).as_bytes()[0] & 1 == 1
}

/// Generated data, half random and half text-like: for the scale figures of
/// a mixed tree. Refused when it is incompressible (then it is not mixed)
/// or periodic.
#[derive(Clone, Debug)]
pub struct Mixed(DataSet);

impl Mixed {
    /// Samples the tree at `path`.
    pub fn check(path: &Path, description: impl Into<String>) -> Result<Self> {
        let description = description.into();
        let (files, bytes, pieces) = sample_path(path)?;
        if bytes == 0 {
            return Err(BenchError::NoData(path.to_path_buf()));
        }
        let stats = check_samples(&pieces);
        if stats.duplicates > 0 {
            return Err(BenchError::Periodic {
                what: description,
                duplicates: stats.duplicates,
            });
        }
        if stats.ratio() >= MIN_INCOMPRESSIBLE_RATIO {
            return Err(BenchError::Workdir(format!(
                "{description}: the sample compresses to {:.2} of its size, not a mixed tree",
                stats.ratio()
            )));
        }
        Ok(Self(DataSet {
            path: path.to_path_buf(),
            description,
            kind: DataKind::Mixed,
            bytes,
            files,
            sample_ratio: stats.ratio(),
        }))
    }

    /// The data set.
    pub fn data(&self) -> &DataSet {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        fill_random(&mut v);
        v
    }

    #[test]
    fn a_set_in_another_layout_is_made_again_and_one_in_the_same_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("files");
        ensure_random_files(&dir, 10, 16, 5).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);
        let f = dir.join("d00001").join("f0000009");
        let before = fs::read(&f).unwrap();
        ensure_random_files(&dir, 10, 16, 5).unwrap();
        assert_eq!(fs::read(&f).unwrap(), before, "kept");
        ensure_random_files(&dir, 10, 16, 2).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 5, "made again");
        assert!(!f.exists());
    }

    #[test]
    fn a_mixed_tree_is_half_text_and_is_told_from_random_data() {
        let mut t = vec![0u8; PIECE];
        fill_text(&mut t);
        let s = check_samples(&[&t]);
        assert!(
            s.ratio() > 0.1 && s.ratio() < 0.6,
            "text ratio {}",
            s.ratio()
        );
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("mixed");
        ensure_mixed_tree(&tree, 39 * 100_000 + 5, 100_000).unwrap();
        let m = Mixed::check(&tree, "mixed").unwrap();
        assert_eq!((m.data().files, m.data().bytes), (40, 39 * 100_000 + 5));
        assert!(
            m.data().sample_ratio > 0.3 && m.data().sample_ratio < 0.9,
            "{}",
            m.data().sample_ratio
        );
        // Text and random in every evenly spaced selection, whatever its
        // step (the 20 GiB tree's sampler took every tenth file, and with
        // strict alternation saw random data only).
        for step in [2, 4, 10, 64] {
            let text = (0..640).step_by(step).filter(|&i| is_text_file(i)).count();
            let all = 640usize.div_ceil(step);
            assert!(
                text * 4 > all && text * 4 < 3 * all,
                "step {step}: {text} of {all}"
            );
        }
        let random = d.path().join("random");
        ensure_random_files(&random, 4, PIECE, 4).unwrap();
        assert!(Mixed::check(&random, "random").is_err());
    }

    #[test]
    fn random_data_has_a_ratio_near_one() {
        let pieces: Vec<Vec<u8>> = (0..8).map(|_| random(PIECE)).collect();
        let s = check_samples(&pieces);
        assert!(s.ratio() > 0.99 && s.ratio() <= 1.0, "{}", s.ratio());
        assert_eq!(s.duplicates, 0);
    }

    #[test]
    fn periodic_pieces_are_found_even_when_each_looks_random() {
        let p = random(PIECE);
        let s = check_samples(&[p.clone(), p.clone(), p]);
        assert_eq!(s.duplicates, 2);
        let e = Incompressible::from_sample(Path::new("x"), "x", 3, 3, &vec![random(PIECE); 3])
            .unwrap_err();
        assert!(matches!(e, BenchError::Periodic { .. }), "{e}");
    }

    #[test]
    fn text_is_refused_as_throughput_data_but_accepted_as_real() {
        let text: Vec<u8> = (0..PIECE)
            .map(|i| b"fn main() { println!(\"hello\"); }\n"[i % 33] ^ ((i / 977) as u8 & 1))
            .collect();
        let e = Incompressible::from_sample(Path::new("t"), "text", 1, PIECE as u64, &[&text])
            .unwrap_err();
        assert!(matches!(e, BenchError::Compressible { .. }), "{e}");
        assert!(e.to_string().contains("refusing"));
        let zeros = vec![0u8; PIECE];
        let e =
            RealData::from_sample(Path::new("z"), "zeros", 1, PIECE as u64, &[&zeros]).unwrap_err();
        assert!(matches!(e, BenchError::NotReal { .. }), "{e}");
    }

    #[test]
    fn empty_data_is_refused() {
        let e = Incompressible::from_sample::<Vec<u8>>(Path::new("e"), "e", 0, 0, &[]);
        assert!(matches!(e, Err(BenchError::NoData(_))));
    }
}

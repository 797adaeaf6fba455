//! `vouch bench primitives`: MiB/s of the engine's own per-chunk building
//! blocks, on one core and on all cores, on random and on real data.
//!
//! Every figure runs the real code: [`Chunker`] with the repository's keyed
//! gear table, [`MasterKey::blob_id`] (keyed BLAKE3), the backup pipeline's
//! [`Compressor`] (which skips incompressible chunks after a level-1 sample),
//! [`FileCipher::seal_into`] (AES-256-GCM) and [`PackBuilder`], chained as
//! the save workers chain them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use super::conditions::{loadavg, parse_cpu_model};
use super::data::{fill_random, list_files, Incompressible, RealData, PIECE};
use super::{Ctx, Result};
use crate::backup::Compressor;
use crate::chunker::Chunker;
use crate::crypto::{FileCipher, MasterKey};
use crate::format::{BlobType, ChunkerParams};
use crate::repo::pack::PackBuilder;

const MIB: f64 = 1048576.0;
const PACK_TARGET: usize = 16 << 20;

/// What to measure.
#[derive(Clone, Debug)]
pub struct PrimitivesOptions {
    /// Real data: a directory whose files are concatenated (default: the
    /// Linux 6.1 sources prepared by fetch-data.sh, if present).
    pub real_data: Option<PathBuf>,
    /// Buffer size per data kind in MiB.
    pub buffer_mib: usize,
    /// zstd level (the repository default is 3).
    pub level: i32,
    /// Minimum measuring time per figure, in seconds.
    pub min_seconds: f64,
    /// Threads for the all-core figure (0: all online cores).
    pub threads: usize,
}

/// One primitive on one kind of data.
#[derive(Clone, Debug, Serialize)]
pub struct PrimitiveRow {
    /// The primitive.
    pub primitive: String,
    /// random or real.
    pub data: String,
    /// MiB/s on one thread.
    pub single_core_mib_s: f64,
    /// MiB/s on all threads together.
    pub all_cores_mib_s: f64,
}

/// The primitives table with its conditions.
#[derive(Clone, Debug, Serialize)]
pub struct PrimitivesReport {
    /// UTC date.
    pub date_utc: String,
    /// CPU model.
    pub cpu_model: String,
    /// Threads of the all-core figures.
    pub threads: usize,
    /// Load average (1 min) before and after.
    pub load: [f64; 2],
    /// zstd level.
    pub level: i32,
    /// The data measured.
    pub data: Vec<String>,
    /// Rows.
    pub rows: Vec<PrimitiveRow>,
    /// The command line.
    pub command_line: String,
}

impl PrimitivesReport {
    /// Markdown table with a conditions line.
    pub fn to_markdown(&self) -> String {
        let mut md = format!(
            "**CPU:** {}; {} threads for the all-core column. **Date:** {}. **Load average \
             (1 min) before / after:** {:.2} / {:.2}. **zstd level:** {}. **Data:** {}.\n\n\
             Reproduce: `{}`\n\n\
             | primitive | data | 1 core MiB/s | {} cores MiB/s |\n|---|---|---|---|\n",
            self.cpu_model,
            self.threads,
            self.date_utc,
            self.load[0],
            self.load[1],
            self.level,
            self.data.join("; "),
            self.command_line,
            self.threads
        );
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {:.0} |",
                r.primitive, r.data, r.single_core_mib_s, r.all_cores_mib_s
            );
        }
        md
    }
}

/// Runs `work` on `threads` threads (each with its own state from `make`)
/// until `min_seconds` passed; returns MiB/s of `bytes_per_pass`.
fn throughput<S>(
    threads: usize,
    min_seconds: f64,
    bytes_per_pass: usize,
    make: impl Fn() -> S + Sync,
    work: impl Fn(&mut S) + Sync,
) -> f64 {
    let start = Instant::now();
    let passes: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut state = make();
                    let mut n = 0;
                    while n == 0 || start.elapsed().as_secs_f64() < min_seconds {
                        work(&mut state);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    let secs = start.elapsed().as_secs_f64();
    (passes * bytes_per_pass) as f64 / MIB / secs
}

/// Reads the files under `dir` in order until `bytes` are collected.
fn read_real(dir: &Path, bytes: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes);
    for (p, _) in list_files(dir)? {
        if out.len() >= bytes {
            break;
        }
        let data = std::fs::read(&p).ctx(|| format!("reading {}", p.display()))?;
        let take = data.len().min(bytes - out.len());
        out.extend_from_slice(&data[..take]);
    }
    Ok(out)
}

fn pieces(buf: &[u8]) -> Vec<&[u8]> {
    let n = (buf.len() / PIECE).clamp(1, 64);
    let step = buf.len() / n;
    (0..n)
        .map(|i| &buf[i * step..(i * step + PIECE).min(buf.len())])
        .collect()
}

/// Measures the primitives.
pub fn run_primitives(o: &PrimitivesOptions, command_line: String) -> Result<PrimitivesReport> {
    let threads = if o.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        o.threads
    };
    let load0 = loadavg().map_or(0.0, |l| l[0]);
    let size = o.buffer_mib.max(1) << 20;
    let mut random = vec![0u8; size];
    fill_random(&mut random);
    let checked = Incompressible::from_sample(
        Path::new("(memory)"),
        "random buffer",
        1,
        size as u64,
        &pieces(&random),
    )?;
    let mut sets: Vec<(&str, Vec<u8>, String)> = vec![(
        "random",
        random,
        format!(
            "random: {} MiB from BLAKE3-XOF (zstd sample ratio {:.3})",
            o.buffer_mib,
            checked.data().sample_ratio
        ),
    )];
    let real_dir = o.real_data.clone().or_else(|| {
        let d = std::env::var_os("VOUCH_BENCH_DIR")
            .map_or_else(|| PathBuf::from("/var/tmp/vouch-bench"), PathBuf::from)
            .join("linux-6.1");
        d.is_dir().then_some(d)
    });
    if let Some(dir) = real_dir {
        let real = read_real(&dir, size)?;
        let checked = RealData::from_sample(
            &dir,
            format!("{}", dir.display()),
            1,
            real.len() as u64,
            &pieces(&real),
        )?;
        sets.push((
            "real",
            real,
            format!(
                "real: the first {} MiB of {} (files concatenated in path order; zstd sample ratio {:.3})",
                o.buffer_mib,
                dir.display(),
                checked.data().sample_ratio
            ),
        ));
    }

    let key = MasterKey::generate();
    let chunker = Chunker::new(ChunkerParams::default(), key.gear_table());
    let level = o.level;
    let mut rows = Vec::new();
    for (name, buf, _) in &sets {
        let buf = buf.as_slice();
        let cuts = chunker.cut_all(buf);
        let chunks: Vec<&[u8]> = {
            let mut pos = 0;
            cuts.iter()
                .map(|&n| {
                    let c = &buf[pos..pos + n];
                    pos += n;
                    c
                })
                .collect()
        };
        let len = buf.len();
        let aad = [0u8; 33];
        let measure = |label: &str, f: &dyn Fn(usize) -> f64| PrimitiveRow {
            primitive: label.into(),
            data: (*name).into(),
            single_core_mib_s: f(1),
            all_cores_mib_s: f(threads),
        };
        rows.push(measure(
            "FastCDC chunking (keyed gear, 512 KiB / 1 MiB / 8 MiB)",
            &|t| {
                throughput(
                    t,
                    o.min_seconds,
                    len,
                    || (),
                    |_| {
                        std::hint::black_box(chunker.cut_all(buf));
                    },
                )
            },
        ));
        rows.push(measure("keyed BLAKE3 (blob ids)", &|t| {
            throughput(
                t,
                o.min_seconds,
                len,
                || (),
                |_| {
                    for c in &chunks {
                        std::hint::black_box(key.blob_id(c));
                    }
                },
            )
        }));
        rows.push(measure(
            &format!("zstd level {level} (pipeline's Compressor)"),
            &|t| {
                throughput(
                    t,
                    o.min_seconds,
                    len,
                    || Compressor::new(level),
                    |comp| {
                        for c in &chunks {
                            std::hint::black_box(comp.compress(c).1.len());
                        }
                    },
                )
            },
        ));
        rows.push(measure("AES-256-GCM (seal)", &|t| {
            throughput(
                t,
                o.min_seconds,
                len,
                || {
                    (
                        FileCipher::new(&crate::crypto::random_array()),
                        Vec::with_capacity(9 << 20),
                    )
                },
                |(cipher, out)| {
                    for c in &chunks {
                        out.clear();
                        cipher.seal_into(&aad, c, out);
                    }
                    std::hint::black_box(out.len());
                },
            )
        }));
        rows.push(measure(
            "whole per-chunk pipeline (cut, id, compress, seal into packs)",
            &|t| {
                throughput(
                    t,
                    o.min_seconds,
                    len,
                    || Compressor::new(level),
                    |comp| {
                        let mut pack = PackBuilder::new(&key, PACK_TARGET + (9 << 20));
                        let mut pos = 0;
                        while pos < buf.len() {
                            let n = chunker.next_cut(&buf[pos..]);
                            let chunk = &buf[pos..pos + n];
                            pos += n;
                            let id = key.blob_id(chunk);
                            let (method, stored) = comp.compress(chunk);
                            pack.add(id, BlobType::Data, chunk.len(), method, stored);
                            if pack.len() >= PACK_TARGET {
                                let full = std::mem::replace(
                                    &mut pack,
                                    PackBuilder::new(&key, PACK_TARGET + (9 << 20)),
                                );
                                std::hint::black_box(full.finish().id);
                            }
                        }
                        std::hint::black_box(pack.finish().id);
                    },
                )
            },
        ));
    }
    Ok(PrimitivesReport {
        date_utc: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        cpu_model: parse_cpu_model(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default())
            .unwrap_or_else(|| "unknown".into()),
        threads,
        load: [load0, loadavg().map_or(0.0, |l| l[0])],
        level,
        data: sets.into_iter().map(|s| s.2).collect(),
        rows,
        command_line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_run_on_a_tiny_buffer_and_render() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..40_000)
            .map(|i| format!("line {i} of some text\n"))
            .collect();
        std::fs::write(dir.path().join("a.txt"), text).unwrap();
        let o = PrimitivesOptions {
            real_data: Some(dir.path().to_path_buf()),
            buffer_mib: 1,
            level: 3,
            min_seconds: 0.0,
            threads: 2,
        };
        let r = run_primitives(&o, "vouch bench primitives".into()).unwrap();
        assert_eq!(r.rows.len(), 10);
        assert!(r.rows.iter().all(|x| x.single_core_mib_s > 0.0));
        let md = r.to_markdown();
        assert!(md.contains("| keyed BLAKE3 (blob ids) | random |"), "{md}");
        assert!(md.contains("2 cores MiB/s"));
    }
}

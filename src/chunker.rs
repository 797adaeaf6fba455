//! Content-defined chunking: FastCDC v2020 (the `fastcdc` crate's cut
//! routine) driven by a gear table derived from the repository's chunker key,
//! so that chunk boundaries reveal nothing about the content.
//!
//! Buffers are sized to the data: an in-memory file is cut in place, and a
//! streamed file uses one buffer of `max_size` plus one read block, reused.

use std::io::{self, Read};

use fastcdc::v2020::{cut_gear, select_masks, Normalization};

use crate::format::ChunkerParams;

/// Size of one read from a streamed source.
const READ_BLOCK: usize = 1024 * 1024;

/// A configured chunker (parameters, masks and keyed gear table).
#[derive(Clone)]
pub struct Chunker {
    min: usize,
    avg: usize,
    max: usize,
    mask_s: u64,
    mask_l: u64,
    gear: Vec<u64>,
    gear_ls: Vec<u64>,
}

impl Chunker {
    /// Builds a chunker from the repository parameters and gear table.
    pub fn new(params: ChunkerParams, gear: Vec<u64>) -> Self {
        let avg = params.avg_size as usize;
        let (mask_s, mask_l) = select_masks(avg, Normalization::Level1);
        let gear_ls = gear.iter().map(|g| g << 1).collect();
        Self {
            min: params.min_size as usize,
            avg,
            max: params.max_size as usize,
            mask_s,
            mask_l,
            gear,
            gear_ls,
        }
    }

    /// The maximum chunk size.
    pub fn max_size(&self) -> usize {
        self.max
    }

    /// Length of the next chunk at the start of `data`.
    ///
    /// `data` must hold at least `max_size` bytes unless it is the end of the
    /// input.
    pub fn next_cut(&self, data: &[u8]) -> usize {
        if data.len() <= self.min {
            return data.len();
        }
        let (_, len) = cut_gear(
            data,
            self.min,
            self.avg,
            self.max,
            self.mask_s,
            self.mask_l,
            self.mask_s << 1,
            self.mask_l << 1,
            &self.gear,
            &self.gear_ls,
        );
        len.max(1)
    }

    /// Lengths of the chunks of an in-memory buffer.
    pub fn cut_all(&self, data: &[u8]) -> Vec<usize> {
        let mut out = Vec::with_capacity(data.len() / self.avg + 1);
        let mut pos = 0;
        while pos < data.len() {
            let n = self.next_cut(&data[pos..]);
            out.push(n);
            pos += n;
        }
        out
    }

    /// Streams `reader`, calling `sink` with every chunk in order. Returns
    /// the number of bytes read.
    pub fn stream<R: Read>(
        &self,
        mut reader: R,
        mut sink: impl FnMut(&[u8]) -> crate::Result<()>,
    ) -> crate::Result<u64> {
        let mut buf = vec![0u8; self.max + READ_BLOCK];
        let mut start = 0;
        let mut end = 0;
        let mut eof = false;
        let mut total = 0u64;
        loop {
            // Refill until a whole maximum-size chunk is available or EOF.
            while !eof && end - start < self.max {
                if buf.len() - end < READ_BLOCK {
                    buf.copy_within(start..end, 0);
                    end -= start;
                    start = 0;
                }
                match reader.read(&mut buf[end..]) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        end += n;
                        total += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(crate::Error::io("reading source", e)),
                }
            }
            if start == end {
                return Ok(total);
            }
            let n = self.next_cut(&buf[start..end]);
            sink(&buf[start..start + n])?;
            start += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::MasterKey;

    fn small_params() -> ChunkerParams {
        ChunkerParams {
            min_size: 4096,
            avg_size: 16384,
            max_size: 65536,
        }
    }

    fn pseudo_random(n: usize, seed: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        let mut h = blake3::Hasher::new();
        h.update(&seed.to_le_bytes());
        let mut r = h.finalize_xof();
        out.resize(n, 0);
        r.fill(&mut out);
        out
    }

    #[test]
    fn stream_and_in_memory_agree_and_cover_the_input() {
        let key = MasterKey::generate();
        let c = Chunker::new(small_params(), key.gear_table());
        let data = pseudo_random(1_000_000, 1);
        let lens = c.cut_all(&data);
        assert_eq!(lens.iter().sum::<usize>(), data.len());
        assert!(lens.iter().all(|&l| l <= 65536));
        assert!(lens[..lens.len() - 1].iter().all(|&l| l >= 4096));
        let mut streamed = Vec::new();
        let total = c
            .stream(&data[..], |chunk| {
                streamed.push(chunk.len());
                Ok(())
            })
            .unwrap();
        assert_eq!(total, data.len() as u64);
        assert_eq!(streamed, lens);
    }

    #[test]
    fn boundaries_depend_on_the_key_and_resync_after_an_edit() {
        let data = pseudo_random(2_000_000, 2);
        let a = Chunker::new(small_params(), MasterKey::generate().gear_table());
        let b = Chunker::new(small_params(), MasterKey::generate().gear_table());
        assert_ne!(a.cut_all(&data), b.cut_all(&data));
        // Insert bytes near the start: most later boundaries are unchanged.
        let mut edited = b"inserted".to_vec();
        edited.extend_from_slice(&data);
        let ends = |lens: Vec<usize>, shift: usize| -> std::collections::HashSet<usize> {
            let mut pos = 0;
            lens.into_iter()
                .map(|l| {
                    pos += l;
                    pos - shift
                })
                .collect()
        };
        let before = ends(a.cut_all(&data), 0);
        let after = ends(a.cut_all(&edited), 8);
        let shared = before.intersection(&after).count();
        assert!(
            shared * 10 >= before.len() * 8,
            "{shared} of {}",
            before.len()
        );
    }

    #[test]
    fn empty_and_tiny_inputs() {
        let c = Chunker::new(small_params(), MasterKey::generate().gear_table());
        assert!(c.cut_all(&[]).is_empty());
        assert_eq!(c.cut_all(&[1, 2, 3]), vec![3]);
        let mut n = 0;
        c.stream(&[][..], |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 0);
    }
}

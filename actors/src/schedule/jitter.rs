//! Deterministic per-plan jitter.

use std::time::Duration;

use crate::clock::duration_to_ns;

/// Domain separation for the jitter hash; changing it moves every plan's
/// firing time, so it is fixed.
const JITTER_CONTEXT: &str = "vouch 2026 scheduler jitter v1";

/// The stable offset of a plan's firing times, in `[0, max)`.
///
/// Derived from a BLAKE3 hash of the plan id (not from `std`'s hasher,
/// whose output may change between Rust releases), so a plan fires at the
/// same offset after every restart and on every machine, while plans that
/// share a cron expression spread over the window instead of all starting
/// at once. Resolution is one millisecond; a `max` under 1 ms gives zero.
pub fn jitter(plan_id: &[u8], max: Duration) -> Duration {
    let max_ms = u64::try_from(duration_to_ns(max) / 1_000_000).unwrap_or(0);
    if max_ms == 0 {
        return Duration::ZERO;
    }
    let digest = blake3::derive_key(JITTER_CONTEXT, plan_id);
    let mut word = [0u8; 8];
    word.copy_from_slice(&digest[..8]);
    // The modulo bias is below max_ms / 2^64: irrelevant for a jitter.
    Duration::from_millis(u64::from_le_bytes(word) % max_ms)
}

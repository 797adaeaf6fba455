//! Failpoints (STYLE.md item 10), of two kinds:
//! - [`crash`]: named commit steps where the process kills itself when
//!   `VOUCH_FAILPOINT` names them, for the crash tests that run the real
//!   binary;
//! - [`hit`] (test builds only): a unit test arms a stage with a marker, and
//!   the stage panics when the key it passes (a path, a blob's data, the
//!   repository location) contains the marker. Markers are unique per test,
//!   so tests running at once do not disturb each other. Outside
//!   `cfg(test)` every hit compiles to nothing.

/// A named crash point on a commit step: when the environment variable
/// `VOUCH_FAILPOINT` names it, the process kills itself with SIGKILL right
/// there (no destructor runs, no lock is released), exactly as `kill -9` at
/// that instant would. The crash tests use it to hit windows too short for a
/// random kill; the names are listed in `docs/format.md`. Without the
/// variable it costs one cached lookup.
pub fn crash(name: &str) {
    vouch_events::crash_point(name);
}

#[cfg(test)]
static ARMED: std::sync::Mutex<Vec<(&'static str, Vec<u8>)>> = std::sync::Mutex::new(Vec::new());

/// Makes `stage` panic on keys containing `marker`.
#[cfg(test)]
pub fn arm(stage: &'static str, marker: &[u8]) {
    if let Ok(mut a) = ARMED.lock() {
        a.push((stage, marker.to_vec()));
    }
}

/// Removes every failpoint with `marker`.
#[cfg(test)]
pub fn disarm(marker: &[u8]) {
    if let Ok(mut a) = ARMED.lock() {
        a.retain(|(_, m)| m != marker);
    }
}

/// Panics if `stage` is armed with a marker that `key` contains.
#[cfg(test)]
pub fn hit(stage: &str, key: &[u8]) {
    let armed = ARMED.lock().is_ok_and(|a| {
        a.iter()
            .any(|(s, m)| *s == stage && key.windows(m.len()).any(|w| w == m.as_slice()))
    });
    if armed {
        panic!("failpoint {stage} hit");
    }
}

/// Nothing outside tests.
#[cfg(not(test))]
#[inline(always)]
pub fn hit(_stage: &str, _key: &[u8]) {}

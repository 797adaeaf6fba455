//! Crash points on commit steps (in every build): the log's own, and the
//! engine's through `vouch::failpoint::crash`, one lookup of
//! `VOUCH_FAILPOINT` for the process.

/// A named crash point on the log's commit steps: when the environment
/// variable `VOUCH_FAILPOINT` names it, the process kills itself with
/// SIGKILL right there, as `kill -9` at that instant would (the same
/// convention as the engine's `failpoint::crash`; the names are listed in
/// `docs/events.md`). The chaos runner restarts the service with one set
/// to hit windows too short for a random kill. Without the variable it
/// costs one cached lookup.
pub fn at(name: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if AT
        .get_or_init(|| std::env::var("VOUCH_FAILPOINT").ok())
        .as_deref()
        == Some(name)
    {
        eprintln!("vouch: failpoint {name}: killing this process");
        // SAFETY: sends SIGKILL to this process; nothing is read or written.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

//! Fault injection for the log's writer (cargo feature `failpoints`, off by
//! default and in every release build): the next syncs of a segment fail
//! as a disk would, with `EIO` (an fsync error) or `ENOSPC` (the disk is
//! full). The deterministic simulation of the service arms them to check
//! that a log that refuses appends for a while loses no acknowledged event
//! and that the service recovers once it takes writes again.
//!
//! A failed sync is handled by the writer exactly as a real one: the batch
//! is not acknowledged, the segment is cut back to its last whole record
//! (that cut's own sync is real), and the append returns the error.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// How an armed sync fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncFault {
    /// `EIO`: the fsync reported a write error.
    Eio,
    /// `ENOSPC`: no space left on the device.
    Enospc,
}

impl SyncFault {
    fn error(self) -> std::io::Error {
        std::io::Error::from_raw_os_error(match self {
            SyncFault::Eio => libc::EIO,
            SyncFault::Enospc => libc::ENOSPC,
        })
    }
}

/// The faults armed for the next syncs (shared: clone it, arm it from a
/// test while the writer runs).
#[derive(Clone, Debug, Default)]
pub struct SyncFaults(Arc<Mutex<VecDeque<SyncFault>>>);

impl SyncFaults {
    /// The next `n` syncs fail with `fault`.
    pub fn fail_next(&self, n: usize, fault: SyncFault) {
        let mut q = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        q.extend(std::iter::repeat_n(fault, n));
    }

    /// How many armed faults are left.
    pub fn pending(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Disarms every fault left.
    pub fn clear(&self) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The error the next sync returns, if one is armed.
    pub(crate) fn take(&self) -> Option<std::io::Error> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .map(SyncFault::error)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{Event, EventLog, LogOptions, LogReader, ManualClock, ServiceStarted, SharedLog};

    fn event(n: u32) -> Event {
        ServiceStarted {
            version: format!("{n}"),
        }
        .into()
    }

    /// Armed syncs fail with the errno asked for, the failed batches are
    /// neither acknowledged nor left in the segment, and the log takes
    /// writes again afterwards, also after a reopen.
    #[test]
    fn armed_syncs_fail_and_the_log_recovers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(1_800_000_000_000_000_000));
        let log = EventLog::open(dir.path(), LogOptions::default(), clock.clone()).expect("open");
        let shared = SharedLog::new(log);
        shared.append(vec![event(1)]).expect("first");
        shared.sync_faults().fail_next(1, SyncFault::Eio);
        shared.sync_faults().fail_next(1, SyncFault::Enospc);
        let e = shared.append(vec![event(2)]).expect_err("EIO");
        assert!(e.to_string().contains("Input/output error"), "{e}");
        let e = shared.append(vec![event(3), event(4)]).expect_err("ENOSPC");
        assert!(e.to_string().contains("No space left"), "{e}");
        assert_eq!(shared.sync_faults().pending(), 0);
        let r = shared.append(vec![event(5)]).expect("recovered");
        assert_eq!(r.last_seq, 2);
        drop(shared);
        let log = EventLog::open(dir.path(), LogOptions::default(), clock).expect("reopen");
        assert_eq!(log.last_seq(), 2);
        let versions: Vec<String> = LogReader::new(dir.path())
            .replay_from(1)
            .expect("replay")
            .map(|e| match e.expect("read").event {
                Event::ServiceStarted(s) => s.version,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(versions, ["1", "5"]);
    }
}

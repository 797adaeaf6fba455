//! The append-only event log: segment files of checksummed, hash-chained
//! records; one writer with group commit; readers that replay and follow.

mod checkpoint;
pub(crate) mod crash;
#[cfg(feature = "failpoints")]
mod failpoints;
mod frame;
mod group;
mod head;
mod import;
mod notify;
mod reader;
mod segment;
mod verify;
mod writer;

#[cfg(test)]
mod tests;

pub use checkpoint::{latest_checkpoint, ChainKey, SealKey};
#[cfg(feature = "failpoints")]
pub use failpoints::{SyncFault, SyncFaults};
pub use group::SharedLog;
pub use head::read_log_head;
pub use import::{last_record, ImportedLog, LogImporter, RecordRef};
pub use reader::{LogReader, Replay, Subscription};
pub use verify::{
    scrub, verify_chain, verify_log, ChainProblem, ChainReport, LogVerifyReport, ScrubReport,
};
pub use writer::{AppendReceipt, EventLog, LogOptions};

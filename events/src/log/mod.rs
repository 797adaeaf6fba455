//! The append-only event log: segment files of checksummed, hash-chained
//! records; one writer with group commit; readers that replay and follow.

#[cfg(feature = "failpoints")]
mod failpoints;
mod frame;
mod group;
mod head;
mod notify;
mod reader;
mod segment;
mod verify;
mod writer;

#[cfg(test)]
mod tests;

#[cfg(feature = "failpoints")]
pub use failpoints::{SyncFault, SyncFaults};
pub use group::SharedLog;
pub use reader::{LogReader, Replay, Subscription};
pub use verify::{scrub, verify_chain, ChainProblem, ChainReport, ScrubReport};
pub use writer::{AppendReceipt, EventLog, LogOptions};

//! The append-only event log: segment files of checksummed, hash-chained
//! records; one writer with group commit; readers that replay and follow.

mod frame;
mod group;
mod notify;
mod reader;
mod segment;
mod verify;
mod writer;

#[cfg(test)]
mod tests;

pub use group::SharedLog;
pub use reader::{LogReader, Replay, Subscription};
pub use verify::{verify_chain, ChainProblem, ChainReport};
pub use writer::{AppendReceipt, EventLog, LogOptions};

//! Vouch's data plane: the repository format, the backup, restore and
//! verification engines, and the command-line interface built on them.
//!
//! The engine never imports the orchestration (`vouch-actors`) or the web
//! layer; only `cli` and `main.rs` tie them together.

#![warn(missing_docs)]

pub mod agent;
pub mod anomaly;
pub mod backend;
pub mod backup;
#[cfg(feature = "bench")]
pub mod bench;
pub mod chunker;
pub mod cli;
pub mod copy;
pub mod crypto;
pub mod diff;
pub mod dump;
mod error;
mod failpoint;
pub mod find;
pub mod forget;
pub mod format;
pub mod globs;
pub mod hooks;
pub mod http_client;
pub mod id;
pub mod mount;
pub mod progress;
pub mod proof;
pub mod providers;
pub mod prune;
pub mod repair;
pub mod repo;
pub mod restore;
pub mod stats;
pub mod tls_pin;
pub mod tree;
pub mod util;
pub mod verify;
pub mod workers;
pub mod xattrs;

pub use error::{exit_code, Error, IoContext, Result};

//! Identifiers. One newtype per kind, never a bare string or `[u8; 32]`.
//!
//! [`SnapshotId`] is 32 bytes and is serialised as a MessagePack `bin 8`
//! (34 bytes), never as an array of 32 integers; the encoding is pinned by
//! golden-byte tests. The other ids are short strings chosen by whoever
//! creates the thing (a plan's name, a job's id).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::EventError;

/// The id of a snapshot in a repository; a recovery point is identified by it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnapshotId(pub [u8; 32]);

/// A recovery point is a committed snapshot; they share their id.
pub type PointId = SnapshotId;

impl SnapshotId {
    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first 8 hex characters, for humans.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SnapshotId({})", self.short())
    }
}

impl FromStr for SnapshotId {
    type Err = EventError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out)
            .map_err(|_| EventError::InvalidId(format!("not a 64-digit hex snapshot id: {s:?}")))?;
        Ok(SnapshotId(out))
    }
}

/// MessagePack (the log, snapshots of projections) gets `bin 8`; a
/// human-readable format (JSON in the API) gets the 64 hex digits.
impl Serialize for SnapshotId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_hex())
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for SnapshotId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            return s.parse().map_err(serde::de::Error::custom);
        }
        let buf: serde_bytes::ByteBuf = serde_bytes::ByteBuf::deserialize(d)?;
        let arr: [u8; 32] = buf
            .as_slice()
            .try_into()
            .map_err(|_| serde::de::Error::invalid_length(buf.len(), &"32 bytes"))?;
        Ok(SnapshotId(arr))
    }
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// Wraps a string.
            pub fn new(s: impl Into<String>) -> Self {
                $name(s.into())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:?})"), self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_owned())
            }
        }
    };
}

string_id!(
    /// A backup plan (what, when, where, how long, how it is proven).
    PlanId
);
string_id!(
    /// A job (one backup, verification, restore test, ...).
    JobId
);
string_id!(
    /// An agent on a protected host.
    AgentId
);
string_id!(
    /// An alert.
    AlertId
);
string_id!(
    /// A repository, as named in the server's configuration.
    RepositoryId
);

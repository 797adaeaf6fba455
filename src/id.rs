//! Newtype ids: 32 bytes each, written as MessagePack `bin 8` (never as an
//! array of integers) and shown as lower-case hex.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Length of every id in bytes.
pub const ID_LEN: usize = 32;

/// Errors from parsing ids.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdError {
    /// Not 64 hex digits.
    #[error("not an id (64 hex digits): {0:?}")]
    Invalid(String),
}

macro_rules! define_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub [u8; ID_LEN]);

        impl $name {
            /// The id as lower-case hex.
            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }

            /// The first 8 hex digits, for display.
            pub fn short(&self) -> String {
                hex::encode(&self.0[..4])
            }

            /// Parses 64 hex digits.
            pub fn from_hex(s: &str) -> Result<Self, IdError> {
                let mut out = [0u8; ID_LEN];
                hex::decode_to_slice(s, &mut out).map_err(|_| IdError::Invalid(s.to_string()))?;
                Ok(Self(out))
            }

            /// The unkeyed BLAKE3 hash of `bytes` as an id.
            pub fn hash_of(bytes: &[u8]) -> Self {
                Self(*blake3::hash(bytes).as_bytes())
            }

            /// A random id.
            pub fn random() -> Self {
                Self(crate::crypto::random_array())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.short())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    s.serialize_str(&self.to_hex())
                } else {
                    s.serialize_bytes(&self.0)
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                if d.is_human_readable() {
                    d.deserialize_str(IdVisitor).map($name)
                } else {
                    d.deserialize_bytes(IdVisitor).map($name)
                }
            }
        }
    };
}

struct IdVisitor;

impl<'de> Visitor<'de> for IdVisitor {
    type Value = [u8; ID_LEN];

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ID_LEN} bytes or {} hex digits", ID_LEN * 2)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let mut out = [0u8; ID_LEN];
        hex::decode_to_slice(v, &mut out)
            .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))?;
        Ok(out)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        v.try_into().map_err(|_| E::invalid_length(v.len(), &self))
    }
}

define_id!(
    /// Keyed BLAKE3 of a blob's plaintext.
    BlobId
);
define_id!(
    /// BLAKE3 of a pack file's stored bytes (its file name).
    PackId
);
define_id!(
    /// BLAKE3 of a snapshot manifest's stored bytes (its file name).
    SnapshotId
);
define_id!(
    /// BLAKE3 of an index file's stored bytes (its file name).
    IndexId
);
define_id!(
    /// Random id of a key file.
    KeyId
);
define_id!(
    /// Random id of a repository.
    RepoId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_encode_as_msgpack_bin8() {
        let id = BlobId([7u8; 32]);
        let bytes = rmp_serde::to_vec(&id).unwrap();
        let mut expected = vec![0xc4, 0x20];
        expected.extend_from_slice(&[7u8; 32]);
        assert_eq!(bytes, expected);
        let back: BlobId = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, id);
    }

    #[test]
    fn hex_round_trip_and_rejects_garbage() {
        let id = PackId::hash_of(b"abc");
        assert_eq!(PackId::from_hex(&id.to_hex()).unwrap(), id);
        assert!(PackId::from_hex("zz").is_err());
        assert!(PackId::from_hex(&"a".repeat(63)).is_err());
    }

    #[test]
    fn wrong_length_is_an_error_not_a_panic() {
        let bytes = rmp_serde::to_vec(&serde_bytes::Bytes::new(&[1, 2, 3])).unwrap();
        assert!(rmp_serde::from_slice::<BlobId>(&bytes).is_err());
    }
}

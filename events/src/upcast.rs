//! Upcasting: lifting payloads written with an older schema version to the
//! current one.
//!
//! Every event type is at version 1 today, so there is nothing to lift yet.
//! When a payload struct in `event.rs` changes:
//!
//! 1. copy its old shape into a module `vN` here (frozen: it must not import
//!    today's types, only serde and the ids' wire forms);
//! 2. add a row to [`UPCASTERS`] that decodes the old shape and encodes the
//!    next version's;
//! 3. bump the version in `event.rs`'s table, add golden bytes for the new
//!    version, and add a fixture log of the old version under
//!    `events/tests/fixtures/`.

/// Lifts a payload of `(event type, from version)` to `from version + 1`.
pub type Upcaster = fn(&[u8]) -> Result<Vec<u8>, String>;

/// Every upcaster, as (event type, from version, function).
pub const UPCASTERS: &[(&str, u16, Upcaster)] = &[];

/// Lifts `payload` step by step while an upcaster exists; returns the final
/// version and payload, or `None` if no upcaster applies at all.
pub fn upcast(
    event_type: &str,
    version: u16,
    payload: &[u8],
) -> Option<Result<(u16, Vec<u8>), String>> {
    upcast_with(UPCASTERS, event_type, version, payload)
}

pub(crate) fn upcast_with(
    table: &[(&str, u16, Upcaster)],
    event_type: &str,
    version: u16,
    payload: &[u8],
) -> Option<Result<(u16, Vec<u8>), String>> {
    let mut v = version;
    let mut p: Option<Vec<u8>> = None;
    while let Some((_, _, f)) = table
        .iter()
        .find(|(t, from, _)| *t == event_type && *from == v)
    {
        let input = p.as_deref().unwrap_or(payload);
        match f(input) {
            Ok(next) => {
                p = Some(next);
                v += 1;
            }
            Err(e) => return Some(Err(e)),
        }
    }
    p.map(|p| Ok((v, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add_one(p: &[u8]) -> Result<Vec<u8>, String> {
        let mut v = p.to_vec();
        v.push(1);
        Ok(v)
    }

    fn refuse(_: &[u8]) -> Result<Vec<u8>, String> {
        Err("no".into())
    }

    #[test]
    fn upcasters_chain_step_by_step() {
        let table: &[(&str, u16, Upcaster)] =
            &[("a", 1, add_one), ("a", 2, add_one), ("b", 1, refuse)];
        assert_eq!(
            upcast_with(table, "a", 1, &[9]),
            Some(Ok((3, vec![9, 1, 1])))
        );
        assert_eq!(upcast_with(table, "a", 2, &[9]), Some(Ok((3, vec![9, 1]))));
        assert_eq!(upcast_with(table, "a", 3, &[9]), None);
        assert_eq!(upcast_with(table, "c", 1, &[9]), None);
        assert_eq!(upcast_with(table, "b", 1, &[9]), Some(Err("no".into())));
    }
}

//! The rolling read-back window: per repository, when each slice of the
//! pack-name space was last read back intact, and which slices came back
//! damaged (until a later read of the slice comes back intact).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::ids::{JobId, RepositoryId};
use crate::projection::{Inconsistency, Recorded};

/// Damage a read-back found in one slice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceDamage {
    /// When it was found.
    pub at: Recorded,
    /// The job that found it.
    pub job: Option<JobId>,
    /// What is damaged, for humans.
    pub damaged: Vec<String>,
}

/// The read-back state of one repository.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepositoryReadBack {
    /// How many slices the pack-name space is cut into (the latest
    /// read-back's; a change of it starts the window over).
    pub of: u32,
    /// Per slice, when it was last read back intact (recorded time).
    pub last_intact: BTreeMap<u32, i64>,
    /// Slices whose latest read-back found damage.
    pub damaged: BTreeMap<u32, SliceDamage>,
    /// When the latest read-back was recorded.
    pub last: Option<Recorded>,
    /// Packs read back, in all.
    pub packs_read: u64,
    /// Bytes read back, in all.
    pub bytes_read: u64,
}

impl RepositoryReadBack {
    /// The share of slices read back intact within `window_ns` of `now`
    /// (0 when nothing was ever read). Slices are equal shares of the
    /// pack-name space, so this is the share of packs proven readable
    /// within the window, up to the unevenness of a few packs per slice.
    pub fn coverage(&self, now_unix_ns: i64, window_ns: i64) -> f64 {
        if self.of == 0 {
            return 0.0;
        }
        let fresh = self
            .last_intact
            .values()
            .filter(|&&t| now_unix_ns.saturating_sub(t) < window_ns)
            .count();
        fresh as f64 / f64::from(self.of)
    }
}

/// Every repository that was ever read back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadBackProjection {
    /// By repository.
    pub repositories: BTreeMap<RepositoryId, RepositoryReadBack>,
}

impl ReadBackProjection {
    pub(crate) fn apply(&mut self, at: Recorded, event: &Event) -> Option<Inconsistency> {
        let Event::PacksReadBack(e) = event else {
            return None;
        };
        let bad = |message: String| {
            Some(Inconsistency {
                at,
                event_type: event.event_type().to_owned(),
                point: None,
                message,
            })
        };
        if e.of == 0 {
            return bad("a read-back over 0 slices".into());
        }
        if let Some(k) = e.slices.iter().find(|&&k| k >= e.of) {
            return bad(format!("slice {k} is outside 0..{}", e.of));
        }
        let repo = self.repositories.entry(e.repository.clone()).or_default();
        if repo.of != e.of {
            // Other slices: what was read under the old cut says nothing
            // about the new slices.
            repo.of = e.of;
            repo.last_intact.clear();
            repo.damaged.clear();
        }
        for &k in &e.slices {
            if e.damaged.is_empty() {
                repo.last_intact.insert(k, at.unix_ns);
                repo.damaged.remove(&k);
            } else {
                repo.damaged.insert(
                    k,
                    SliceDamage {
                        at,
                        job: e.job.clone(),
                        damaged: e.damaged.clone(),
                    },
                );
            }
        }
        repo.last = Some(at);
        repo.packs_read = repo.packs_read.saturating_add(e.packs);
        repo.bytes_read = repo.bytes_read.saturating_add(e.bytes_read);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::PacksReadBack;

    const S: i64 = 1_000_000_000;

    fn read(slices: &[u32], of: u32, damaged: &[&str]) -> Event {
        PacksReadBack {
            repository: RepositoryId::new("main"),
            job: Some(JobId::new("j")),
            slices: slices.to_vec(),
            of,
            packs: slices.len() as u64,
            bytes_read: 100,
            damaged: damaged.iter().map(|s| (*s).to_owned()).collect(),
            damaged_packs: damaged
                .iter()
                .filter_map(|s| crate::upcast::pack_of_damage_line(s))
                .collect(),
            affected_points: None,
        }
        .into()
    }

    fn at(seq: u64, secs: i64) -> Recorded {
        Recorded {
            seq,
            unix_ns: secs * S,
        }
    }

    #[test]
    fn coverage_counts_slices_read_intact_within_the_window() {
        let mut p = ReadBackProjection::default();
        assert!(p.apply(at(1, 0), &read(&[0, 1], 4, &[])).is_none());
        assert!(p.apply(at(2, 50), &read(&[2], 4, &[])).is_none());
        let r = &p.repositories[&RepositoryId::new("main")];
        assert_eq!(r.coverage(60 * S, 100 * S), 0.75);
        // Slices 0 and 1 leave the window at 100 s.
        assert_eq!(r.coverage(100 * S, 100 * S), 0.25);
        assert_eq!(r.coverage(151 * S, 100 * S), 0.0);
        assert_eq!((r.packs_read, r.bytes_read), (3, 200));
    }

    #[test]
    fn damage_stays_until_the_slice_reads_back_intact() {
        let mut p = ReadBackProjection::default();
        p.apply(at(1, 0), &read(&[0, 1], 2, &[]));
        p.apply(at(2, 10), &read(&[1], 2, &["pack ab: bad"]));
        let r = &p.repositories[&RepositoryId::new("main")];
        assert_eq!(r.damaged.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(r.damaged[&1].damaged, vec!["pack ab: bad".to_owned()]);
        // Damage does not count as covered, and an earlier intact read of
        // the slice ages out as usual.
        assert_eq!(r.last_intact[&1], 0);
        p.apply(at(3, 20), &read(&[1], 2, &[]));
        let r = &p.repositories[&RepositoryId::new("main")];
        assert!(r.damaged.is_empty());
        assert_eq!(r.last_intact[&1], 20 * S);
    }

    #[test]
    fn a_new_cut_starts_over_and_bad_slices_change_nothing() {
        let mut p = ReadBackProjection::default();
        p.apply(at(1, 0), &read(&[0, 1, 2], 3, &[]));
        assert!(p.apply(at(2, 1), &read(&[3], 3, &[])).is_some());
        assert!(p.apply(at(3, 1), &read(&[], 0, &[])).is_some());
        assert_eq!(
            p.repositories[&RepositoryId::new("main")].last_intact.len(),
            3
        );
        p.apply(at(4, 2), &read(&[5], 8, &[]));
        let r = &p.repositories[&RepositoryId::new("main")];
        assert_eq!(r.of, 8);
        assert_eq!(r.last_intact.keys().copied().collect::<Vec<_>>(), vec![5]);
    }
}

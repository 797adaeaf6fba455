//! The verdict of the ransomware heuristic: a new backup's change figures
//! against its plan's recent history. Pure: the same figures and history
//! give the same signals.
//!
//! Three signals can raise an anomaly alone, each when its score reaches
//! [`THRESHOLD`]: `entropy-jump` (files that compressed and no longer do),
//! `extension-churn` (files renamed to one extension foreign to their
//! directory) and `ransom-note` (one note-like name added in directories
//! that existed). Two more are reported beside them but never raise one
//! alone, because benign work produces them every day (an upgrade rewrites
//! most of a tree; new photos miss the dedup): `mass-rewrite` and
//! `dedup-miss`. Each threshold grows with what the plan did recently, so
//! a plan that compresses its logs in place every night is measured
//! against itself.

use vouch_events::{AnomalySignal, BackupSummary, ChangeFigures};

use super::profile::Profile;

/// The score at which a signal counts (scores run 0-1000).
pub const THRESHOLD: u32 = 500;
/// Files that must stop compressing, or gain one foreign extension, at
/// the least.
const MIN_FILES: u64 = 5;
/// Directories a note must appear in, at the least.
const MIN_NOTE_DIRS: u64 = 3;
/// Share of the files that must stop compressing, or be renamed, at the
/// least (0.5 %).
const MIN_SHARE: f64 = 0.005;
/// How far above the plan's own recent highest a primary signal must go.
const OVER_HISTORY: f64 = 3.0;
/// Share of files rewritten or deleted, or of bytes missing the dedup,
/// that a secondary signal is measured against, at the least.
const SECONDARY_SHARE: f64 = 0.10;
/// How many paths an anomaly names.
const PATHS: usize = 20;

/// One earlier backup of the plan: its figures, and what changed then (none
/// for a first backup or one recorded before change figures existed).
pub type Past = (BackupSummary, Option<ChangeFigures>);

/// What the heuristic concluded about one backup.
#[derive(Clone, Debug, PartialEq)]
pub struct Assessment {
    /// Every signal with a score above zero, strongest first.
    pub signals: Vec<AnomalySignal>,
    /// Whether a signal that can raise an anomaly reached [`THRESHOLD`].
    pub anomalous: bool,
    /// The paths that weighed most (those of the signals that reached it
    /// first), at most 20.
    pub paths: Vec<String>,
}

fn score(measured: f64, need: f64) -> u32 {
    if need <= 0.0 {
        return 0;
    }
    ((measured / need) * f64::from(THRESHOLD)).clamp(0.0, 1000.0) as u32
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// The highest share `f` gives over the history.
fn highest(history: &[Past], f: impl Fn(&BackupSummary, &ChangeFigures) -> f64) -> f64 {
    history
        .iter()
        .filter_map(|(s, c)| c.as_ref().map(|c| f(s, c)))
        .fold(0.0, f64::max)
}

fn share(n: u64, of: u64) -> f64 {
    n as f64 / of.max(1) as f64
}

/// How many files a primary signal needs in a tree of `files` files when
/// the plan's recent highest share is `usual`.
fn files_needed(files: u64, usual: f64) -> u64 {
    let by_share = (files as f64 * MIN_SHARE.max(OVER_HISTORY * usual)).ceil() as u64;
    MIN_FILES.max(by_share)
}

/// Weighs `profile` (and the backup's `summary`) against `history`, the
/// plan's recent backups, oldest first.
pub fn assess(profile: &Profile, summary: &BackupSummary, history: &[Past]) -> Assessment {
    let f = &profile.figures;
    let files = f.files_before;
    let mut primary: Vec<(AnomalySignal, &[String])> = Vec::new();
    if let Some(n) = f.became_incompressible {
        let usual = highest(history, |_, c| {
            share(c.became_incompressible.unwrap_or(0), c.files_before)
        });
        let need = files_needed(files, usual);
        primary.push((
            AnomalySignal {
                kind: "entropy-jump".into(),
                score_permille: score(n as f64, need as f64),
                detail: format!(
                    "{n} of {files} files stopped compressing ({}); {need} would be unusual for this plan (its recent highest: {})",
                    pct(share(n, files)),
                    pct(usual)
                ),
            },
            &profile.incompressible_paths,
        ));
    }
    let usual = highest(history, |_, c| share(c.churn_files, c.files_before));
    let need = files_needed(files, usual);
    if let Some(ext) = &f.churn_extension {
        primary.push((
            AnomalySignal {
                kind: "extension-churn".into(),
                score_permille: score(f.churn_files as f64, need as f64),
                detail: format!(
                    "{} files were renamed to the extension .{ext}, new to their directories; {need} would be unusual for this plan",
                    f.churn_files
                ),
            },
            &profile.churn_paths,
        ));
    }
    if let Some(name) = &f.note_name {
        let usual = history
            .iter()
            .filter_map(|(_, c)| c.as_ref().map(|c| c.note_dirs))
            .max()
            .unwrap_or(0);
        let need = MIN_NOTE_DIRS.max(2 * usual + 1);
        primary.push((
            AnomalySignal {
                kind: "ransom-note".into(),
                score_permille: score(f.note_dirs as f64, need as f64),
                detail: format!(
                    "a file named {name:?} appeared in {} directories that existed before",
                    f.note_dirs
                ),
            },
            &profile.note_paths,
        ));
    }
    let mut secondary = Vec::new();
    let rewritten = f.changed + f.deleted + f.renamed;
    let usual = highest(history, |_, c| {
        share(c.changed + c.deleted + c.renamed, c.files_before)
    });
    let need = SECONDARY_SHARE.max(2.0 * usual);
    secondary.push(AnomalySignal {
        kind: "mass-rewrite".into(),
        score_permille: score(share(rewritten, files), need),
        detail: format!(
            "{rewritten} of {files} files changed, were deleted or renamed ({}; {} added); the plan's recent highest: {}",
            pct(share(rewritten, files)),
            f.added,
            pct(usual)
        ),
    });
    let missed = share(summary.added_bytes, summary.bytes);
    let usual = highest(history, |s, _| share(s.added_bytes, s.bytes));
    let need = SECONDARY_SHARE.max(2.0 * usual);
    secondary.push(AnomalySignal {
        kind: "dedup-miss".into(),
        score_permille: score(missed, need),
        detail: format!(
            "{} of the bytes read were new to the repository; the plan's recent highest: {}",
            pct(missed),
            pct(usual)
        ),
    });
    let anomalous = primary.iter().any(|(s, _)| s.score_permille >= THRESHOLD);
    primary.sort_by_key(|p| std::cmp::Reverse(p.0.score_permille));
    // Each signal that reached its threshold names its share of the
    // paths (the strongest first), then the rest fill what is left.
    let fired: Vec<&[String]> = primary
        .iter()
        .filter(|(s, _)| s.score_permille >= THRESHOLD)
        .map(|(_, ps)| *ps)
        .collect();
    let mut paths: Vec<String> = Vec::new();
    let share = PATHS / fired.len().max(1);
    for round in [share, PATHS] {
        for ps in &fired {
            for p in ps.iter().take(round) {
                if paths.len() < PATHS && !paths.contains(p) {
                    paths.push(p.clone());
                }
            }
        }
    }
    let mut signals: Vec<AnomalySignal> = primary
        .into_iter()
        .map(|(s, _)| s)
        .chain(secondary)
        .filter(|s| s.score_permille > 0)
        .collect();
    signals.sort_by_key(|s| std::cmp::Reverse(s.score_permille));
    Assessment {
        signals,
        anomalous,
        paths,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vouch_events::SnapshotId;

    fn figures(files: u64) -> ChangeFigures {
        ChangeFigures {
            compared_with: SnapshotId([1; 32]),
            files_before: files,
            added: 0,
            changed: 0,
            deleted: 0,
            renamed: 0,
            became_incompressible: Some(0),
            churn_extension: None,
            churn_files: 0,
            note_name: None,
            note_dirs: 0,
        }
    }

    fn profile(f: ChangeFigures) -> Profile {
        Profile {
            figures: f,
            incompressible_paths: vec!["/a.doc".into()],
            churn_paths: vec!["/a.doc.locked".into()],
            note_paths: vec!["/HOW_TO_DECRYPT.txt".into()],
        }
    }

    fn summary() -> BackupSummary {
        BackupSummary {
            bytes: 1000,
            added_bytes: 10,
            ..BackupSummary::default()
        }
    }

    #[test]
    fn a_few_files_that_stopped_compressing_in_a_large_tree_are_not_an_anomaly() {
        let mut f = figures(10_000);
        f.became_incompressible = Some(40); // 0.4 %, below 0.5 %
        let a = assess(&profile(f.clone()), &summary(), &[]);
        assert!(!a.anomalous, "{a:?}");
        f.became_incompressible = Some(60);
        let a = assess(&profile(f), &summary(), &[]);
        assert!(a.anomalous, "{a:?}");
        assert_eq!(a.signals[0].kind, "entropy-jump");
        assert_eq!(a.paths, vec!["/a.doc".to_owned()]);
    }

    #[test]
    fn the_plans_own_history_raises_the_bar() {
        let mut usual = figures(1000);
        usual.became_incompressible = Some(30); // 3 % every night
        let history = vec![(summary(), Some(usual))];
        let mut f = figures(1000);
        f.became_incompressible = Some(40);
        assert!(!assess(&profile(f.clone()), &summary(), &history).anomalous);
        f.became_incompressible = Some(90);
        assert!(assess(&profile(f), &summary(), &history).anomalous);
    }

    #[test]
    fn unknown_compressibility_gives_no_entropy_signal_rather_than_zero() {
        let mut f = figures(1000);
        f.became_incompressible = None;
        let a = assess(&profile(f), &summary(), &[]);
        assert!(a.signals.iter().all(|s| s.kind != "entropy-jump"));
    }

    #[test]
    fn a_mass_rewrite_or_a_dedup_miss_alone_is_reported_but_raises_nothing() {
        let mut f = figures(1000);
        f.changed = 900;
        f.deleted = 50;
        let big_miss = BackupSummary {
            bytes: 1000,
            added_bytes: 1000,
            ..BackupSummary::default()
        };
        let a = assess(&profile(f), &big_miss, &[]);
        assert!(!a.anomalous);
        let kinds: Vec<&str> = a.signals.iter().map(|s| s.kind.as_str()).collect();
        assert_eq!(kinds, ["mass-rewrite", "dedup-miss"]);
        assert!(a.signals.iter().all(|s| s.score_permille == 1000));
        assert!(a.paths.is_empty());
    }

    #[test]
    fn notes_in_three_directories_and_churn_raise_it_alone() {
        let mut f = figures(1000);
        f.note_name = Some("HOW_TO_DECRYPT.txt".into());
        f.note_dirs = 3;
        let a = assess(&profile(f), &summary(), &[]);
        assert!(a.anomalous);
        assert_eq!(a.paths, vec!["/HOW_TO_DECRYPT.txt".to_owned()]);
        let mut f = figures(1000);
        f.churn_extension = Some("locked".into());
        f.churn_files = 5;
        let a = assess(&profile(f.clone()), &summary(), &[]);
        assert!(a.anomalous);
        f.churn_files = 4;
        assert!(!assess(&profile(f), &summary(), &[]).anomalous);
    }
}

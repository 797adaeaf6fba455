//! `scale` (large scale only): how the cost of a backup grows with the work.
//!
//! Three curves, each point a fresh repository per tool, caches dropped
//! before every step:
//! - files: 10 000, 100 000 and 1 000 000 files of 1 KiB random data, 100
//!   to a directory; a first backup and an unchanged re-run of each;
//! - bytes: one random file of 1, 4 and 16 GiB;
//! - a 20 GiB tree of 32 MiB files, half random and half text-like.
//!
//! The large data sets need room: a step is skipped, with a note, when the
//! work directory's file system has less free space than the data plus a
//! repository as large. Each repository is removed after its step, and so
//! is the data of the bytes curve and of the tree (generating it again
//! costs less than keeping 41 GiB, and the next step needs the room).

use std::fs;
use std::path::Path;

use super::super::data::{
    ensure_mixed_tree, ensure_random_file, ensure_random_files, DataSet, Mixed,
};
use super::super::report::{ScenarioResult, StepResult};
use super::super::{Ctx as _, Result, Scale};
use super::{Incompressible, Runner};

/// File counts of the files curve.
pub const FILE_COUNTS: [u64; 3] = [10_000, 100_000, 1_000_000];
/// Sizes of the bytes curve, GiB.
pub const FILE_GIB: [u64; 3] = [1, 4, 16];
/// Size of the mixed tree, GiB.
pub const TREE_GIB: u64 = 20;
/// Size of each file of the mixed tree.
const TREE_FILE_BYTES: u64 = 32 << 20;
/// Files per directory in the files curve (and in `million-files`).
pub const FILES_PER_DIR: u64 = 100;

/// Free bytes of the file system holding `path` (0 when unknown).
fn free_bytes(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return 0;
    };
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: statvfs(3) fills `s` for a NUL-terminated path.
    if unsafe { libc::statvfs(c.as_ptr(), s.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: statvfs returned 0, so `s` is initialised.
    let s = unsafe { s.assume_init() };
    s.f_bavail.saturating_mul(s.f_frsize)
}

/// The data directory of `count` files (shared with `million-files`).
pub fn files_dir(work: &Path, count: u64) -> std::path::PathBuf {
    let data = work.join("data");
    if count == 1_000_000 {
        data.join("million-files")
    } else {
        data.join(format!("files-{count}"))
    }
}

impl Runner<'_> {
    pub(super) fn scale(&mut self) -> Result<ScenarioResult> {
        if self.o.scale != Scale::Large {
            return Ok(ScenarioResult::skipped(
                "scale",
                "large scale only (--scale large)",
            ));
        }
        let mut sc = ScenarioResult::new("scale");
        for count in FILE_COUNTS {
            self.files_point(&mut sc, count)?;
        }
        for gib in FILE_GIB {
            self.bytes_point(&mut sc, gib)?;
        }
        self.tree_point(&mut sc)?;
        Ok(sc)
    }

    /// Whether `need` bytes are free; else a note saying what was skipped.
    fn room_for(&mut self, sc: &mut ScenarioResult, what: &str, need: u64) -> bool {
        let free = free_bytes(self.work());
        if free >= need {
            return true;
        }
        let note = format!(
            "{what}: skipped, it needs {:.1} GiB free and {} has {:.1} GiB",
            need as f64 / (1u64 << 30) as f64,
            self.work().display(),
            free as f64 / (1u64 << 30) as f64
        );
        self.say(&format!("   {note}"));
        sc.notes.push(note);
        false
    }

    /// One first backup of `d` per tool into a fresh repository (removed
    /// after), as step `st`; then `d` is removed.
    fn first_backups(
        &mut self,
        sc: &mut ScenarioResult,
        mut st: StepResult,
        d: &DataSet,
        what: &str,
    ) -> Result<()> {
        for tool in self.tools.clone() {
            let repo = self.fresh_repo("scale", &tool)?;
            let cmd = tool.backup(self.work(), &repo, &d.path, "s1");
            let r = self.measured(&tool, &st.name, cmd, &repo, (d.bytes, d.files), true, None)?;
            st.push(r);
            fs::remove_dir_all(&repo).ctx(|| format!("removing {}", repo.display()))?;
        }
        sc.steps.push(st);
        fs::remove_dir_all(&d.path).ctx(|| format!("removing {}", d.path.display()))?;
        sc.notes
            .push(format!("{what}: the data was removed after the step"));
        Ok(())
    }

    fn files_point(&mut self, sc: &mut ScenarioResult, count: u64) -> Result<()> {
        let dir = files_dir(self.work(), count);
        ensure_random_files(&dir, count, 1024, FILES_PER_DIR)?;
        let data = Incompressible::check(
            &dir,
            format!("{count} files of 1 KiB random data, {FILES_PER_DIR} per directory"),
        )?;
        sc.data.push(data.data().clone());
        let first_name = format!("first backup, {count} files");
        let again_name = format!("unchanged re-run, {count} files");
        let mut first = StepResult::throughput(&first_name, &data);
        let mut again = StepResult::throughput(&again_name, &data);
        for tool in self.tools.clone() {
            let repo = self.fresh_repo("scale", &tool)?;
            let d = data.data();
            let source = (d.bytes, d.files);
            let cmd = tool.backup(self.work(), &repo, &d.path, "s1");
            first.push(self.measured(&tool, &first_name, cmd, &repo, source, true, None)?);
            let cmd = tool.backup(self.work(), &repo, &d.path, "s2");
            again.push(self.measured(&tool, &again_name, cmd, &repo, source, true, None)?);
            fs::remove_dir_all(&repo).ctx(|| format!("removing {}", repo.display()))?;
        }
        sc.steps.push(first);
        sc.steps.push(again);
        Ok(())
    }

    fn bytes_point(&mut self, sc: &mut ScenarioResult, gib: u64) -> Result<()> {
        let bytes = gib << 30;
        let dir = self.work().join("data").join(format!("scale-file-{gib}g"));
        let file = dir.join("random.bin");
        let have = fs::metadata(&file).map_or(0, |m| m.len());
        let what = format!("one file of {gib} GiB");
        // The data (unless there) and one repository as large, with 1 GiB to spare.
        if !self.room_for(sc, &what, (bytes - have.min(bytes)) + bytes + (1 << 30)) {
            return Ok(());
        }
        ensure_random_file(&file, bytes)?;
        let data = Incompressible::check(&dir, format!("one file of {gib} GiB random data"))?;
        sc.data.push(data.data().clone());
        let st = StepResult::throughput(format!("backup, {what}"), &data);
        self.first_backups(sc, st, data.data(), &what)
    }

    fn tree_point(&mut self, sc: &mut ScenarioResult) -> Result<()> {
        let bytes = TREE_GIB << 30;
        let dir = self
            .work()
            .join("data")
            .join(format!("scale-tree-{TREE_GIB}g"));
        let what = format!("a {TREE_GIB} GiB tree, half random and half text-like files");
        // The data and a repository of about 2/3 of it, with 1 GiB to spare.
        let have = if dir.exists() { bytes } else { 0 };
        if !self.room_for(sc, &what, (bytes - have) + bytes / 3 * 2 + (1 << 30)) {
            return Ok(());
        }
        ensure_mixed_tree(&dir, bytes, TREE_FILE_BYTES)?;
        let data = Mixed::check(
            &dir,
            format!(
                "{TREE_GIB} GiB in files of {} MiB, half random and half text-like",
                TREE_FILE_BYTES >> 20
            ),
        )?;
        sc.data.push(data.data().clone());
        let st = StepResult::mixed(format!("backup, {what}"), &data);
        self.first_backups(sc, st, data.data(), &what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_space_of_a_real_file_system_is_seen() {
        let d = tempfile::tempdir().unwrap();
        assert!(free_bytes(d.path()) > 0);
        assert_eq!(free_bytes(&d.path().join("missing")), 0);
    }

    #[test]
    fn the_million_files_curve_point_shares_the_million_files_data() {
        let w = Path::new("/w");
        assert_eq!(files_dir(w, 1_000_000), Path::new("/w/data/million-files"));
        assert_eq!(files_dir(w, 10_000), Path::new("/w/data/files-10000"));
    }
}

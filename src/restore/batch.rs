//! One batch of a restore: up to a bounded number of entries (files,
//! symlinks, special files, hard links; their directories exist already)
//! planned and written together. Within a batch, each pack is read once, in
//! parallel, and every blob is checked against its id before it is written;
//! a pack that holds blobs of several batches is read once per batch, only
//! its needed ranges. The batch bounds the restore's memory: a point of a
//! million files is planned a batch at a time, never all at once.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::dirfd::Dirs;
use super::write::{extent_in_place, restore_pack, zero_range, Out};
use super::{files, meta, Item, PackWork, RestoreOptions, RestoreSummary};
use crate::error::{Error, IoContext, Result};
use crate::format::{Node, NodeKind};
use crate::id::BlobId;
use crate::progress::Progress;
use crate::repo::{MasterIndex, Repository};

/// The first file restored of a hard-link group (`(device, inode)` of the
/// source), which the group's later members are linked to, in this batch
/// or a later one.
#[derive(Clone)]
pub(super) struct FirstLink {
    item: Item,
    /// The inode written for it (known once its batch created it).
    id: Option<(u64, u64)>,
}

/// What every batch of one restore shares.
pub(super) struct Ctx<'a> {
    pub(super) repo: &'a Repository,
    pub(super) index: &'a MasterIndex,
    pub(super) opts: &'a RestoreOptions,
    pub(super) progress: &'a Arc<Progress>,
    pub(super) threads: usize,
    /// The target held earlier content (resume or `--overwrite`).
    pub(super) resumed: bool,
    /// The target is this restore's own unfinished one (its marker).
    pub(super) by_marker: bool,
}

/// Restores the entries `items` (no directories) into `dirs`: files are
/// created or prepared, their blobs planned and written, then special
/// files, metadata, hard links and (`--verify`) the check of what was
/// written. `groups` carries the hard-link groups across batches.
pub(super) fn write_batch(
    cx: &Ctx<'_>,
    dirs: &Dirs,
    items: &[Item],
    groups: &mut HashMap<(u64, u64), FirstLink>,
    summary: &mut RestoreSummary,
) -> Result<()> {
    let (repo, index, opts, progress) = (cx.repo, cx.index, cx.opts, cx.progress);
    let key = repo.key().clone();

    let mut batch_bytes = 0u64;
    let mut batch_files = 0u64;
    for item in items.iter().filter(|i| i.node.kind == NodeKind::File) {
        batch_bytes += item.node.size;
        batch_files += 1;
    }
    summary.total_bytes += batch_bytes;
    Progress::add(&progress.bytes_total, batch_bytes);
    Progress::add(&progress.files_total, batch_files);

    // Files: find what is already in place, size each file, plan the blobs.
    let mut plan: HashMap<u32, PackWork> = HashMap::new();
    let mut by_blob: HashMap<BlobId, (u32, usize)> = HashMap::new();
    // Members linked to their group's first file: (item, group).
    let mut link_items: Vec<(usize, (u64, u64))> = Vec::new();
    // Groups whose first file is in this batch: (item, group).
    let mut firsts: Vec<(usize, (u64, u64))> = Vec::new();
    // The (dev, ino) of each file written, by item.
    let mut ids: HashMap<usize, (u64, u64)> = HashMap::new();
    let mut file_items: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if item.node.kind != NodeKind::File {
            continue;
        }
        let sum: u64 = item.node.content.iter().map(|e| e.length).sum();
        if sum != item.node.size {
            return Err(Error::Damaged(format!(
                "{}: the snapshot's extents hold {sum} bytes, its size is {}",
                item.path.display(),
                item.node.size
            )));
        }
        let only = opts.only_extents.get(&item.rel);
        // A partly written file is never a hard link's first: another link
        // to it would read its holes.
        if item.node.links > 1 && only.is_none() {
            let group = (item.node.device, item.node.inode);
            match groups.get(&group) {
                // A link only if it has the first's content: inode reuse
                // or a change between visits make look-alike groups.
                Some(first) if same_content(&first.item.node, &item.node) => {
                    link_items.push((i, group));
                    continue;
                }
                Some(_) => {}
                None => {
                    groups.insert(
                        group,
                        FirstLink {
                            item: item.clone(),
                            id: None,
                        },
                    );
                    firsts.push((i, group));
                }
            }
        }
        file_items.push(i);
    }
    // Into a target that holds nothing of ours, every file is new: they are
    // created on several threads (creating is most of the kernel's work in
    // a restore of many small files). Otherwise each is looked at in turn.
    let created = if cx.resumed {
        HashMap::new()
    } else {
        create_files(dirs, items, &file_items, &opts.only_extents, cx.threads)?
    };
    for &i in &file_items {
        let item = &items[i];
        crate::util::check_interrupted()?;
        let only = opts.only_extents.get(&item.rel);
        let p = match created.get(&i) {
            Some(&id) => files::Prepared::created(id),
            None => {
                let parent = dirs.get(item.dir())?;
                files::prepare_file(&parent, &item.name, &item.path, cx.by_marker, cx.resumed)?
            }
        };
        ids.insert(i, p.id);
        // Where old data may be found: the file itself, or the one it replaces.
        let (check, copy_from) = match (&p.old, p.in_place) {
            (_, true) => (p.file.as_ref(), None),
            (Some(old), false) => (Some(old), Some(old)),
            (None, false) => (None, None),
        };
        let old_len = match check {
            Some(f) => f.metadata().map(|m| m.len()).unwrap_or(0),
            None => 0,
        };
        let mut offset = 0u64;
        for (x, ext) in item.node.content.iter().enumerate() {
            if only.is_some_and(|o| o.binary_search(&x).is_err()) {
                offset += ext.length;
                continue;
            }
            let entry = match ext.blob {
                Some(blob) => {
                    let loc = index.location(&blob).ok_or_else(|| {
                        Error::Damaged(format!(
                            "blob {blob} of {} is not in the index",
                            item.path.display()
                        ))
                    })?;
                    if u64::from(loc.raw_length) != ext.length {
                        return Err(Error::Damaged(format!(
                            "{}: an extent of {} bytes names blob {blob} of {} bytes",
                            item.path.display(),
                            ext.length,
                            loc.raw_length
                        )));
                    }
                    Some((loc.pack, loc.entry(blob)))
                }
                None => None,
            };
            let in_place = match check {
                Some(f) if offset + ext.length <= old_len => {
                    extent_in_place(f, offset, ext.length, ext.blob.as_ref(), &key)?
                }
                _ => false,
            };
            if in_place {
                if let (Some(from), Some(to), Some(_)) = (copy_from, &p.file, ext.blob) {
                    files::copy_range(from, to, offset, ext.length, &item.path)?;
                }
                summary.bytes_reused += ext.length;
                Progress::add(&progress.bytes_done, ext.length);
            } else {
                match (entry, ext.blob) {
                    (Some((pack_pos, entry)), Some(blob)) => {
                        let slot = by_blob.entry(blob).or_insert_with(|| {
                            let list = plan.entry(pack_pos).or_default();
                            list.push((entry, Vec::new()));
                            (pack_pos, list.len() - 1)
                        });
                        if let Some(list) = plan.get_mut(&slot.0) {
                            list[slot.1].1.push((i, offset));
                        }
                    }
                    _ if p.in_place && offset < p.len => {
                        // A hole over old data: write zeros.
                        let end = (offset + ext.length).min(p.len);
                        if let Some(f) = &p.file {
                            zero_range(f, offset, end - offset)
                                .ctx(|| format!("clearing {}", item.path.display()))?;
                        }
                    }
                    _ => {}
                }
            }
            offset += ext.length;
        }
        if let (true, Some(f)) = (p.len != item.node.size, &p.file) {
            f.set_len(item.node.size)
                .ctx(|| format!("sizing {}", item.path.display()))?;
        }
    }
    for (i, group) in firsts {
        if let Some(first) = groups.get_mut(&group) {
            first.id = ids.get(&i).copied();
        }
    }
    drop(by_blob);

    // Read packs in parallel, each once, and write blobs where they belong.
    let pending: Vec<AtomicU32> = (0..items.len()).map(|_| AtomicU32::new(0)).collect();
    for work in plan.values() {
        for (_, targets) in work {
            for &(item, _) in targets {
                pending[item].fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    // Files that wait for no blob get their metadata in the serial pass.
    let no_writes: Vec<bool> = pending
        .iter()
        .map(|p| p.load(Ordering::Relaxed) == 0)
        .collect();
    let writer_warnings = Mutex::new(Vec::new());
    let written = AtomicU64::new(0);
    let mut packs: Vec<(u32, PackWork)> = plan.into_iter().collect();
    packs.sort_by_key(|(p, _)| *p);
    let queue = Mutex::new(packs.into_iter());
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let out = Out {
        dirs,
        items,
        ids: &ids,
        pending: &pending,
        warnings: &writer_warnings,
        written: &written,
        progress,
    };
    std::thread::scope(|s| {
        for _ in 0..cx.threads {
            s.spawn(|| {
                // One buffer per thread for the packs' ranges.
                let mut scratch = Vec::new();
                loop {
                    if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                        return;
                    }
                    let next = queue.lock().ok().and_then(|mut q| q.next());
                    let Some((pack_pos, blobs)) = next else {
                        return;
                    };
                    if let Err(e) = restore_pack(repo, index, pack_pos, blobs, &out, &mut scratch) {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    summary.bytes_written += written.load(Ordering::Relaxed);
    if let Ok(mut w) = writer_warnings.lock() {
        summary.warnings.append(&mut w);
    }

    // Special files, then the metadata of files, then hard links.
    for item in items
        .iter()
        .filter(|i| !matches!(i.node.kind, NodeKind::Dir | NodeKind::File))
    {
        crate::util::check_interrupted()?;
        let parent = dirs.get(item.dir())?;
        if let Some(w) = meta::create_special(&parent, &item.name, &item.path, &item.node)? {
            summary.warnings.push(w);
            continue;
        }
        summary.others += 1;
        meta::apply_at(
            &parent,
            &item.name,
            &item.node,
            &item.path,
            &mut summary.warnings,
        )?;
    }
    for &i in &file_items {
        if no_writes[i] {
            let f = out.open(i, out.id(i)?, libc::O_RDONLY)?;
            meta::apply_fd(&f, &items[i].node, &items[i].path, &mut summary.warnings)?;
        }
        summary.files += 1;
        Progress::add(&progress.files_done, 1);
    }
    for &(i, group) in &link_items {
        let item = &items[i];
        let (to, id) = first_of(groups, group, item)?;
        let to_dir: Arc<OwnedFd> = dirs.get(to.dir())?;
        files::link(
            &to_dir,
            &to.name,
            &*dirs.get(item.dir())?,
            &item.name,
            id,
            &item.path,
        )?;
        summary.others += 1;
    }

    if opts.verify {
        let checks = file_items.iter().map(|&i| Ok((i, out.id(i)?))).chain(
            link_items
                .iter()
                .map(|&(i, group)| Ok((i, first_of(groups, group, &items[i])?.1))),
        );
        for check in checks {
            let (i, id): (usize, (u64, u64)) = check?;
            crate::util::check_interrupted()?;
            let f = out.open(i, id, libc::O_RDONLY)?;
            let item = &items[i];
            let mut offset = 0;
            for ext in &item.node.content {
                if !extent_in_place(&f, offset, ext.length, ext.blob.as_ref(), &key)? {
                    return Err(Error::Damaged(format!(
                        "{} does not match the snapshot at offset {offset} after restore",
                        item.path.display()
                    )));
                }
                offset += ext.length;
            }
            summary.files_verified += 1;
        }
    }
    Ok(())
}

/// The first file of a hard-link group and its inode.
fn first_of<'g>(
    groups: &'g HashMap<(u64, u64), FirstLink>,
    group: (u64, u64),
    member: &Item,
) -> Result<(&'g Item, (u64, u64))> {
    groups
        .get(&group)
        .and_then(|f| Some((&f.item, f.id?)))
        .ok_or_else(|| {
            Error::Damaged(format!(
                "{}: the file it is a hard link of was not restored",
                member.path.display()
            ))
        })
}

/// Creates the new, empty files `file_items` of a target that holds nothing
/// of this restore's, on `threads` threads (each takes runs of neighbours,
/// so that mostly one thread works in a directory at a time); returns each
/// file's `(dev, ino)`. A file is sized here only when the writes will not
/// do it (it ends in a hole, or only some of its extents are restored).
fn create_files(
    dirs: &Dirs,
    items: &[Item],
    file_items: &[usize],
    only_extents: &HashMap<Vec<u8>, Vec<usize>>,
    threads: usize,
) -> Result<HashMap<usize, (u64, u64)>> {
    const RUN: usize = 64;
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let ids: Mutex<HashMap<usize, (u64, u64)>> =
        Mutex::new(HashMap::with_capacity(file_items.len()));
    let fail = |e: Error| {
        if let Ok(mut f) = failure.lock() {
            f.get_or_insert(e);
        }
    };
    let create = |i: usize| -> Result<(u64, u64)> {
        let item = &items[i];
        let parent = dirs.get(item.dir())?;
        let p = files::create_new(&parent, &item.name, &item.path)?;
        let writes_size = item.node.content.last().is_some_and(|e| e.blob.is_some())
            && !only_extents.contains_key(&item.rel);
        if item.node.size > 0 && !writes_size {
            p.set_len(item.node.size)
                .ctx(|| format!("sizing {}", item.path.display()))?;
        }
        files::file_id(&p, &item.path)
    };
    std::thread::scope(|s| {
        for _ in 0..threads.min(file_items.len().div_ceil(RUN)).max(1) {
            s.spawn(|| {
                let mut mine = Vec::new();
                loop {
                    let start = next.fetch_add(RUN, Ordering::Relaxed);
                    if start >= file_items.len()
                        || failure.lock().map(|f| f.is_some()).unwrap_or(true)
                    {
                        break;
                    }
                    if let Err(e) = crate::util::check_interrupted() {
                        fail(e);
                        break;
                    }
                    for &i in &file_items[start..(start + RUN).min(file_items.len())] {
                        match create(i) {
                            Ok(id) => mine.push((i, id)),
                            Err(e) => {
                                fail(e);
                                break;
                            }
                        }
                    }
                }
                if let Ok(mut ids) = ids.lock() {
                    ids.extend(mine);
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    ids.into_inner()
        .map_err(|_| Error::Damaged("a thread creating files panicked".into()))
}

/// Whether a hard-link group member has the same content as the first.
fn same_content(first: &Node, other: &Node) -> bool {
    first.size == other.size && first.content == other.content
}

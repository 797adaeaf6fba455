//! The assembler: receives the walk in order, waits for each file's content
//! ids, and builds the trees bottom-up, storing each new tree blob. It also
//! keeps the session's numbers for the manifest.

use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

use super::read::FileResult;
use super::save::{BlobJob, Dedup, Naming};
use super::walk::WalkItem;
use super::Abort;
use crate::error::Result;
use crate::format::{encode, BlobType, Node, NodeKind, Summary, Tree};
use crate::id::BlobId;
use crate::progress::Progress;
use crate::repo::Repository;

/// Warnings of a session, shared by the walker, the readers and the assembler.
pub struct Warnings {
    list: Mutex<Vec<String>>,
    progress: Arc<Progress>,
}

impl Warnings {
    /// An empty list that also counts into `progress`.
    pub fn new(progress: Arc<Progress>) -> Self {
        Self {
            list: Mutex::new(Vec::new()),
            progress,
        }
    }

    /// Records one warning (and logs it).
    pub fn push(&self, msg: String) {
        tracing::warn!("{msg}");
        Progress::add(&self.progress.warnings, 1);
        if let Ok(mut w) = self.list.lock() {
            w.push(msg);
        }
    }

    /// All warnings so far.
    pub fn take(&self) -> Vec<String> {
        self.list
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }
}

/// Builds trees from the walk.
pub struct Assembler<'a> {
    /// For the blob-id key.
    pub repo: &'a Repository,
    /// Which tree blobs are new.
    pub dedup: &'a Dedup,
    /// The savers' input.
    pub blobs: &'a Sender<BlobJob>,
    /// Abort flag.
    pub abort: &'a Abort,
    /// Warnings.
    pub warnings: &'a Warnings,
    /// Numbers for the manifest.
    pub summary: Summary,
}

impl Assembler<'_> {
    /// Consumes the walk; returns the root tree's id.
    pub fn run(&mut self, items: Receiver<Vec<WalkItem>>) -> Result<BlobId> {
        let mut stack: Vec<Vec<Node>> = vec![Vec::new()];
        for item in items.into_iter().flatten() {
            match item {
                WalkItem::DirStart => stack.push(Vec::new()),
                WalkItem::Entry(node, pending) => {
                    if let Some(node) = self.complete(*node, pending)? {
                        if let Some(top) = stack.last_mut() {
                            top.push(node);
                        }
                    }
                }
                WalkItem::DirEnd(node) => {
                    let mut node = *node;
                    let nodes = stack.pop().unwrap_or_default();
                    node.subtree = Some(self.store_tree(nodes)?);
                    self.summary.dirs += 1;
                    if let Some(top) = stack.last_mut() {
                        top.push(node);
                    }
                }
            }
        }
        let root = stack.pop().unwrap_or_default();
        self.store_tree(root)
    }

    /// Fills in a file's content from its reader; `None` if it was unreadable.
    fn complete(
        &mut self,
        mut node: Node,
        pending: Option<Receiver<FileResult>>,
    ) -> Result<Option<Node>> {
        match pending.map(|rx| rx.recv()) {
            None if node.kind == NodeKind::File => self.summary.files_unchanged += 1,
            None => {}
            Some(Ok(FileResult::Done {
                extents,
                size,
                bytes_read,
                changed,
            })) => {
                if changed {
                    self.warnings.push(format!(
                        "{}: changed while being read",
                        String::from_utf8_lossy(&node.name)
                    ));
                }
                node.content = extents;
                node.size = size;
                self.summary.files_read += 1;
                self.summary.bytes_read += bytes_read;
            }
            Some(Ok(FileResult::Unreadable(msg))) => {
                self.warnings.push(msg);
                return Ok(None);
            }
            // The reader stopped without an answer: the backup is aborting.
            Some(Err(_)) => return Err(self.abort.error_or_interrupted()),
        }
        match node.kind {
            NodeKind::File => {
                self.summary.files += 1;
                self.summary.total_bytes += node.size;
            }
            NodeKind::Dir => self.summary.dirs += 1,
            _ => self.summary.others += 1,
        }
        Ok(Some(node))
    }

    /// Stores a tree blob if new; returns its id.
    fn store_tree(&self, mut nodes: Vec<Node>) -> Result<BlobId> {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let data = encode(&Tree { nodes });
        let id = self.repo.key().blob_id(&data);
        if self.dedup.claim(&id) {
            self.blobs
                .send(BlobJob {
                    naming: Naming::Known(id),
                    kind: BlobType::Tree,
                    data,
                })
                .map_err(|_| self.abort.error_or_interrupted())?;
        }
        Ok(id)
    }
}

//! Walking a folder tree through folder fds, iteratively and within bounds.
//!
//! The promise: no walk of the file tools recurses on the call stack, so no tree a model or a planted
//! file can make (a folder 10,000 levels deep) overflows a thread's stack; a walk holds one open folder
//! fd per level it is in and stops, with an error naming the limit, past [`MAX_WALK_DEPTH`] levels or
//! [`MAX_WALK_ENTRIES`] entries. Every caller turns that into a clear error result. Like every walk of
//! the file tools, it enters folders through their fds by name (`openat` with `O_NOFOLLOW`) and never
//! follows a symlink.

use crate::workspace::{Entry, entry_at, folder_names_capped, io_message, open_folder_at, size};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::AtFlags;
use std::ffi::{OsStr, OsString};
use std::io;

/// The deepest a walk goes: entries at most this many folders below where it starts. Real trees stay
/// far below it; each level holds one open fd while it is walked.
pub const MAX_WALK_DEPTH: usize = 128;

/// The most entries (files, folders, links, anything) one walk visits, and the most one folder may hold
/// to be listed.
pub const MAX_WALK_ENTRIES: usize = 100_000;

/// Why a walk stopped before the end of its tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WalkLimit {
    /// A folder holds entries deeper than [`MAX_WALK_DEPTH`] levels below the start.
    #[error("`{at}` holds entries more than {MAX_WALK_DEPTH} folders deep (the limit of a walk)")]
    TooDeep {
        /// The folder, as a workspace path.
        at: String,
    },
    /// The tree holds more than [`MAX_WALK_ENTRIES`] entries.
    #[error("`{at}` holds more than {MAX_WALK_ENTRIES} entries (the limit of a walk)")]
    TooMany {
        /// Where the walk started, as a workspace path.
        at: String,
    },
}

/// What a visitor says about an entry it was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visit {
    /// Go on; a folder is entered.
    Enter,
    /// Go on, but do not enter this folder.
    Skip,
    /// End the walk here (not an error).
    Stop,
}

/// One entry met by a walk.
pub(crate) struct Visited<'a> {
    /// The opened folder holding it.
    pub(crate) dir: BorrowedFd<'a>,
    /// Its name in that folder.
    pub(crate) name: &'a OsStr,
    /// Its workspace path (the start's path joined with the names on the way).
    pub(crate) shown: &'a str,
    /// What it is.
    pub(crate) entry: &'a Entry,
}

/// `parent/name`, or `name` when the parent is the root shown as the empty path.
pub(crate) fn join(parent: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if parent.is_empty() { name.into_owned() } else { format!("{parent}/{name}") }
}

/// A folder being walked: its fd, its path and the names of it not visited yet.
struct Level {
    dir: OwnedFd,
    shown: String,
    names: std::vec::IntoIter<OsString>,
}

/// The names of `dir` for a walk that has `budget` entries left, or the limit it would pass.
fn names_within(dir: BorrowedFd<'_>, budget: usize, start: &str) -> Result<Vec<OsString>, WalkLimit> {
    match folder_names_capped(dir, budget) {
        Ok(Some(names)) => Ok(names),
        Ok(None) => Err(WalkLimit::TooMany { at: if start.is_empty() { ".".to_owned() } else { start.to_owned() } }),
        // A folder that cannot be read (removed meanwhile, no permission) is walked as empty.
        Err(_) => Ok(Vec::new()),
    }
}

/// Visits everything below the opened folder `dir` (shown as `shown`, empty for the root), in order:
/// each folder's entries sorted by name, a folder's content right after it (when the visitor says
/// [`Visit::Enter`]). Entries that vanish while the walk runs are passed over.
pub(crate) fn walk(dir: OwnedFd, shown: &str, visit: &mut dyn FnMut(&Visited<'_>) -> Visit) -> Result<(), WalkLimit> {
    let mut budget = MAX_WALK_ENTRIES;
    let names = names_within(dir.as_fd(), budget, shown)?;
    budget -= names.len();
    let mut stack = vec![Level { dir, shown: shown.to_owned(), names: names.into_iter() }];
    while let Some(level) = stack.last_mut() {
        let Some(name) = level.names.next() else {
            stack.pop();
            continue;
        };
        let Ok(entry) = entry_at(level.dir.as_fd(), &name) else { continue };
        let child = join(&level.shown, &name);
        let visited = Visited { dir: level.dir.as_fd(), name: &name, shown: &child, entry: &entry };
        match visit(&visited) {
            Visit::Stop => return Ok(()),
            Visit::Skip => continue,
            Visit::Enter => {}
        }
        let Entry::Folder(_) = entry else { continue };
        let Ok(sub) = open_folder_at(level.dir.as_fd(), &name) else { continue };
        let names = names_within(sub.as_fd(), budget, shown)?;
        if names.is_empty() {
            continue;
        }
        if stack.len() >= MAX_WALK_DEPTH {
            return Err(WalkLimit::TooDeep { at: child });
        }
        budget -= names.len();
        stack.push(Level { dir: sub, shown: child, names: names.into_iter() });
    }
    Ok(())
}

/// What a folder holds, counted the same way by a delete's preview and by the delete itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TreeCount {
    /// Regular files, symlinks and special files.
    pub(crate) files: u64,
    /// Folders.
    pub(crate) folders: u64,
    /// The bytes of the regular files.
    pub(crate) bytes: u64,
}

impl TreeCount {
    /// Counts one entry.
    pub(crate) fn add(&mut self, entry: &Entry) {
        match entry {
            Entry::Folder(_) => self.folders += 1,
            Entry::File(stat) => {
                self.files += 1;
                self.bytes += size(stat);
            }
            Entry::Symlink | Entry::Special(_) => self.files += 1,
            Entry::Missing => {}
        }
    }

    /// Every entry counted.
    pub(crate) fn entries(&self) -> u64 {
        self.files + self.folders
    }
}

/// Counts everything below the opened folder `dir`, shown as `shown`.
pub(crate) fn count_tree(dir: OwnedFd, shown: &str) -> Result<TreeCount, WalkLimit> {
    let mut count = TreeCount::default();
    walk(dir, shown, &mut |visited| {
        count.add(visited.entry);
        Visit::Enter
    })?;
    Ok(count)
}

/// Why a tree could not be removed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemoveError {
    /// A system call failed (the tree may be partly removed).
    #[error("{}", io_message(.0))]
    Io(#[from] io::Error),
    /// The tree grew past a walk's limits while it was removed (it is partly removed).
    #[error(transparent)]
    Limit(#[from] WalkLimit),
}

/// A folder being removed: its fd, its name in the folder below it on the stack, and its entries left.
struct Removing {
    dir: OwnedFd,
    name: OsString,
    names: std::vec::IntoIter<OsString>,
}

/// Removes the folder `name` of `parent` (shown as `shown`) and everything in it, deepest entries
/// first, through folder fds: a symlink inside is removed itself, and a folder swapped for a symlink
/// midway makes the removal fail rather than follow it. Within the same limits as [`walk`]; a caller
/// counts the tree first so that a tree past them is refused before anything is removed.
pub(crate) fn remove_tree(parent: BorrowedFd<'_>, name: &OsStr, shown: &str) -> Result<(), RemoveError> {
    let mut budget = MAX_WALK_ENTRIES;
    let too_many = || WalkLimit::TooMany { at: shown.to_owned() };
    let open = |dir: BorrowedFd<'_>, name: &OsStr, budget: usize| -> Result<Removing, RemoveError> {
        let sub = open_folder_at(dir, name).map_err(io::Error::from)?;
        let names = folder_names_capped(sub.as_fd(), budget)?.ok_or_else(too_many)?;
        Ok(Removing { dir: sub, name: name.to_owned(), names: names.into_iter() })
    };
    let first = open(parent, name, budget)?;
    budget -= first.names.len();
    let mut stack = vec![first];
    loop {
        let depth = stack.len();
        let Some(level) = stack.last_mut() else { break };
        match level.names.next() {
            Some(child) => match entry_at(level.dir.as_fd(), &child)? {
                Entry::Folder(_) => {
                    if depth >= MAX_WALK_DEPTH {
                        return Err(WalkLimit::TooDeep { at: shown.to_owned() }.into());
                    }
                    let sub = open(level.dir.as_fd(), &child, budget)?;
                    budget -= sub.names.len();
                    stack.push(sub);
                }
                Entry::Missing => {}
                _ => rustix::fs::unlinkat(&level.dir, child.as_os_str(), AtFlags::empty()).map_err(io::Error::from)?,
            },
            None => {
                let done = stack.pop();
                let holder = stack.last().map_or(parent, |below| below.dir.as_fd());
                if let Some(done) = done {
                    rustix::fs::unlinkat(holder, done.name.as_os_str(), AtFlags::REMOVEDIR).map_err(io::Error::from)?;
                }
            }
        }
    }
    Ok(())
}

//! What a file tool's preview saw, and the check, when the approved call runs, that it still holds.
//!
//! A person approves `fs_write` and `fs_delete` on a preview (a diff, `delete old.log (13 bytes)`); the
//! file system may change while the call waits. The preview records the state it judged as an
//! observation ([`Seen`], stored with the held call and bound into the turn's digest), and the call, run
//! on that approval, looks again through the directory fd it will act through: on any difference it
//! touches nothing and its error result says what changed (`not deleted: old.log changed since the
//! preview: it was a file of 13 bytes, it is now a folder of 200 entries`). What is compared:
//! - a file: its device and inode, size and modification time, and the SHA-256 of its content when the
//!   preview read it whole (to diff it);
//! - a folder: its device and inode, and every entry beneath it (how many, and the bytes of its files);
//! - a symlink, FIFO, socket or device: its device and inode;
//! - nothing there: that nothing is there still.
//!
//! So a file preview never becomes a folder delete, and a write never overwrites lines the approver did
//! not see.

use crate::walk::{TreeCount, WalkLimit, count_tree};
use crate::workspace::{io_message, open_folder_at, open_regular, size, special_kind};
use rustix::fd::BorrowedFd;
use rustix::fs::{AtFlags, FileType, Stat};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::ffi::OsStr;
use std::io::{self, Read};

/// The state of one workspace path as a preview saw it (stored as JSON in the held call).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Seen {
    /// Nothing by that name.
    Missing,
    /// A regular file.
    File {
        /// Its device and inode.
        dev: u64,
        /// Its inode.
        ino: u64,
        /// Its size in bytes.
        size: u64,
        /// Its modification time: seconds and nanoseconds since the epoch.
        mtime: (i64, i64),
        /// `sha256:` + hex of its content, when the preview read all of it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
    },
    /// A folder, and everything beneath it.
    Folder {
        /// Its device.
        dev: u64,
        /// Its inode.
        ino: u64,
        /// Every entry beneath it, at every level.
        entries: u64,
        /// The bytes of the regular files beneath it.
        bytes: u64,
    },
    /// A symlink, FIFO, socket or device (`what` names which).
    Other {
        /// Its device.
        dev: u64,
        /// Its inode.
        ino: u64,
        /// `symlink`, `fifo`, `socket`, `character device`, `block device`.
        what: String,
    },
}

/// `(device, inode)` of `stat`.
fn identity(stat: &Stat) -> (u64, u64) {
    // The field types differ between targets.
    #[allow(clippy::useless_conversion)]
    (u64::from(stat.st_dev), u64::from(stat.st_ino))
}

/// The modification time of `stat`.
fn mtime(stat: &Stat) -> (i64, i64) {
    // The field types differ between targets.
    #[allow(clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
    (i64::from(stat.st_mtime), i64::try_from(stat.st_mtime_nsec).unwrap_or_default())
}

/// `sha256:` + hex of `bytes`.
pub(crate) fn content_hash(bytes: &[u8]) -> String {
    format!("sha256:{}", tollgate_agent_core::canonical::sha256_hex(bytes))
}

/// Opens the regular file `name` of `dir` and hashes its first `len` bytes (one more is read, so a file
/// that grew meanwhile hashes differently); returns its status as opened and the hash.
fn read_hash(dir: BorrowedFd<'_>, name: &OsStr, shown: &str, len: u64) -> io::Result<(Stat, String)> {
    let (file, opened) = open_regular(dir, name, shown).map_err(|e| io::Error::other(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(len.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((opened, content_hash(&bytes)))
}

/// Why a path could not be looked at.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LookError {
    /// A system call failed.
    #[error("{}", io_message(.0))]
    Io(#[from] io::Error),
    /// A folder is too deep or too large to count.
    #[error(transparent)]
    Limit(#[from] WalkLimit),
}

impl Seen {
    /// A regular file of this status, with the hash of its content when it was read whole.
    pub(crate) fn file(stat: &Stat, sha256: Option<String>) -> Self {
        let (dev, ino) = identity(stat);
        Seen::File { dev, ino, size: size(stat), mtime: mtime(stat), sha256 }
    }

    /// A folder of this status holding what `count` counted.
    pub(crate) fn folder(stat: &Stat, count: &TreeCount) -> Self {
        let (dev, ino) = identity(stat);
        Seen::Folder { dev, ino, entries: count.entries(), bytes: count.bytes }
    }

    /// Looks at `name` in the opened folder `dir` (`shown` names it) the way `like` was made: a folder's
    /// content is counted, and a file's content hashed when `like` holds a hash of as many bytes.
    pub(crate) fn look(dir: BorrowedFd<'_>, name: &OsStr, shown: &str, like: Option<&Seen>) -> Result<Self, LookError> {
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Ok(Seen::Missing),
            Err(e) => return Err(io::Error::from(e).into()),
        };
        // Only a file of the size seen is read to compare its content: any other size is a change already.
        let hash_of = match like {
            Some(Seen::File { size: seen, sha256: Some(_), .. }) if *seen == size(&stat) => Some(*seen),
            _ => None,
        };
        if let Some(Ok((opened, hash))) = hash_of.map(|len| read_hash(dir, name, shown, len)) {
            return Ok(Seen::file(&opened, Some(hash)));
        }
        // (A file that cannot be read as a single-named regular file any more is told by its status.)
        match Seen::node(&stat) {
            Some(seen) => Ok(seen),
            None => Ok(Seen::folder(&stat, &count_tree(open_folder_at(dir, name).map_err(io::Error::from)?, shown)?)),
        }
    }

    /// What `stat` says of anything but a folder (a file without its content's hash); `None` for a
    /// folder, whose content must be counted.
    pub(crate) fn node(stat: &Stat) -> Option<Self> {
        let (dev, ino) = identity(stat);
        Some(match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => return None,
            FileType::RegularFile => Seen::file(stat, None),
            FileType::Symlink => Seen::Other { dev, ino, what: "symlink".to_owned() },
            other => Seen::Other { dev, ino, what: special_kind(other).to_owned() },
        })
    }

    /// The observation as stored in the held call.
    pub(crate) fn to_value(&self) -> Option<Value> {
        serde_json::to_value(self).ok()
    }

    /// What it is, as a sentence's object: `a file of 13 bytes`, `a folder of 200 entries`, `nothing`.
    fn describe(&self) -> String {
        match self {
            Seen::Missing => "nothing".to_owned(),
            Seen::File { size, .. } => format!("a file of {size} bytes"),
            Seen::Folder { entries, .. } => format!("a folder of {entries} entries"),
            Seen::Other { what, .. } => format!("a {what}"),
        }
    }

    /// What changed from `self` (what the preview saw) to `now`, or `None` when nothing did.
    pub(crate) fn change_to(&self, now: &Seen) -> Option<String> {
        if self == now {
            return None;
        }
        let (before, after) = (self.describe(), now.describe());
        if before != after {
            return Some(format!("it was {before}, it is now {after}"));
        }
        let same_node = match (self, now) {
            (Seen::File { dev, ino, .. }, Seen::File { dev: d, ino: i, .. })
            | (Seen::Folder { dev, ino, .. }, Seen::Folder { dev: d, ino: i, .. })
            | (Seen::Other { dev, ino, .. }, Seen::Other { dev: d, ino: i, .. }) => dev == d && ino == i,
            _ => false,
        };
        Some(match now {
            _ if !same_node => format!("it was replaced by another {}", after.trim_start_matches("a ")),
            Seen::Folder { .. } => format!("what is in it changed (it is still {after})"),
            _ => format!("its content changed (it is still {after})"),
        })
    }
}

/// Checks, before a call acts on `name` in the opened folder `dir`, that it is as the approved preview
/// saw it (`observed`, from [`ToolContext::observed`](tollgate_agent_core::ToolContext)). Returns what
/// is there now; `Err` is the error result's text (`verb` says what was not done, e.g. `not deleted`).
pub(crate) fn recheck(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    shown: &str,
    observed: Option<&Value>,
    verb: &str,
) -> Result<Seen, String> {
    let before = match observed.map(Seen::deserialize) {
        None => None,
        Some(Ok(seen)) => Some(seen),
        Some(Err(e)) => {
            return Err(format!("{verb}: the record of what the preview of `{shown}` saw is unreadable ({e})"));
        }
    };
    let now = Seen::look(dir, name, shown, before.as_ref()).map_err(|e| format!("{verb}: {e}"))?;
    if let Some(change) = before.as_ref().and_then(|before| before.change_to(&now)) {
        return Err(format!("{verb}: `{shown}` changed since the preview: {change}"));
    }
    Ok(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ino: u64, size: u64, sha: Option<&str>) -> Seen {
        Seen::File { dev: 1, ino, size, mtime: (10, 0), sha256: sha.map(str::to_owned) }
    }

    #[test]
    fn each_change_is_said_plainly() {
        let folder = Seen::Folder { dev: 1, ino: 9, entries: 200, bytes: 4000 };
        let cases = [
            (file(5, 13, None), folder.clone(), "it was a file of 13 bytes, it is now a folder of 200 entries"),
            (file(5, 13, None), Seen::Missing, "it was a file of 13 bytes, it is now nothing"),
            (Seen::Missing, file(5, 13, None), "it was nothing, it is now a file of 13 bytes"),
            (file(5, 13, None), file(5, 27, None), "it was a file of 13 bytes, it is now a file of 27 bytes"),
            (
                file(5, 13, Some("sha256:a")),
                file(5, 13, Some("sha256:b")),
                "its content changed (it is still a file of 13 bytes)",
            ),
            (file(5, 13, None), file(6, 13, None), "it was replaced by another file of 13 bytes"),
            (
                folder.clone(),
                Seen::Folder { dev: 1, ino: 9, entries: 200, bytes: 1 },
                "what is in it changed (it is still a folder of 200 entries)",
            ),
        ];
        for (before, now, said) in cases {
            assert_eq!(before.change_to(&now).as_deref(), Some(said), "{before:?} -> {now:?}");
        }
        assert_eq!(folder.change_to(&folder), None);
    }

    #[test]
    fn an_observation_reads_back_as_written() {
        for seen in [Seen::Missing, file(5, 13, Some("sha256:ab")), file(5, 13, None)] {
            let value = seen.to_value().unwrap_or_default();
            assert_eq!(Seen::deserialize(&value).ok(), Some(seen));
        }
        let value = file(5, 13, None).to_value().unwrap_or_default();
        assert_eq!(value, serde_json::json!({"kind": "file", "dev": 1, "ino": 5, "size": 13, "mtime": [10, 0]}));
    }
}

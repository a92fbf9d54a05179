//! The workspace root and the one rule every file tool obeys: a path names something inside the root,
//! and the tools reach it without ever following a symlink.
//!
//! Confinement is by construction, not by checking a name and reopening it later. A path given by the
//! model is first normalized lexically ([`Workspace::path`]): absolute paths are refused (even when they
//! point inside the root, so that what the approver reads is always a workspace path), `.` is dropped and
//! `..` may not climb above the root. Then each operation opens the configured root once as a directory
//! fd (the only place a symlink is followed: the root as configured may be one) and walks the components
//! with `openat(dir, name, O_NOFOLLOW | O_DIRECTORY)`, each folder relative to the fd of the one before.
//! No symlink is followed anywhere beneath the root, so the lexical `..` is exact, and a folder swapped
//! for a symlink during the walk makes the walk fail instead of leading it out.
//!
//! What is at the end of a path is looked at with `statat(.., AT_SYMLINK_NOFOLLOW)` before anything is
//! opened: only regular files and folders are read or written. A FIFO, socket or device is refused
//! without ever being opened (opening a FIFO blocks), and so is a regular file with more than one hard
//! link (another name for it may live outside the workspace). A file is opened with `O_NOFOLLOW |
//! O_NONBLOCK`, and the opened fd is checked again (`fstat`: the same device and inode, a regular file,
//! one link), so a swap between the look and the open is caught.
//!
//! [`Workspace::resolve`] is the name-based check `shell` uses for a program path: it follows the same
//! no-symlink rule, then hands back the real path to execute.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Why a path cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path leads outside the workspace (absolute, or `..` above the root); for `shell`'s program
    /// path, also a symlink pointing out.
    #[error("path `{path}` escapes the workspace")]
    Escapes {
        /// The path as given.
        path: String,
    },
    /// The workspace root itself cannot be used.
    #[error("the workspace root {root} is not usable: {message}")]
    Root {
        /// The root as configured.
        root: String,
        /// The OS error.
        message: String,
    },
    /// A component of the path exists but cannot be inspected or opened.
    #[error("path `{path}` cannot be checked: {message}")]
    Unreadable {
        /// The path as given.
        path: String,
        /// The OS error.
        message: String,
    },
    /// The path is, or passes through, a symlink: the file tools never follow one inside the workspace.
    #[error("{}", symlink_message(path, link))]
    Symlink {
        /// The path as given.
        path: String,
        /// The symlink, as a workspace path.
        link: String,
    },
    /// A component before the last is not a folder.
    #[error("path `{path}` goes through `{at}`, which is not a folder")]
    NotAFolder {
        /// The path as given.
        path: String,
        /// The component that is not a folder, as a workspace path.
        at: String,
    },
    /// The path, or a folder on the way to it, does not exist.
    #[error("`{path}` does not exist")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The path names a folder where a file is needed.
    #[error("`{path}` is a folder, not a file")]
    Folder {
        /// The path as given.
        path: String,
    },
    /// The path names a FIFO, socket or device: never opened, since opening one may block or act.
    #[error("`{path}` is a {kind}; the file tools only read and write regular files and folders")]
    Special {
        /// The path as given.
        path: String,
        /// `fifo`, `socket`, `character device`, `block device` or `unknown file type`.
        kind: &'static str,
    },
    /// The path names a regular file that has other names (hard links), which may be outside the
    /// workspace.
    #[error(
        "`{path}` has {links} hard links; a file with other names (possibly outside the workspace) is not read or written"
    )]
    HardLinked {
        /// The path as given.
        path: String,
        /// How many names the file has.
        links: u64,
    },
    /// What was looked at is not what was opened: the file system changed in between.
    #[error("`{path}` changed while it was being opened; try again")]
    Changed {
        /// The path as given.
        path: String,
    },
}

fn symlink_message(path: &str, link: &str) -> String {
    let rule = "the file tools never follow a symlink inside the workspace";
    if path.trim_start_matches("./").trim_end_matches('/') == link {
        format!("`{path}` is a symlink; {rule}")
    } else {
        format!("path `{path}` passes through a symlink (`{link}`); {rule}")
    }
}

impl PathError {
    /// True when the path (or a folder on the way) does not exist: something a later call may create.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }
}

/// A folder the file tools are confined to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

/// A path inside the workspace, resolved against the file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedPath {
    /// The real location: the canonical root joined with `relative`.
    pub real: PathBuf,
    /// The location relative to the (canonical) root, `/`-separated; empty for the root itself.
    pub relative: String,
}

impl ResolvedPath {
    /// True when the path is the workspace root itself.
    pub fn is_root(&self) -> bool {
        self.relative.is_empty()
    }

    /// The path as shown to people: relative to the root, `.` for the root.
    pub fn display(&self) -> &str {
        if self.relative.is_empty() { "." } else { &self.relative }
    }
}

/// A path given by the model, normalized lexically: its components below the root, none `.` or `..`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspacePath {
    given: String,
    parts: Vec<String>,
}

impl WorkspacePath {
    /// The path as the model gave it (used in error messages).
    pub fn given(&self) -> &str {
        &self.given
    }

    /// True when the path is the workspace root itself.
    pub fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The normalized path, `/`-separated; `.` for the root.
    pub fn shown(&self) -> String {
        if self.parts.is_empty() { ".".to_owned() } else { self.parts.join("/") }
    }

    /// The last component; `None` for the root.
    pub(crate) fn name(&self) -> Option<&str> {
        self.parts.last().map(String::as_str)
    }

    /// The first `n` components as a workspace path.
    fn prefix(&self, n: usize) -> String {
        self.parts[..n.min(self.parts.len())].join("/")
    }
}

/// What a path names: the root, or an entry looked at in its opened parent folder.
pub(crate) enum Located {
    /// The workspace root, opened.
    Root(OwnedFd),
    /// Anything below the root.
    Entry {
        /// The folder holding it, opened by the walk.
        parent: OwnedFd,
        /// What it is.
        entry: Entry,
    },
}

/// What a name in an opened folder is, looked at without following a symlink.
#[derive(Debug)]
pub(crate) enum Entry {
    /// Nothing by that name.
    Missing,
    /// A folder.
    Folder(Stat),
    /// A regular file (any number of links).
    File(Stat),
    /// A symlink (never followed).
    Symlink,
    /// A FIFO, socket or device, named by [`special_kind`].
    Special(&'static str),
}

/// The file tools' name for a file type that is neither a regular file, a folder nor a symlink.
pub(crate) fn special_kind(file_type: FileType) -> &'static str {
    match file_type {
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "unknown file type",
    }
}

/// How many names (hard links) the file of `stat` has.
pub(crate) fn links(stat: &Stat) -> u64 {
    // `st_nlink` is a u64 on some targets and a u32 on others.
    #[allow(clippy::useless_conversion)]
    u64::from(stat.st_nlink)
}

/// The size in bytes of the file of `stat`.
pub(crate) fn size(stat: &Stat) -> u64 {
    u64::try_from(stat.st_size).unwrap_or(0)
}

/// The permission bits of the file of `stat` (no set-id or sticky bits).
pub(crate) fn permissions(stat: &Stat) -> Mode {
    Mode::from_raw_mode(stat.st_mode) & (Mode::RWXU | Mode::RWXG | Mode::RWXO)
}

/// Looks at `name` in `dir` without following a symlink (and without opening it).
pub(crate) fn entry_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Entry> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Entry::Folder(stat),
            FileType::RegularFile => Entry::File(stat),
            FileType::Symlink => Entry::Symlink,
            other => Entry::Special(special_kind(other)),
        }),
        Err(Errno::NOENT) => Ok(Entry::Missing),
        Err(e) => Err(e.into()),
    }
}

/// Opens the folder `name` in `dir`, never following a symlink.
pub(crate) fn open_folder_at(dir: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The entries of an opened folder (without `.` and `..`), sorted by name; `None` when it holds more
/// than `cap` (it is not read further).
pub(crate) fn folder_names_capped(dir: BorrowedFd<'_>, cap: usize) -> io::Result<Option<Vec<OsString>>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            if names.len() == cap {
                return Ok(None);
            }
            names.push(OsStr::from_bytes(name).to_owned());
        }
    }
    names.sort();
    Ok(Some(names))
}

/// Refuses anything but a regular file with a single name; `path` names it in the messages.
pub(crate) fn check_regular(entry: &Entry, path: &str) -> Result<Stat, PathError> {
    let given = || path.to_owned();
    match entry {
        Entry::File(stat) if links(stat) > 1 => Err(PathError::HardLinked { path: given(), links: links(stat) }),
        Entry::File(stat) => Ok(*stat),
        Entry::Missing => Err(PathError::NotFound { path: given() }),
        Entry::Folder(_) => Err(PathError::Folder { path: given() }),
        Entry::Symlink => Err(PathError::Symlink { path: given(), link: given() }),
        Entry::Special(kind) => Err(PathError::Special { path: given(), kind }),
    }
}

/// Opens the regular file `name` in `dir` for reading: looked at first (nothing but a regular file with
/// one link is opened), opened without following a symlink and without blocking, then checked again on
/// the opened fd. Returns the file and its status; `path` names it in the messages.
pub(crate) fn open_regular(dir: BorrowedFd<'_>, name: &OsStr, path: &str) -> Result<(File, Stat), PathError> {
    let unreadable = |e: io::Error| PathError::Unreadable { path: path.to_owned(), message: io_message(&e) };
    let changed = || PathError::Changed { path: path.to_owned() };
    let looked = check_regular(&entry_at(dir, name).map_err(unreadable)?, path)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        // Swapped for a symlink (ELOOP) or removed since it was looked at.
        Err(Errno::LOOP) => return Err(PathError::Symlink { path: path.to_owned(), link: path.to_owned() }),
        Err(Errno::NOENT) => return Err(changed()),
        Err(e) => return Err(unreadable(e.into())),
    };
    let opened = rustix::fs::fstat(&fd).map_err(|e| unreadable(e.into()))?;
    let same = opened.st_dev == looked.st_dev && opened.st_ino == looked.st_ino;
    if !same || FileType::from_raw_mode(opened.st_mode) != FileType::RegularFile {
        return Err(changed());
    }
    // A link made between the look and the open is caught here.
    let stat = check_regular(&Entry::File(opened), path)?;
    Ok((File::from(fd), stat))
}

impl Workspace {
    /// A workspace rooted at `root`. The folder need not exist yet; using a path requires it.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root as configured.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The canonical root (symlinks resolved).
    pub fn canonical_root(&self) -> Result<PathBuf, PathError> {
        self.root.canonicalize().map_err(|e| self.root_error(&e))
    }

    fn root_error(&self, error: &io::Error) -> PathError {
        PathError::Root { root: self.root.display().to_string(), message: io_message(error) }
    }

    /// Normalizes a workspace-relative path lexically, refusing one that is absolute or climbs above the
    /// root. Nothing on disk is read.
    pub fn path(&self, path: &str) -> Result<WorkspacePath, PathError> {
        let escapes = || PathError::Escapes { path: path.to_owned() };
        let mut parts: Vec<String> = Vec::new();
        for component in Path::new(path).components() {
            match component {
                Component::Prefix(_) | Component::RootDir => return Err(escapes()),
                Component::CurDir => {}
                Component::ParentDir => {
                    parts.pop().ok_or_else(escapes)?;
                }
                Component::Normal(name) => parts.push(name.to_string_lossy().into_owned()),
            }
        }
        Ok(WorkspacePath { given: path.to_owned(), parts })
    }

    /// Opens the root as a directory fd; the one place a symlink is followed (the configured root may be
    /// one).
    pub(crate) fn open_root(&self) -> Result<OwnedFd, PathError> {
        rustix::fs::openat(CWD, &self.root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| self.root_error(&e.into()))
    }

    /// Opens component `index` of `path` in `dir` as a folder, naming what went wrong.
    fn descend(dir: BorrowedFd<'_>, path: &WorkspacePath, index: usize) -> Result<OwnedFd, PathError> {
        let name = path.parts[index].as_str();
        let given = || path.given.clone();
        match open_folder_at(dir, name.as_ref()) {
            Ok(fd) => Ok(fd),
            Err(Errno::NOENT) => Err(PathError::NotFound { path: given() }),
            // O_NOFOLLOW | O_DIRECTORY on a symlink fails with ENOTDIR or ELOOP: look again to say which.
            Err(e @ (Errno::NOTDIR | Errno::LOOP)) => match entry_at(dir, name.as_ref()) {
                Ok(Entry::Symlink) => Err(PathError::Symlink { path: given(), link: path.prefix(index + 1) }),
                Ok(Entry::Folder(_) | Entry::Missing) => Err(PathError::Changed { path: given() }),
                Ok(_) => Err(PathError::NotAFolder { path: given(), at: path.prefix(index + 1) }),
                Err(_) => Err(PathError::Unreadable { path: given(), message: io_message(&e.into()) }),
            },
            Err(e) => Err(PathError::Unreadable { path: given(), message: io_message(&e.into()) }),
        }
    }

    /// Opens the folder holding the last component of `path` by the walk. With `create`, missing folders
    /// are made (`mkdirat`, each then opened like any other); without, a missing one is `NotFound`.
    /// The root has no parent: `Folder` is returned for it.
    pub(crate) fn open_parent(&self, path: &WorkspacePath, create: bool) -> Result<OwnedFd, PathError> {
        if path.is_root() {
            return Err(PathError::Folder { path: path.given.clone() });
        }
        let mut dir = self.open_root()?;
        for index in 0..path.parts.len() - 1 {
            dir = match Self::descend(dir.as_fd(), path, index) {
                Err(PathError::NotFound { .. }) if create => {
                    let name = path.parts[index].as_str();
                    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => {
                            let message = io_message(&e.into());
                            return Err(PathError::Unreadable { path: path.given.clone(), message });
                        }
                    }
                    Self::descend(dir.as_fd(), path, index)?
                }
                other => other?,
            };
        }
        Ok(dir)
    }

    /// Looks at what `path` names without opening it: the root (opened), or an entry in its parent folder
    /// (opened by the walk). A missing folder on the way is `NotFound`; a missing last component is
    /// [`Entry::Missing`].
    pub(crate) fn locate(&self, path: &WorkspacePath) -> Result<Located, PathError> {
        let Some(name) = path.name() else { return Ok(Located::Root(self.open_root()?)) };
        let parent = self.open_parent(path, false)?;
        let entry = entry_at(parent.as_fd(), name.as_ref())
            .map_err(|e| PathError::Unreadable { path: path.given.clone(), message: io_message(&e) })?;
        Ok(Located::Entry { parent, entry })
    }

    /// Opens the last component of `path`, an entry of the opened `parent`, as a folder.
    pub(crate) fn open_last_folder(parent: BorrowedFd<'_>, path: &WorkspacePath) -> Result<OwnedFd, PathError> {
        match path.parts.len() {
            0 => Err(PathError::NotAFolder { path: path.given.clone(), at: path.shown() }),
            n => Self::descend(parent, path, n - 1),
        }
    }

    /// Checks a path for `shell`'s program lookup and returns where it really is. The same rules as the
    /// file tools (lexical `..`, no symlink followed beneath the root); a symlink that points out of the
    /// workspace (or nowhere) is reported as an escape. Components that do not exist are taken as written.
    pub fn resolve(&self, path: &str) -> Result<ResolvedPath, PathError> {
        let normalized = self.path(path)?;
        let root = self.canonical_root()?;
        let relative = normalized.parts.join("/");
        let real = normalized.parts.iter().fold(root.clone(), |real, part| real.join(part));
        let checked = match self.open_parent(&normalized, false) {
            Ok(parent) => match normalized.name().map(|name| entry_at(parent.as_fd(), name.as_ref())) {
                Some(Ok(Entry::Symlink)) => Err(PathError::Symlink { path: path.to_owned(), link: normalized.shown() }),
                Some(Err(e)) => Err(PathError::Unreadable { path: path.to_owned(), message: io_message(&e) }),
                _ => Ok(()),
            },
            Err(PathError::Folder { .. } | PathError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => Ok(ResolvedPath { real, relative }),
            Err(PathError::Symlink { path, link }) => {
                let target = Path::new(&link).components().fold(root.clone(), |real, part| real.join(part));
                match target.canonicalize() {
                    Ok(target) if target.starts_with(&root) => Err(PathError::Symlink { path, link }),
                    _ => Err(PathError::Escapes { path }),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// An OS error as a short sentence, without the `(os error N)` suffix.
pub(crate) fn io_message(error: &io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_testkit::scratch_dir;

    fn workspace() -> (Workspace, PathBuf) {
        let base = scratch_dir("workspace");
        let root = base.join("ws");
        std::fs::create_dir_all(root.join("sub/deep")).unwrap_or_else(|e| panic!("{e}"));
        (Workspace::new(&root), base)
    }

    #[test]
    fn plain_paths_normalize_inside() {
        let (ws, _) = workspace();
        let shown = |path: &str| ws.path(path).map(|p| p.shown());
        assert_eq!(shown("sub/./deep/../new.txt"), Ok("sub/new.txt".to_owned()));
        assert_eq!(shown("."), Ok(".".to_owned()));
        assert_eq!(shown(""), Ok(".".to_owned()));
        assert_eq!(shown("a/b/../c"), Ok("a/c".to_owned()));
        let resolved = ws.resolve("sub/./deep/../new.txt").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resolved.relative, "sub/new.txt");
        assert!(ws.resolve(".").unwrap_or_else(|e| panic!("{e}")).is_root());
    }

    #[test]
    fn escapes_are_refused() {
        let (ws, _) = workspace();
        for path in ["..", "../x", "sub/../../x", "/etc/passwd", "a/../../b"] {
            assert_eq!(ws.path(path).err(), Some(PathError::Escapes { path: path.to_owned() }), "{path}");
            assert_eq!(ws.resolve(path).err(), Some(PathError::Escapes { path: path.to_owned() }), "{path}");
        }
        let inside_but_absolute = ws.canonical_root().unwrap_or_else(|e| panic!("{e}")).join("sub");
        assert!(ws.path(&inside_but_absolute.display().to_string()).is_err());
    }

    #[test]
    fn no_symlink_beneath_the_root_is_followed() {
        let (ws, base) = workspace();
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&outside, ws.root().join("out")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(ws.root().join("sub/deep"), ws.root().join("in")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(base.join("nowhere"), ws.root().join("dangling")).unwrap_or_else(|e| panic!("{e}"));
        // Opens a folder by the walk, as fs_list does.
        let walk = |path: &str| {
            let path = ws.path(path)?;
            match ws.locate(&path)? {
                Located::Root(_) => Ok(()),
                Located::Entry { parent, .. } => Workspace::open_last_folder(parent.as_fd(), &path).map(drop),
            }
        };

        // Even a link that stays inside is refused, as the folder it is or as a folder on the way.
        let through_in = PathError::Symlink { path: "in/x".to_owned(), link: "in".to_owned() };
        assert_eq!(ws.path("in/x").and_then(|p| ws.open_parent(&p, true)).map(drop), Err(through_in));
        assert!(matches!(walk("in"), Err(PathError::Symlink { .. })));
        assert!(matches!(walk("out"), Err(PathError::Symlink { .. })));
        assert!(matches!(walk("dangling"), Err(PathError::Symlink { .. })));
        assert_eq!(walk("sub/deep"), Ok(()));
        // `..` is lexical: `in/..` is the root, whatever `in` points at.
        assert_eq!(walk("in/.."), Ok(()));
        assert!(!ws.root().join("in/x").exists() && !ws.root().join("sub/deep/x").exists());

        // The program lookup of `shell`: links out are escapes, links inside are refused too.
        assert!(matches!(ws.resolve("out"), Err(PathError::Escapes { .. })));
        assert!(matches!(ws.resolve("out/new.txt"), Err(PathError::Escapes { .. })));
        assert!(matches!(ws.resolve("dangling"), Err(PathError::Escapes { .. })));
        assert!(matches!(ws.resolve("in/x.txt"), Err(PathError::Symlink { .. })));
        assert_eq!(ws.resolve("in/..").map(|r| r.relative), Ok(String::new()));
    }

    #[test]
    fn a_file_on_the_way_is_not_a_folder() {
        let (ws, _) = workspace();
        std::fs::write(ws.root().join("file.txt"), "x").unwrap_or_else(|e| panic!("{e}"));
        let refused = ws.path("file.txt/inner").and_then(|p| ws.open_parent(&p, true)).map(drop);
        assert_eq!(
            refused,
            Err(PathError::NotAFolder { path: "file.txt/inner".to_owned(), at: "file.txt".to_owned() })
        );
    }

    #[test]
    fn missing_root_is_reported() {
        let ws = Workspace::new(scratch_dir("workspace").join("absent"));
        assert!(matches!(ws.resolve("a.txt"), Err(PathError::Root { .. })));
        let path = ws.path("a.txt").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(ws.open_parent(&path, true), Err(PathError::Root { .. })));
    }
}

//! The workspace root and the one rule every file tool obeys: a path names something inside the root.
//!
//! A path given by the model is relative to the root. [`Workspace::resolve`] walks it one component at a
//! time against the real file system: `..` climbs only inside the root, and every component that exists
//! and is a symlink is resolved (canonicalized) and must land inside the root as well. Absolute paths are
//! refused outright, even when they point inside the root, so that what the approver reads is always a
//! workspace path. Components that do not exist yet are taken as written (they cannot be symlinks).
//!
//! Resolution reads the file system, so a tool resolves again when it runs: a symlink planted between the
//! approval and the call is caught then.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a path cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path leads outside the workspace (absolute, `..` above the root, or a symlink pointing out).
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
    /// A component of the path exists but cannot be inspected.
    #[error("path `{path}` cannot be checked: {message}")]
    Unreadable {
        /// The path as given.
        path: String,
        /// The OS error.
        message: String,
    },
}

/// A folder the file tools are confined to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

/// A path inside the workspace, resolved against the file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedPath {
    /// The real location (symlinks in existing components resolved).
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

impl Workspace {
    /// A workspace rooted at `root`. The folder need not exist yet; resolving a path requires it.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root as configured.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The canonical root (symlinks resolved).
    pub fn canonical_root(&self) -> Result<PathBuf, PathError> {
        self.root
            .canonicalize()
            .map_err(|e| PathError::Root { root: self.root.display().to_string(), message: io_message(&e) })
    }

    /// Resolves a workspace-relative path, refusing any that escapes the root.
    pub fn resolve(&self, path: &str) -> Result<ResolvedPath, PathError> {
        let root = self.canonical_root()?;
        let escapes = || PathError::Escapes { path: path.to_owned() };
        let mut current = root.clone();
        // Once a component does not exist, nothing below it exists either: no symlink can hide there.
        let mut missing = false;
        for component in Path::new(path).components() {
            match component {
                Component::Prefix(_) | Component::RootDir => return Err(escapes()),
                Component::CurDir => {}
                Component::ParentDir => {
                    if current == root {
                        return Err(escapes());
                    }
                    current.pop();
                }
                Component::Normal(name) => {
                    let next = current.join(name);
                    if !missing {
                        match std::fs::symlink_metadata(&next) {
                            Ok(meta) if meta.file_type().is_symlink() => {
                                // A dangling symlink cannot be checked, so it is treated as leading out.
                                let target = next.canonicalize().map_err(|_| escapes())?;
                                if !target.starts_with(&root) {
                                    return Err(escapes());
                                }
                                current = target;
                                continue;
                            }
                            Ok(_) => {}
                            Err(e) if e.kind() == io::ErrorKind::NotFound => missing = true,
                            Err(e) if e.kind() == io::ErrorKind::NotADirectory => missing = true,
                            Err(e) => {
                                return Err(PathError::Unreadable { path: path.to_owned(), message: io_message(&e) });
                            }
                        }
                    }
                    current = next;
                }
            }
        }
        let relative = current
            .strip_prefix(&root)
            .map_err(|_| escapes())?
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        Ok(ResolvedPath { real: current, relative })
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
    use tollgate_testkit::scratch_dir;

    fn workspace() -> (Workspace, PathBuf) {
        let base = scratch_dir("workspace");
        let root = base.join("ws");
        std::fs::create_dir_all(root.join("sub/deep")).unwrap_or_else(|e| panic!("{e}"));
        (Workspace::new(&root), base)
    }

    #[test]
    fn plain_paths_resolve_inside() {
        let (ws, _) = workspace();
        let resolved = ws.resolve("sub/./deep/../new.txt").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resolved.relative, "sub/new.txt");
        assert!(ws.resolve(".").unwrap_or_else(|e| panic!("{e}")).is_root());
        assert!(ws.resolve("").unwrap_or_else(|e| panic!("{e}")).is_root());
        assert_eq!(ws.resolve("a/b/../c").map(|r| r.relative), Ok("a/c".to_owned()));
    }

    #[test]
    fn escapes_are_refused() {
        let (ws, _) = workspace();
        for path in ["..", "../x", "sub/../../x", "/etc/passwd", "a/../../b"] {
            let err = ws.resolve(path).err();
            assert_eq!(err, Some(PathError::Escapes { path: path.to_owned() }), "{path}");
        }
        let inside_but_absolute = ws.canonical_root().unwrap_or_else(|e| panic!("{e}")).join("sub");
        assert!(ws.resolve(&inside_but_absolute.display().to_string()).is_err());
    }

    #[test]
    fn symlinks_are_followed_and_checked() {
        let (ws, base) = workspace();
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&outside, ws.root().join("out")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(ws.root().join("sub/deep"), ws.root().join("in")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(base.join("nowhere"), ws.root().join("dangling")).unwrap_or_else(|e| panic!("{e}"));

        assert!(matches!(ws.resolve("out"), Err(PathError::Escapes { .. })));
        assert!(matches!(ws.resolve("out/new.txt"), Err(PathError::Escapes { .. })));
        assert!(matches!(ws.resolve("dangling"), Err(PathError::Escapes { .. })));
        assert_eq!(ws.resolve("in/x.txt").map(|r| r.relative), Ok("sub/deep/x.txt".to_owned()));
        // `..` after a symlink climbs from where the link really points, as the OS would.
        assert_eq!(ws.resolve("in/..").map(|r| r.relative), Ok("sub".to_owned()));
    }

    #[test]
    fn missing_root_is_reported() {
        let ws = Workspace::new(scratch_dir("workspace").join("absent"));
        assert!(matches!(ws.resolve("a.txt"), Err(PathError::Root { .. })));
    }
}

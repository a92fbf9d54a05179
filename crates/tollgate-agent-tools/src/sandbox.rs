//! How the `shell` tool confines the commands it runs: a process group per command, and Landlock on
//! Linux.
//!
//! **No process outlives its call.** Each command leads a process group of its own, and the whole group
//! is killed (SIGKILL) when the timeout passes, when the command itself has exited (after a short grace
//! for its output: whatever it left running in the background dies then), when the call is dropped
//! (cancelled), and at shutdown through [`kill_running_commands`]. A group id is never signalled after
//! it could have gone to an unrelated process: it stays taken while any member lives, and Linux hands out
//! pids in turn, so the id of a group just emptied is not reused within the moment between the leader's
//! reap and the kill. A process that leaves the group on purpose (`setsid`) escapes the kill; under
//! Landlock it still cannot signal Tollgate.
//!
//! **Under Landlock a command reaches only what it was given**:
//! - writes: beneath the workspace root and its private temporary folder (its `TMPDIR`, removed after
//!   the call), nowhere else;
//! - reads and execution: those two, the read-only system folders in [`SYSTEM_READ_PATHS`] (where they
//!   exist) and the program file itself (so an approved program found on `PATH` elsewhere can start);
//! - devices: read and write [`DEVICE_PATHS`], nothing else under `/dev`;
//! - nothing of `/proc` (no process's environment or memory, Tollgate's included), `/sys`, `/home`,
//!   `/root`, `/tmp`, `/var` or `/run`. Tollgate's own files (database, configuration, keys) are out of
//!   reach unless they sit under the workspace or a system folder — a configuration in `/etc` is readable;
//! - network: TCP bind and connect are denied unless the options allow the network (Landlock ABI 4,
//!   Linux 6.7). Landlock confines UDP only from ABI 10; on older kernels UDP (DNS included) stays open;
//! - scopes (ABI 6, Linux 6.12): no signal to, and no abstract UNIX socket of, a process outside the
//!   command's sandbox — Tollgate included. Connecting to a UNIX socket by its path is confined only from
//!   ABI 9: below it, a socket file the command can name (say `/run/...`) stays reachable.
//!
//! Landlock is applied without `unsafe` (no `pre_exec`): `restrict_self` confines the calling thread and
//! whatever it spawns from then on, so each command gets a fresh thread that confines itself, spawns the
//! command in the caller's tokio runtime, hands the child back and ends. Nothing else ever runs on that
//! thread (a thread it started would inherit the sandbox).

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use tokio::process::{Child, Command};

/// Folders a confined command may read and execute from, when they exist.
pub const SYSTEM_READ_PATHS: [&str; 9] =
    ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"];
/// Device files a confined command may read and write.
pub const DEVICE_PATHS: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// The Landlock ABI from which the kernel confines everything the sandbox asks for (files, TCP, scopes).
const FULL_ABI: u8 = 6;
/// The Landlock ABI from which TCP can be denied.
const NETWORK_ABI: u8 = 4;
/// What an older Landlock ABI leaves unconfined, by the ABI that added it.
const ABI_FEATURES: [(u8, &str); 4] = [
    (3, "file truncation"),
    (NETWORK_ABI, "TCP network"),
    (5, "device ioctls"),
    (FULL_ABI, "signals and abstract sockets"),
];

/// How the `shell` tool confines its commands (`[sandbox] mode` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Landlock where the kernel has it; elsewhere commands run unconfined.
    #[default]
    Auto,
    /// Every command runs under Landlock, or not at all (refused in `validate`, before the gate).
    Required,
    /// Unconfined: still its own process group, a scrubbed environment and a private `TMPDIR`.
    Off,
}

/// What this machine's kernel offers the sandbox; see [`sandbox_support`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxSupport {
    /// Landlock with everything the sandbox uses: files, TCP, signal and abstract-socket scoping.
    Full {
        /// The Landlock ABI in use (the lower of the kernel's and the `landlock` crate's).
        abi: u8,
    },
    /// Landlock confines files, but this kernel's ABI lacks some of the rest.
    Partial {
        /// The kernel's Landlock ABI.
        abi: u8,
        /// What it cannot confine, e.g. `TCP network`.
        missing: Vec<&'static str>,
    },
    /// No Landlock.
    Unavailable {
        /// Why, for the operator.
        reason: String,
    },
}

impl SandboxSupport {
    /// The support of a kernel whose Landlock ABI is `abi` (0: none).
    pub fn for_abi(abi: u8) -> Self {
        if abi == 0 {
            return SandboxSupport::Unavailable { reason: "the kernel has no Landlock".to_owned() };
        }
        let missing: Vec<&'static str> =
            ABI_FEATURES.iter().filter(|(since, _)| abi < *since).map(|(_, what)| *what).collect();
        if missing.is_empty() { SandboxSupport::Full { abi } } else { SandboxSupport::Partial { abi, missing } }
    }
}

impl fmt::Display for SandboxSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxSupport::Full { abi } => write!(f, "Landlock ABI {abi}"),
            SandboxSupport::Partial { abi, missing } => {
                write!(f, "Landlock ABI {abi}, which cannot confine {}", missing.join(", "))
            }
            SandboxSupport::Unavailable { reason } => write!(f, "no Landlock: {reason}"),
        }
    }
}

/// What this kernel offers the sandbox, probed once per process (by confining a throwaway thread: the
/// `landlock` crate reports the kernel's ABI only through `restrict_self`).
pub fn sandbox_support() -> SandboxSupport {
    static SUPPORT: OnceLock<SandboxSupport> = OnceLock::new();
    SUPPORT.get_or_init(landlock::probe).clone()
}

/// Kills every command the `shell` tool is running (their whole process groups) and returns how many
/// groups were signalled. For shutdown: the calls themselves then report their commands as ended by a
/// signal.
pub fn kill_running_commands() -> usize {
    let groups = running_groups();
    groups.iter().filter(|pgid| kill_group(**pgid)).count()
}

/// What one command runs under, decided before the gate so the preview can say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Confinement {
    /// Under Landlock.
    Landlock {
        /// TCP is allowed.
        network: bool,
        /// What this kernel cannot confine.
        gaps: Vec<&'static str>,
    },
    /// Without a sandbox.
    Unconfined {
        /// Why, as the preview shows it.
        why: String,
    },
}

impl Confinement {
    /// The confinement `mode` asks for on a machine with `support`; an error when it cannot be had.
    pub(crate) fn decide(mode: SandboxMode, network: bool, support: &SandboxSupport) -> Result<Self, String> {
        match (mode, support) {
            (SandboxMode::Off, _) => Ok(Confinement::Unconfined { why: "turned off".to_owned() }),
            (SandboxMode::Auto, SandboxSupport::Unavailable { reason }) => {
                Ok(Confinement::Unconfined { why: reason.clone() })
            }
            (SandboxMode::Required, SandboxSupport::Unavailable { reason }) => {
                Err(format!("the shell sandbox is required but unavailable: {reason}"))
            }
            (SandboxMode::Required, SandboxSupport::Partial { abi, .. }) if !network && *abi < NETWORK_ABI => {
                Err(format!(
                    "the shell sandbox is required but this kernel's Landlock (ABI {abi}) cannot deny network access"
                ))
            }
            (_, SandboxSupport::Full { .. }) => Ok(Confinement::Landlock { network, gaps: Vec::new() }),
            (_, SandboxSupport::Partial { missing, .. }) => {
                let gaps = missing.iter().copied().filter(|gap| !(network && *gap == "TCP network")).collect();
                Ok(Confinement::Landlock { network, gaps })
            }
        }
    }

    /// The preview's words for it, e.g. `landlock (writes: workspace and a private TMPDIR only; network: off)`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Confinement::Landlock { network, gaps } => {
                let network = if *network { "on" } else { "off" };
                let mut text = format!("landlock (writes: workspace and a private TMPDIR only; network: {network}");
                if !gaps.is_empty() {
                    text.push_str(&format!("; this kernel cannot confine: {}", gaps.join(", ")));
                }
                text.push(')');
                text
            }
            Confinement::Unconfined { why } => format!("none ({why})"),
        }
    }
}

/// Why a command could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpawnError {
    /// Not inside a tokio runtime (the command's pipes need one).
    #[error("no tokio runtime to run the command in")]
    NoRuntime,
    /// The thread that confines itself and spawns the command could not be started or died.
    #[error("the sandbox thread failed: {0}")]
    Thread(String),
    /// The Landlock ruleset could not be built or applied.
    #[error("cannot set up the sandbox: {0}")]
    Sandbox(String),
    /// The kernel accepted the ruleset but enforces none of it.
    #[error("the kernel did not enforce the sandbox (Landlock unavailable)")]
    NotEnforced,
    /// The program could not be started.
    #[error("{}", crate::workspace::io_message(.0))]
    Spawn(std::io::Error),
}

/// What a confined command may reach besides the system folders.
pub(crate) struct Grant<'a> {
    /// The workspace root: read, write, execute.
    pub(crate) workspace: &'a Path,
    /// The command's private `TMPDIR`: read, write, execute.
    pub(crate) temp: &'a Path,
    /// The program file: read and execute.
    pub(crate) program: &'a Path,
}

/// Starts `command` under `confinement` as the leader of a new process group, which is registered
/// for [`kill_running_commands`].
pub(crate) async fn spawn(
    mut command: Command,
    confinement: &Confinement,
    grant: Grant<'_>,
) -> Result<RunningCommand, SpawnError> {
    #[cfg(unix)]
    command.process_group(0);
    match confinement {
        Confinement::Unconfined { .. } => RunningCommand::spawn(&mut command),
        Confinement::Landlock { network, .. } => {
            let handle = tokio::runtime::Handle::try_current().map_err(|_| SpawnError::NoRuntime)?;
            let policy = landlock::Policy {
                workspace: grant.workspace.to_owned(),
                temp: grant.temp.to_owned(),
                program: grant.program.to_owned(),
                network: *network,
            };
            let (sender, receiver) = tokio::sync::oneshot::channel();
            std::thread::Builder::new()
                .name("tollgate-shell-sandbox".to_owned())
                .spawn(move || {
                    // Confined for good: this thread spawns the command and ends, and runs nothing else.
                    let _runtime = handle.enter();
                    let spawned =
                        landlock::restrict_this_thread(&policy).and_then(|()| RunningCommand::spawn(&mut command));
                    // When the call was dropped meanwhile, the command's group is killed right here.
                    let _ = sender.send(spawned);
                })
                .map_err(|e| SpawnError::Thread(e.to_string()))?;
            receiver.await.map_err(|_| SpawnError::Thread("it ended without an answer".to_owned()))?
        }
    }
}

static RUNNING_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn running_groups() -> MutexGuard<'static, BTreeSet<i32>> {
    RUNNING_GROUPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// SIGKILL to every process in group `pgid`; true when there was one to signal.
fn kill_group(pgid: i32) -> bool {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, kill_process_group};
        Pid::from_raw(pgid).is_some_and(|pid| kill_process_group(pid, Signal::KILL).is_ok())
    }
    #[cfg(not(unix))]
    {
        let _ = pgid;
        false
    }
}

/// A started command: its leader and, while registered, its process group. The group is killed when
/// the leader has exited, on [`RunningCommand::reap`] (before reaping a leader still running) and when
/// this is dropped (the call was cancelled; tokio then reaps the leader in the background).
#[derive(Debug)]
pub(crate) struct RunningCommand {
    child: Child,
    /// The group id (the leader's pid) until the group is killed.
    pgid: Option<i32>,
}

impl RunningCommand {
    fn spawn(command: &mut Command) -> Result<Self, SpawnError> {
        let child = command.spawn().map_err(SpawnError::Spawn)?;
        let pgid = child.id().and_then(|pid| i32::try_from(pid).ok()).filter(|pid| *pid > 0);
        if let Some(pgid) = pgid {
            running_groups().insert(pgid);
        }
        Ok(Self { child, pgid })
    }

    /// The leader: for its pipes.
    pub(crate) fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The process group id, until the group is killed.
    pub(crate) fn pgid(&self) -> Option<i32> {
        self.pgid
    }

    /// Kills every process left in the group and forgets the group; true when one was still there.
    pub(crate) fn kill_group(&mut self) -> bool {
        let Some(pgid) = self.pgid.take() else { return false };
        // Under the registry's lock, so `kill_running_commands` never signals a group already forgotten
        // (whose leader may be reaped and its id reused).
        let mut groups = running_groups();
        let killed = kill_group(pgid);
        groups.remove(&pgid);
        killed
    }

    /// Waits for the leader to end, and reaps it. Linux hands out pids in turn, so the group id stays
    /// unused until [`RunningCommand::kill_group`] right after, even when no process of the group is left.
    pub(crate) async fn leader_exited(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Kills what is left of the group, then reaps the leader (killed too if it still ran).
    pub(crate) async fn reap(&mut self) -> std::io::Result<ExitStatus> {
        self.kill_group();
        self.child.wait().await
    }
}

impl Drop for RunningCommand {
    fn drop(&mut self) {
        self.kill_group();
    }
}

#[cfg(target_os = "linux")]
mod landlock {
    //! The Landlock ruleset and the support probe.

    use super::{DEVICE_PATHS, SYSTEM_READ_PATHS, SandboxSupport, SpawnError};
    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, RestrictionStatus, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, path_beneath_rules,
    };
    use std::path::{Path, PathBuf};

    /// The newest ABI this code asks for; the kernel's subset of it is enforced (best effort).
    const REQUESTED_ABI: ABI = ABI::V10;

    /// What one command may reach.
    pub(super) struct Policy {
        pub(super) workspace: PathBuf,
        pub(super) temp: PathBuf,
        pub(super) program: PathBuf,
        pub(super) network: bool,
    }

    /// Confines the calling thread (and what it spawns from now on) to `policy`.
    pub(super) fn restrict_this_thread(policy: &Policy) -> Result<(), SpawnError> {
        let status = ruleset(policy).map_err(|e| SpawnError::Sandbox(e.to_string()))?;
        if status.ruleset == RulesetStatus::NotEnforced {
            return Err(SpawnError::NotEnforced);
        }
        Ok(())
    }

    fn ruleset(policy: &Policy) -> Result<RestrictionStatus, RulesetError> {
        let abi = REQUESTED_ABI;
        let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(abi))?.scope(Scope::from_all(abi))?;
        if !policy.network {
            ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
        }
        let device: BitFlags<AccessFs> =
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
        let existing = |paths: &'static [&'static str]| paths.iter().map(Path::new).filter(|path| path.exists());
        ruleset
            .create()?
            .add_rules(path_beneath_rules(existing(&SYSTEM_READ_PATHS), AccessFs::from_read(abi)))?
            .add_rules(path_beneath_rules([&policy.program], AccessFs::from_read(abi)))?
            .add_rules(path_beneath_rules([&policy.workspace, &policy.temp], AccessFs::from_all(abi)))?
            .add_rules(path_beneath_rules(existing(&DEVICE_PATHS), device))?
            .restrict_self()
    }

    pub(super) fn probe() -> SandboxSupport {
        let probe = std::thread::Builder::new()
            .name("tollgate-landlock-probe".to_owned())
            .spawn(|| -> Result<LandlockStatus, String> {
                let status = Ruleset::default()
                    .handle_access(AccessFs::Execute)
                    .and_then(|ruleset| ruleset.create())
                    .and_then(|ruleset| ruleset.restrict_self())
                    .map_err(|e| e.to_string())?;
                Ok(status.landlock)
            })
            .map_err(|e| e.to_string())
            .and_then(|thread| thread.join().map_err(|_| "the probe thread panicked".to_owned()))
            .and_then(|status| status);
        match probe {
            Ok(LandlockStatus::Available { effective_abi, .. }) => SandboxSupport::for_abi(abi_number(effective_abi)),
            Ok(LandlockStatus::NotEnabled) => SandboxSupport::Unavailable {
                reason: "the kernel has Landlock but it is not enabled (the `lsm=` boot parameter)".to_owned(),
            },
            Ok(LandlockStatus::NotImplemented) => SandboxSupport::Unavailable {
                reason: "the kernel lacks Landlock (Linux 5.13 or later, CONFIG_SECURITY_LANDLOCK)".to_owned(),
            },
            Err(e) => SandboxSupport::Unavailable { reason: format!("the Landlock probe failed: {e}") },
        }
    }

    fn abi_number(abi: ABI) -> u8 {
        // `ABI` displays as its number, or `unsupported`.
        abi.to_string().parse().unwrap_or(0)
    }
}

#[cfg(not(target_os = "linux"))]
mod landlock {
    //! Landlock is Linux-only: elsewhere there is no sandbox to apply.

    use super::{SandboxSupport, SpawnError};
    use std::path::PathBuf;

    pub(super) struct Policy {
        pub(super) workspace: PathBuf,
        pub(super) temp: PathBuf,
        pub(super) program: PathBuf,
        pub(super) network: bool,
    }

    pub(super) fn restrict_this_thread(_policy: &Policy) -> Result<(), SpawnError> {
        Err(SpawnError::NotEnforced)
    }

    pub(super) fn probe() -> SandboxSupport {
        SandboxSupport::Unavailable { reason: "Landlock is Linux-only".to_owned() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_follows_the_abi() {
        assert_eq!(SandboxSupport::for_abi(7), SandboxSupport::Full { abi: 7 });
        assert_eq!(SandboxSupport::for_abi(6), SandboxSupport::Full { abi: 6 });
        assert_eq!(
            SandboxSupport::for_abi(4),
            SandboxSupport::Partial { abi: 4, missing: vec!["device ioctls", "signals and abstract sockets"] }
        );
        assert!(matches!(SandboxSupport::for_abi(0), SandboxSupport::Unavailable { .. }));
    }

    #[test]
    fn required_refuses_what_the_kernel_cannot_confine() {
        let none = SandboxSupport::Unavailable { reason: "no kernel support".to_owned() };
        let refused = Confinement::decide(SandboxMode::Required, false, &none);
        assert_eq!(refused, Err("the shell sandbox is required but unavailable: no kernel support".to_owned()));
        assert_eq!(
            Confinement::decide(SandboxMode::Auto, false, &none),
            Ok(Confinement::Unconfined { why: "no kernel support".to_owned() })
        );
        let old = SandboxSupport::for_abi(2);
        assert!(Confinement::decide(SandboxMode::Required, false, &old).is_err_and(|e| e.contains("network")));
        let allowed = Confinement::decide(SandboxMode::Required, true, &old);
        assert_eq!(
            allowed.map(|c| c.describe()),
            Ok("landlock (writes: workspace and a private TMPDIR only; network: on; this kernel cannot confine: \
                file truncation, device ioctls, signals and abstract sockets)"
                .to_owned())
        );
        assert_eq!(
            Confinement::decide(SandboxMode::Off, false, &SandboxSupport::Full { abi: 7 }).map(|c| c.describe()),
            Ok("none (turned off)".to_owned())
        );
    }
}

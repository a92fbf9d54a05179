//! How the `shell` tool confines the commands it runs: a process group per command, and on Linux
//! Landlock with a seccomp filter beside it.
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
//! - scopes (ABI 6, Linux 6.12): no signal to, and no abstract UNIX socket of, a process outside the
//!   command's sandbox — Tollgate included.
//!
//! **With the network off, no socket reaches outside the sandbox.** Landlock alone cannot promise that:
//! it confines TCP from ABI 4, Unix sockets named by a path from ABI 9, UDP from ABI 10 and other socket
//! families (netlink, packet, …) never — a command on an ABI 7 kernel reached PostgreSQL through
//! `/var/run/postgresql`. So the same thread also installs a seccomp filter (inherited by the command
//! and everything it starts) that refuses with `EPERM`:
//! - `socket()` of every family, `AF_UNIX` included (a Unix socket could connect to any socket file or
//!   abstract name); `connect`, `bind`, `listen`, `accept` and `accept4` whatever the socket;
//! - `socketpair()` except `AF_UNIX` stream and seqpacket pairs — the two ends are connected to each
//!   other only and ignore a destination address, so they stay open for the pipes programs build from
//!   them (tokio, Python's `socketpair`); a datagram pair could `sendto` any socket file, so it is refused;
//! - `sendto()` with a destination address;
//! - `io_uring_setup`, `io_uring_enter` and `io_uring_register`: io_uring opens and connects sockets
//!   without the system calls above, where a seccomp filter never sees them.
//!
//! On x86_64 the same calls by their x32 numbers are refused, and a system call of another architecture
//! (a 32-bit program's `int 0x80`, whose `socketcall` would slip past the numbers above) kills the
//! process. The filter is built for x86_64 and aarch64; elsewhere seccomp counts as unavailable.
//!
//! **What is confined is what the preview says.** [`sandbox_support`] probes the kernel once: its
//! Landlock ABI, and whether the filter installs and refuses a socket. Each channel the sandbox claims
//! to close (see [`CHANNELS`]) is closed by Landlock at some ABI, by the filter, or by neither on this
//! machine; the preview lists every channel left open — by choice with the network on, or because this
//! kernel cannot close it — and [`SandboxMode::Required`] refuses a command while anything it should
//! close stays open, naming what.
//!
//! Landlock and the filter are applied without `unsafe` (no `pre_exec`): both confine the calling thread
//! and whatever it spawns from then on, so each command gets a fresh thread that confines itself, spawns
//! the command in the caller's tokio runtime, hands the child back and ends. Nothing else ever runs on
//! that thread (a thread it started would inherit the sandbox).

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

/// A way out of the sandbox that it claims to close, and what closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channel {
    /// As a preview names it while it is open, e.g. `UDP`.
    pub name: &'static str,
    /// The Landlock ABI from which Landlock closes it, if any ABI does.
    pub landlock_since: Option<u8>,
    /// Landlock closes it only while the network is off (its network rules); otherwise also with the
    /// network on.
    pub landlock_offline_only: bool,
    /// The seccomp filter (installed while the network is off) closes it.
    pub seccomp: bool,
    /// A way onto the network: open on purpose when the network is on.
    pub network: bool,
}

/// Every channel the sandbox claims to close: the network ones while the network is off, the others
/// always.
pub const CHANNELS: [Channel; 8] = [
    Channel { name: "TCP", landlock_since: Some(4), landlock_offline_only: true, seccomp: true, network: true },
    Channel { name: "UDP", landlock_since: Some(10), landlock_offline_only: true, seccomp: true, network: true },
    // Landlock's `ResolveUnix` is a file access right, handled whatever the network option.
    Channel {
        name: "Unix sockets by path",
        landlock_since: Some(9),
        landlock_offline_only: false,
        seccomp: true,
        network: true,
    },
    Channel {
        name: "abstract Unix sockets",
        landlock_since: Some(6),
        landlock_offline_only: false,
        seccomp: true,
        network: true,
    },
    Channel {
        name: "other socket families (netlink, packet, …)",
        landlock_since: None,
        landlock_offline_only: false,
        seccomp: true,
        network: true,
    },
    Channel {
        name: "truncating files outside the workspace",
        landlock_since: Some(3),
        landlock_offline_only: false,
        seccomp: false,
        network: false,
    },
    Channel {
        name: "ioctls on devices",
        landlock_since: Some(5),
        landlock_offline_only: false,
        seccomp: false,
        network: false,
    },
    Channel {
        name: "signals to other processes",
        landlock_since: Some(6),
        landlock_offline_only: false,
        seccomp: false,
        network: false,
    },
];

impl Channel {
    /// Whether a command under Landlock ABI `abi`, with the seccomp filter or not, with the network on
    /// or off, is kept from this channel.
    fn closed(&self, abi: u8, seccomp: bool, network: bool) -> bool {
        let by_landlock =
            self.landlock_since.is_some_and(|since| abi >= since) && !(network && self.landlock_offline_only);
        by_landlock || (seccomp && self.seccomp)
    }

    /// Whether the sandbox promises to close it with the network on or off.
    fn claimed(&self, network: bool) -> bool {
        !(network && self.network)
    }
}

/// The channels left open under Landlock ABI `abi`, with the filter installed or not.
fn open_channels(abi: u8, seccomp: bool, network: bool) -> Vec<&'static str> {
    CHANNELS.iter().filter(|channel| !channel.closed(abi, seccomp, network)).map(|channel| channel.name).collect()
}

/// How the `shell` tool confines its commands (`[sandbox] mode` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Landlock (and the seccomp filter) where the kernel has it; elsewhere commands run unconfined. The
    /// preview says which channels stay open.
    #[default]
    Auto,
    /// A command runs only when every channel the sandbox claims is closed on this machine (refused in
    /// `validate`, before the gate, naming what stays open).
    Required,
    /// Unconfined: still its own process group, a scrubbed environment and a private `TMPDIR`.
    Off,
}

/// Whether this machine can install the `shell` tool's seccomp filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeccompSupport {
    /// The filter installs and refuses sockets.
    Available,
    /// It cannot be used.
    Unavailable {
        /// Why, for the operator.
        reason: String,
    },
}

/// What this machine's kernel offers the sandbox; see [`sandbox_support`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxSupport {
    /// Landlock from ABI 6 and the seccomp filter: with the network off, every channel in [`CHANNELS`]
    /// is closed.
    Full {
        /// The Landlock ABI in use (the lower of the kernel's and the `landlock` crate's).
        abi: u8,
    },
    /// Landlock confines files, but this kernel's ABI, or a missing seccomp filter, leaves some channel
    /// open even with the network off.
    Partial {
        /// The kernel's Landlock ABI.
        abi: u8,
        /// Whether the seccomp filter can be installed.
        seccomp: SeccompSupport,
        /// What stays open with the network off, as [`Channel::name`]s.
        missing: Vec<&'static str>,
    },
    /// No Landlock: commands cannot be confined (the filter alone is not used: without Landlock a
    /// command could borrow another process's sockets through `/proc` and ptrace).
    Unavailable {
        /// Why, for the operator.
        reason: String,
    },
}

impl SandboxSupport {
    /// The support of a kernel whose Landlock ABI is `abi` (0: none), with or without the seccomp filter.
    pub fn new(abi: u8, seccomp: SeccompSupport) -> Self {
        if abi == 0 {
            return SandboxSupport::Unavailable { reason: "the kernel has no Landlock".to_owned() };
        }
        let missing = open_channels(abi, seccomp == SeccompSupport::Available, false);
        if missing.is_empty() {
            SandboxSupport::Full { abi }
        } else {
            SandboxSupport::Partial { abi, seccomp, missing }
        }
    }
}

impl fmt::Display for SandboxSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxSupport::Full { abi } => write!(f, "Landlock ABI {abi} and seccomp"),
            SandboxSupport::Partial { abi, seccomp: SeccompSupport::Available, missing } => {
                write!(f, "Landlock ABI {abi} and seccomp, which leave open: {}", missing.join(", "))
            }
            SandboxSupport::Partial { abi, seccomp: SeccompSupport::Unavailable { reason }, missing } => {
                write!(f, "Landlock ABI {abi} without seccomp ({reason}), which leave open: {}", missing.join(", "))
            }
            SandboxSupport::Unavailable { reason } => write!(f, "no Landlock: {reason}"),
        }
    }
}

/// What this kernel offers the sandbox, probed once per process (by confining throwaway threads: the
/// `landlock` crate reports the kernel's ABI only through `restrict_self`, and the filter is proven by
/// installing it and being refused a socket).
pub fn sandbox_support() -> SandboxSupport {
    static SUPPORT: OnceLock<SandboxSupport> = OnceLock::new();
    SUPPORT
        .get_or_init(|| match landlock::probe() {
            Ok(abi) => SandboxSupport::new(abi, seccomp::probe()),
            Err(reason) => SandboxSupport::Unavailable { reason },
        })
        .clone()
}

/// How a `shell` command would be confined under `mode` and `network` on a machine with `support`, in
/// the words of its preview (e.g. `landlock ABI 7 + seccomp (writes: …; network: off — no socket of any
/// family)`), or why `mode` refuses to run it. For `serve` to state at start what its commands run under.
pub fn describe_confinement(mode: SandboxMode, network: bool, support: &SandboxSupport) -> Result<String, String> {
    Confinement::decide(mode, network, support).map(|confinement| confinement.describe())
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
    /// Under Landlock, and the seccomp filter when `seccomp`.
    Sandboxed {
        /// The Landlock ABI.
        abi: u8,
        /// The seccomp filter is installed (the network is off and this machine has it).
        seccomp: bool,
        /// The network is allowed.
        network: bool,
        /// The channels left open, on purpose or because this machine cannot close them.
        open: Vec<&'static str>,
    },
    /// Without a sandbox.
    Unconfined {
        /// Why, as the preview shows it.
        why: String,
    },
}

impl Confinement {
    /// The confinement `mode` asks for on a machine with `support`; an error, naming what stays open,
    /// when `mode` is [`SandboxMode::Required`] and something the sandbox should close cannot be closed.
    pub(crate) fn decide(mode: SandboxMode, network: bool, support: &SandboxSupport) -> Result<Self, String> {
        if mode == SandboxMode::Off {
            return Ok(Confinement::Unconfined { why: "turned off".to_owned() });
        }
        let (abi, seccomp_available) = match support {
            SandboxSupport::Unavailable { reason } if mode == SandboxMode::Required => {
                return Err(format!("the shell sandbox is required but unavailable: {reason}"));
            }
            SandboxSupport::Unavailable { reason } => return Ok(Confinement::Unconfined { why: reason.clone() }),
            SandboxSupport::Full { abi } => (*abi, true),
            SandboxSupport::Partial { abi, seccomp, .. } => (*abi, *seccomp == SeccompSupport::Available),
        };
        let seccomp = !network && seccomp_available;
        let gaps: Vec<&'static str> = CHANNELS
            .iter()
            .filter(|channel| channel.claimed(network) && !channel.closed(abi, seccomp, network))
            .map(|channel| channel.name)
            .collect();
        if mode == SandboxMode::Required && !gaps.is_empty() {
            return Err(format!(
                "the shell sandbox is required but this machine ({support}) cannot close: {}",
                gaps.join(", ")
            ));
        }
        Ok(Confinement::Sandboxed { abi, seccomp, network, open: open_channels(abi, seccomp, network) })
    }

    /// The preview's words for it, e.g. `landlock ABI 7 + seccomp (writes: workspace and a private TMPDIR
    /// only; network: off — no socket of any family)`, naming every channel left open.
    pub(crate) fn describe(&self) -> String {
        match self {
            Confinement::Sandboxed { abi, seccomp, network, open } => {
                let layers =
                    if *seccomp { format!("landlock ABI {abi} + seccomp") } else { format!("landlock ABI {abi}") };
                let network = match (network, seccomp) {
                    (true, _) => "on",
                    (false, true) => "off — no socket of any family",
                    (false, false) => "off",
                };
                let mut text = format!("{layers} (writes: workspace and a private TMPDIR only; network: {network}");
                if !open.is_empty() {
                    text.push_str(&format!("; open: {}", open.join(", ")));
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
    /// The Landlock ruleset or the seccomp filter could not be built or applied.
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
        Confinement::Sandboxed { network, seccomp, .. } => {
            let handle = tokio::runtime::Handle::try_current().map_err(|_| SpawnError::NoRuntime)?;
            let policy = landlock::Policy {
                workspace: grant.workspace.to_owned(),
                temp: grant.temp.to_owned(),
                program: grant.program.to_owned(),
                network: *network,
            };
            let seccomp = *seccomp;
            let (sender, receiver) = tokio::sync::oneshot::channel();
            std::thread::Builder::new()
                .name("tollgate-shell-sandbox".to_owned())
                .spawn(move || {
                    // Confined for good: this thread spawns the command and ends, and runs nothing else.
                    let _runtime = handle.enter();
                    // Landlock first: the filter refuses no call Landlock makes, but this order needs no
                    // argument that it does not.
                    let spawned = landlock::restrict_this_thread(&policy)
                        .and_then(|()| if seccomp { seccomp::restrict_this_thread() } else { Ok(()) })
                        .and_then(|()| RunningCommand::spawn(&mut command));
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

    use super::{DEVICE_PATHS, SYSTEM_READ_PATHS, SpawnError};
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

    /// The kernel's Landlock ABI, or why there is none.
    pub(super) fn probe() -> Result<u8, String> {
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
            Ok(LandlockStatus::Available { effective_abi, .. }) => match abi_number(effective_abi) {
                0 => Err("the kernel has no Landlock".to_owned()),
                abi => Ok(abi),
            },
            Ok(LandlockStatus::NotEnabled) => {
                Err("the kernel has Landlock but it is not enabled (the `lsm=` boot parameter)".to_owned())
            }
            Ok(LandlockStatus::NotImplemented) => {
                Err("the kernel lacks Landlock (Linux 5.13 or later, CONFIG_SECURITY_LANDLOCK)".to_owned())
            }
            Err(e) => Err(format!("the Landlock probe failed: {e}")),
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

    use super::SpawnError;
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

    pub(super) fn probe() -> Result<u8, String> {
        Err("Landlock is Linux-only".to_owned())
    }
}

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
mod seccomp {
    //! The seccomp filter that closes every socket while the network is off, and its probe. The calls
    //! it refuses, and why each, are listed in the module header above.

    use super::{SeccompSupport, SpawnError};
    use seccompiler::{
        BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;
    use std::sync::OnceLock;

    #[cfg(target_arch = "x86_64")]
    const ARCH: TargetArch = TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    const ARCH: TargetArch = TargetArch::aarch64;

    /// The system calls refused whatever their arguments.
    const REFUSED: [i64; 9] = [
        libc::SYS_socket,
        libc::SYS_connect,
        libc::SYS_bind,
        libc::SYS_listen,
        libc::SYS_accept,
        libc::SYS_accept4,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ];

    /// The bits of `socketpair`'s type argument that hold the type (the others are `SOCK_CLOEXEC` and
    /// `SOCK_NONBLOCK`).
    const SOCKET_TYPE_MASK: u64 = 0xf;

    /// An x32 system call carries this bit in its number under the x86_64 architecture, so a filter that
    /// named only the 64-bit numbers would let it through.
    #[cfg(target_arch = "x86_64")]
    const X32_SYSCALL_BIT: i64 = 0x4000_0000;

    /// The refused calls, by number: an empty chain refuses whatever the arguments, a rule refuses when
    /// all its conditions hold, and any one rule of a chain is enough.
    pub(super) fn rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, BackendError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = REFUSED.iter().map(|nr| (*nr, Vec::new())).collect();
        let argument = |index, op, value| SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value);
        rules.insert(
            libc::SYS_socketpair,
            vec![
                SeccompRule::new(vec![argument(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?])?,
                // A datagram pair's end can `sendto` any socket file by its path.
                SeccompRule::new(vec![argument(
                    1,
                    SeccompCmpOp::MaskedEq(SOCKET_TYPE_MASK),
                    libc::SOCK_DGRAM as u64,
                )?])?,
            ],
        );
        // Argument 4 is the destination address; `send` on a connected socket passes none.
        let addressed = SeccompCondition::new(4, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0)?;
        rules.insert(libc::SYS_sendto, vec![SeccompRule::new(vec![addressed])?]);
        #[cfg(target_arch = "x86_64")]
        {
            let x32: Vec<(i64, Vec<SeccompRule>)> =
                rules.iter().map(|(nr, chain)| (nr | X32_SYSCALL_BIT, chain.clone())).collect();
            rules.extend(x32);
        }
        Ok(rules)
    }

    /// The compiled filter: every other call allowed, the refused ones answered `EPERM`, and a call of
    /// another architecture killing the process (seccompiler's check of the architecture).
    fn program() -> Result<&'static BpfProgram, String> {
        static PROGRAM: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
        PROGRAM
            .get_or_init(|| {
                let refused = SeccompAction::Errno(libc::EPERM as u32);
                rules()
                    .and_then(|rules| SeccompFilter::new(rules, SeccompAction::Allow, refused, ARCH))
                    .and_then(BpfProgram::try_from)
                    .map_err(|e: BackendError| format!("cannot build the seccomp filter: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Installs the filter on the calling thread (and what it spawns from now on); it sets
    /// `NO_NEW_PRIVS` first, as Landlock does.
    pub(super) fn restrict_this_thread() -> Result<(), SpawnError> {
        let program = program().map_err(SpawnError::Sandbox)?;
        seccompiler::apply_filter(program).map_err(|e| SpawnError::Sandbox(format!("seccomp: {e}")))
    }

    /// Whether the filter installs on a throwaway thread and, installed, refuses a Unix socket while
    /// leaving a stream socket pair.
    pub(super) fn probe() -> SeccompSupport {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let probe = std::thread::Builder::new()
            .name("tollgate-seccomp-probe".to_owned())
            .spawn(|| -> Result<(), String> {
                restrict_this_thread().map_err(|e| e.to_string())?;
                match rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None) {
                    Err(rustix::io::Errno::PERM) => {}
                    Ok(_) => return Err("installed, the filter still let a socket be opened".to_owned()),
                    Err(e) => return Err(format!("installed, the filter answered socket() with {e}")),
                }
                rustix::net::socketpair(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)
                    .map(drop)
                    .map_err(|e| format!("installed, the filter refused a stream socket pair: {e}"))
            })
            .map_err(|e| e.to_string())
            .and_then(|thread| thread.join().map_err(|_| "the probe thread panicked".to_owned()))
            .and_then(|probed| probed);
        match probe {
            Ok(()) => SeccompSupport::Available,
            Err(reason) => SeccompSupport::Unavailable { reason: format!("the seccomp probe failed: {reason}") },
        }
    }
}

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
mod seccomp {
    //! The filter is built for x86_64 and aarch64 Linux only (seccompiler needs the architecture).

    use super::{SeccompSupport, SpawnError};

    const WHY: &str = "the seccomp filter is built for x86_64 and aarch64 Linux only";

    pub(super) fn restrict_this_thread() -> Result<(), SpawnError> {
        Err(SpawnError::Sandbox(WHY.to_owned()))
    }

    pub(super) fn probe() -> SeccompSupport {
        SeccompSupport::Unavailable { reason: WHY.to_owned() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITES: &str = "writes: workspace and a private TMPDIR only";
    const SOCKETS: &str =
        "TCP, UDP, Unix sockets by path, abstract Unix sockets, other socket families (netlink, packet, …)";

    fn no_seccomp() -> SeccompSupport {
        SeccompSupport::Unavailable { reason: "a test kernel".to_owned() }
    }

    fn describe(mode: SandboxMode, network: bool, support: &SandboxSupport) -> Result<String, String> {
        describe_confinement(mode, network, support)
    }

    #[test]
    fn support_follows_the_abi_and_seccomp() {
        assert_eq!(SandboxSupport::new(7, SeccompSupport::Available), SandboxSupport::Full { abi: 7 });
        assert_eq!(SandboxSupport::new(6, SeccompSupport::Available), SandboxSupport::Full { abi: 6 });
        assert_eq!(
            SandboxSupport::new(4, SeccompSupport::Available),
            SandboxSupport::Partial {
                abi: 4,
                seccomp: SeccompSupport::Available,
                missing: vec!["ioctls on devices", "signals to other processes"]
            }
        );
        // Without the filter Landlock leaves sockets open even at ABI 7: the PostgreSQL attack's socket file.
        assert_eq!(
            SandboxSupport::new(7, no_seccomp()),
            SandboxSupport::Partial {
                abi: 7,
                seccomp: no_seccomp(),
                missing: vec!["UDP", "Unix sockets by path", "other socket families (netlink, packet, …)"]
            }
        );
        assert_eq!(
            SandboxSupport::new(7, no_seccomp()).to_string(),
            "Landlock ABI 7 without seccomp (a test kernel), which leave open: UDP, Unix sockets by path, other \
             socket families (netlink, packet, …)"
        );
        assert!(matches!(SandboxSupport::new(0, SeccompSupport::Available), SandboxSupport::Unavailable { .. }));
    }

    #[test]
    fn the_preview_names_every_open_channel() {
        let full = SandboxSupport::Full { abi: 7 };
        assert_eq!(
            describe(SandboxMode::Auto, false, &full),
            Ok(format!("landlock ABI 7 + seccomp ({WRITES}; network: off — no socket of any family)"))
        );
        // With the network on the filter is not installed; Landlock still scopes abstract sockets.
        assert_eq!(
            describe(SandboxMode::Required, true, &full),
            Ok(format!(
                "landlock ABI 7 ({WRITES}; network: on; open: TCP, UDP, Unix sockets by path, other socket families \
                 (netlink, packet, …))"
            ))
        );
        assert_eq!(
            describe(SandboxMode::Auto, false, &SandboxSupport::new(7, no_seccomp())),
            Ok(format!(
                "landlock ABI 7 ({WRITES}; network: off; open: UDP, Unix sockets by path, other socket families \
                 (netlink, packet, …))"
            ))
        );
        assert_eq!(
            describe(SandboxMode::Auto, true, &SandboxSupport::new(2, SeccompSupport::Available)),
            Ok(format!(
                "landlock ABI 2 ({WRITES}; network: on; open: {SOCKETS}, truncating files outside the workspace, \
                 ioctls on devices, signals to other processes)"
            ))
        );
        assert_eq!(
            describe(SandboxMode::Auto, false, &SandboxSupport::new(5, SeccompSupport::Available)),
            Ok(format!(
                "landlock ABI 5 + seccomp ({WRITES}; network: off — no socket of any family; open: signals to other \
                 processes)"
            ))
        );
        assert_eq!(describe(SandboxMode::Off, false, &full), Ok("none (turned off)".to_owned()));
    }

    #[test]
    fn required_refuses_what_this_machine_cannot_close() {
        let none = SandboxSupport::Unavailable { reason: "no kernel support".to_owned() };
        assert_eq!(
            describe(SandboxMode::Required, false, &none),
            Err("the shell sandbox is required but unavailable: no kernel support".to_owned())
        );
        assert_eq!(describe(SandboxMode::Auto, false, &none), Ok("none (no kernel support)".to_owned()));

        let without_filter = SandboxSupport::new(7, no_seccomp());
        assert_eq!(
            describe(SandboxMode::Required, false, &without_filter),
            Err("the shell sandbox is required but this machine (Landlock ABI 7 without seccomp (a test kernel), \
                 which leave open: UDP, Unix sockets by path, other socket families (netlink, packet, …)) cannot \
                 close: UDP, Unix sockets by path, other socket families (netlink, packet, …)"
                .to_owned())
        );
        // With the network on, the sockets are open on purpose and nothing else is missing.
        assert!(describe(SandboxMode::Required, true, &without_filter).is_ok());
        let old = SandboxSupport::new(2, SeccompSupport::Available);
        let refused = describe(SandboxMode::Required, true, &old);
        assert!(
            refused.as_ref().is_err_and(|e| e.ends_with(
                "cannot close: truncating files outside the workspace, ioctls on devices, signals to other processes"
            )),
            "{refused:?}"
        );
    }

    /// The filter, installed on a thread of this test, refuses every socket family and leaves stream
    /// pairs; the test's other threads are untouched.
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    #[test]
    fn the_filter_refuses_every_socket_but_a_stream_pair() {
        use rustix::io::Errno;
        use rustix::net::{AddressFamily, SocketFlags, SocketType, socket, socketpair};
        let confined = std::thread::spawn(|| {
            seccomp::restrict_this_thread().map_err(|e| e.to_string())?;
            let mut refused = Vec::new();
            for (family, kind) in [
                (AddressFamily::INET, SocketType::STREAM),
                (AddressFamily::INET, SocketType::DGRAM),
                (AddressFamily::INET6, SocketType::DGRAM),
                (AddressFamily::UNIX, SocketType::STREAM),
                (AddressFamily::UNIX, SocketType::DGRAM),
                (AddressFamily::NETLINK, SocketType::DGRAM),
                (AddressFamily::PACKET, SocketType::DGRAM),
            ] {
                refused.push(socket(family, kind, None).err());
            }
            refused.push(socketpair(AddressFamily::UNIX, SocketType::DGRAM, SocketFlags::CLOEXEC, None).err());
            refused.push(socketpair(AddressFamily::INET, SocketType::STREAM, SocketFlags::empty(), None).err());
            let pairs = [SocketType::STREAM, SocketType::SEQPACKET]
                .map(|kind| socketpair(AddressFamily::UNIX, kind, SocketFlags::CLOEXEC, None).is_ok());
            Ok::<_, String>((refused, pairs))
        });
        let outcome = confined.join().unwrap_or_else(|_| panic!("the confined thread panicked"));
        let (refused, pairs) = outcome.unwrap_or_else(|e| panic!("{e}"));
        assert!(refused.iter().all(|e| *e == Some(Errno::PERM)), "{refused:?}");
        assert_eq!(pairs, [true, true], "stream and seqpacket pairs stay open");
        assert!(socket(AddressFamily::UNIX, SocketType::STREAM, None).is_ok(), "only the confined thread is filtered");
    }
}

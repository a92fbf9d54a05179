//! What the API answers when the store fails: each failure its own problem type and status
//! (docs/api.md), `/healthz` alive whatever the store does, and `/readyz` ready only when the store can
//! write.

use crate::common::{Config, Server, backends, open_store, run_command};
use serde_json::json;
use std::sync::Arc;
use tollgate_agent_core::StoreError;
use tollgate_agent_testkit::FailingStore;

const RUN: &str = "/v1/runs/01980000-0000-7000-8000-000000000001";

/// Every store failure through the router: its status and `type` on a read, 503 with the same `type`
/// from `/readyz`, and `/healthz` still 200.
#[tokio::test]
async fn each_store_failure_answers_its_own_problem_type() {
    let cases = [
        (StoreError::DiskFull("SQLITE_FULL".into()), 507, "disk-full"),
        (StoreError::ReadOnly("SQLITE_READONLY".into()), 503, "read-only"),
        (
            StoreError::Corrupt { id: "01980000-0000-7000-8000-000000000001".into(), detail: "malformed".into() },
            500,
            "corrupt-run",
        ),
        (StoreError::CorruptDatabase("Tree 4 page 18".into()), 500, "corrupt-database"),
        (StoreError::Unreachable("connection refused".into()), 503, "unavailable"),
        (StoreError::Database("constraint".into()), 503, "unavailable"),
    ];
    for (error, status, slug) in cases {
        let inner = open_store(&Default::default()).await;
        let store = Arc::new(FailingStore::broken(inner, error.clone()));
        let server = Server::start(Config { store: Some(store), ..Config::default() }).await;
        let type_uri = format!("https://tollgate.dev/problems/{slug}");

        let read = server.get(RUN).await;
        assert_eq!(
            (read.status, read.body["type"].as_str()),
            (status, Some(type_uri.as_str())),
            "{error}: {}",
            read.body
        );
        assert_eq!(read.body["status"], status);
        assert_eq!(read.headers["content-type"], "application/problem+json");
        let detail = read.body["detail"].as_str().unwrap_or_default();
        assert!(!detail.contains(&error.to_string()), "the store's message stays in the log: {detail}");
        if slug == "corrupt-run" {
            assert!(detail.contains("01980000-0000-7000-8000-000000000001"), "names the run: {detail}");
        }
        let list = server.get("/v1/runs").await;
        assert_eq!(list.status, status, "{}", list.body);

        let ready = server.get("/readyz").await;
        assert_eq!((ready.status, ready.body["type"].as_str()), (503, Some(type_uri.as_str())), "{}", ready.body);
        assert_eq!(ready.body["status"], 503);
        let alive = server.get("/healthz").await;
        assert_eq!((alive.status, &alive.body), (200, &json!({"status": "ok"})));
        server.stop().await;
    }
}

/// A store that can write is ready, on each backend (the probe really commits).
#[tokio::test]
async fn readyz_is_ready_when_the_store_can_write() {
    for backend in backends() {
        let server = Server::start(Config { backend, ..Config::default() }).await;
        let ready = server.get("/readyz").await;
        assert_eq!((ready.status, &ready.body), (200, &json!({"status": "ready"})));
        server.stop().await;
    }
}

/// The file system of a SQLite store turned read-only under the running server, as ext4 does with
/// `errors=remount-ro` after a disk error: writes are `read-only` (503, not `unavailable`), from the
/// store itself, from a start and from `/readyz`; reads still work. SQLite reports the `EROFS` as
/// `SQLITE_IOERR_WRITE`, so this is what the store's question to the folder finds out.
#[tokio::test]
async fn a_file_system_turned_read_only_under_the_server_answers_read_only() {
    let Some(disk) = Ext4::mount() else { return };
    let url = format!("sqlite://{}", disk.mount.join("tollgate.db").display());
    let store = tollgate_agent_store::open(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let server = Server::start(Config { store: Some(store.clone()), ..Config::default() }).await;
    let kept = server.waiting_run(crate::common::SCRIBE, "written before").await;
    disk.fail();

    let probe = store.probe_write().await;
    assert!(matches!(probe, Err(StoreError::ReadOnly(_))), "{probe:?}");
    let start = server.post("/v1/runs", json!({"agent": crate::common::SCRIBE, "input": "after", "wait": true})).await;
    assert_eq!(
        (start.status, start.body["type"].as_str()),
        (503, Some("https://tollgate.dev/problems/read-only")),
        "{}",
        start.body
    );
    let ready = server.get("/readyz").await;
    assert_eq!(
        (ready.status, ready.body["type"].as_str()),
        (503, Some("https://tollgate.dev/problems/read-only")),
        "{}",
        ready.body
    );
    let read = server.get(&format!("/v1/runs/{}", crate::common::id(&kept))).await;
    assert_eq!((read.status, &read.body["status"]), (200, &json!("waiting_for_approval")), "{}", read.body);
    server.stop().await;
    drop(store);
}

/// A 64 MiB ext4 file system in a file, on a loop device, mounted with `errors=remount-ro` in a scratch
/// folder. [`Ext4::fail`] has the kernel record an error on it (`/sys/fs/ext4/DEV/trigger_fs_error`),
/// which turns it read-only under everything that has files open there, as a disk error would.
/// Unmounted (lazily: the store's last files may still be closing) when dropped. Needs root,
/// `mkfs.ext4` and loop devices: without them the test skips with a note, or fails under CI.
struct Ext4 {
    dir: std::path::PathBuf,
    mount: std::path::PathBuf,
    device: String,
}

impl Ext4 {
    fn mount() -> Option<Ext4> {
        let runs = |program: &str| std::process::Command::new(program).arg("-V").output().is_ok();
        if !rustix::process::geteuid().is_root() || !runs("mkfs.ext4") || !runs("losetup") {
            let note = "a read-only file system needs root, mkfs.ext4 and loop devices";
            if std::env::var_os("CI").is_some() {
                panic!("{note}; CI runs this test");
            }
            eprintln!("skipped: {note}");
            return None;
        }
        let dir = tollgate_agent_testkit::scratch_dir("ext4");
        let image = dir.join("disk.img");
        let mount = dir.join("mnt");
        std::fs::create_dir_all(&mount).unwrap_or_else(|e| panic!("{e}"));
        std::fs::File::create(&image)
            .and_then(|file| file.set_len(64 << 20))
            .unwrap_or_else(|e| panic!("{}: {e}", image.display()));
        run_command(std::process::Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image));
        run_command(std::process::Command::new("mount").args(["-o", "loop,errors=remount-ro"]).arg(&image).arg(&mount));
        let source = run_command(std::process::Command::new("findmnt").args(["-n", "-o", "SOURCE"]).arg(&mount));
        let device = source.trim().rsplit('/').next().unwrap_or_default().to_owned();
        Some(Ext4 { dir, mount, device })
    }

    /// Records an error on the file system, which `errors=remount-ro` answers by turning it read-only;
    /// returns once creating a file there fails with "read-only file system".
    fn fail(&self) {
        let trigger = format!("/sys/fs/ext4/{}/trigger_fs_error", self.device);
        std::fs::write(&trigger, "tollgate test: a disk error\n").unwrap_or_else(|e| panic!("{trigger}: {e}"));
        let started = std::time::Instant::now();
        loop {
            match std::fs::File::create(self.mount.join("probe")) {
                Err(e) if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem => return,
                _ => {
                    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{} is still writable", self.device)
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.mount).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

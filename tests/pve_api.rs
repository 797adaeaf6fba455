//! Proxmox VE guests through the cluster's API (`pve:CLUSTER/qemu/VMID`),
//! against a server faithful to the real API (`common/pve.rs`): the client
//! pins the certificate, authenticates with an API token kept out of every
//! URL, asks the guest's node for a vzdump, follows the task, finds the
//! archive on the mounted storage, and says clearly what went wrong when
//! something does (refused token, missing privilege, failed or endless
//! task, storage not mounted, guest moved).

mod common;
#[path = "common/pve.rs"]
mod pve;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::guests::{container_root, disk};
use common::Env;
use pve::{Behaviour, Content, Guest, Privileges, PveSim};
use vouch::providers::proxmox::api::{Cluster, ClusterSettings, PveError};
use vouch::providers::proxmox::archive::GuestType;
use vouch::providers::proxmox::vma::CLUSTER_SIZE;
use vouch::tls_pin::Pin;
use vouch_events::DumpMode;
use zeroize::Zeroizing;

fn vm(vmid: u32, node: &str, disks: Vec<(String, Vec<u8>)>) -> Guest {
    Guest {
        vmid,
        node: node.into(),
        name: format!("vm{vmid}"),
        content: Content::Disks(disks),
        behaviour: Behaviour::Ok,
    }
}

fn settings(sim: &PveSim, mount: &Path) -> ClusterSettings {
    ClusterSettings {
        name: "lab".into(),
        url: sim.url.clone(),
        token_id: sim.token_id.clone(),
        token_secret: Zeroizing::new(sim.secret.clone()),
        fingerprint: Some(Pin::sha256(&sim.fingerprint).unwrap()),
        storage: sim.storage.clone(),
        mount: mount.to_path_buf(),
        task_timeout: Duration::from_secs(60),
        poll: Duration::from_millis(100),
    }
}

#[test]
fn a_dump_is_asked_for_followed_and_found_on_the_mounted_storage() {
    let env = Env::new();
    let mount = env.path("mnt-pve-backup");
    let a = disk(5 * CLUSTER_SIZE + 4097, 7);
    let sim = PveSim::start(
        &mount,
        vec![vm(101, "pve2", vec![("drive-scsi0".into(), a.clone())])],
    );
    let cluster = Cluster::new(settings(&sim, &mount)).unwrap();
    let guest = cluster.find_guest(GuestType::Qemu, 101).unwrap();
    assert_eq!(guest.node, "pve2", "the guest's own node is asked");
    let dump = cluster.dump(&guest, DumpMode::Stop, None).unwrap();
    assert_eq!(dump.exitstatus, "OK");
    assert!(dump.upid.starts_with("UPID:pve2:"), "{}", dump.upid);
    assert_eq!(dump.path.parent().unwrap(), mount.join("dump"));
    assert!(dump.path.is_file());
    assert_eq!(dump.archive.vmid, 101);
    assert!(
        dump.volid.starts_with("backup-nfs:backup/vzdump-qemu-101-"),
        "{}",
        dump.volid
    );
    // The mode asked for reached vzdump; the token never went into a URL.
    let requests = sim.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("POST /api2/json/nodes/pve2/vzdump")),
        "{requests:?}"
    );
    assert!(
        requests.iter().all(|r| r.ends_with("[PVEAPIToken]")),
        "{requests:?}"
    );
    assert!(
        requests.iter().all(|r| !r.contains(&sim.secret)),
        "{requests:?}"
    );
    // The archive is a real one: dissect.archive reads the disk back.
    if let Some(tool) = common::guests::vma_extract() {
        let vma_path = env.path("dump.vma");
        let packed = fs::read(&dump.path).unwrap();
        fs::write(&vma_path, zstd::decode_all(&packed[..]).unwrap()).unwrap();
        let out_dir = env.path("dissect");
        fs::create_dir_all(&out_dir).unwrap();
        let out = std::process::Command::new(tool)
            .arg(&vma_path)
            .arg("-o")
            .arg(&out_dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = fs::read(out_dir.join("drive-scsi0")).unwrap();
        // vma-extract pads the last cluster to 64 KiB.
        assert_eq!(&theirs[..a.len()], &a[..]);
    }
    cluster.remove_dump(&dump).unwrap();
    assert!(sim.archives().is_empty(), "{:?}", sim.archives());
    assert!(!dump.path.exists());
}

fn expect_err(r: Result<impl std::fmt::Debug, PveError>, kind: &str, says: &str) -> PveError {
    let e = r.expect_err("an error");
    assert_eq!(e.kind(), kind, "{e}");
    assert!(e.to_string().contains(says), "{e:?} should say {says:?}");
    e
}

#[test]
fn every_refusal_and_failure_says_what_happened_and_what_to_do() {
    let env = Env::new();
    let mount = env.path("mnt");
    let a = disk(2 * CLUSTER_SIZE, 8);
    let sim = PveSim::start(
        &mount,
        vec![
            vm(101, "pve1", vec![("drive-scsi0".into(), a.clone())]),
            vm(102, "pve1", vec![("drive-scsi0".into(), a)]),
        ],
    );
    let good = settings(&sim, &mount);

    // A wrong secret: 401, not retried, the secret not shown.
    let wrong = Cluster::new(ClusterSettings {
        token_secret: Zeroizing::new("not-the-secret".into()),
        ..good.clone()
    })
    .unwrap();
    let e = expect_err(
        wrong.find_guest(GuestType::Qemu, 101),
        "pve_unauthorized",
        "token_id",
    );
    assert!(!e.retryable());
    assert!(!e.to_string().contains("not-the-secret"));

    // A certificate other than the pinned one: no answer is trusted.
    let other_pin = Cluster::new(ClusterSettings {
        fingerprint: Some(Pin::sha256(&["AB"; 32].join(":")).unwrap()),
        ..good.clone()
    })
    .unwrap();
    expect_err(
        other_pin.find_guest(GuestType::Qemu, 101),
        "pve_unreachable",
        "cannot reach",
    );

    let cluster = Cluster::new(good.clone()).unwrap();
    // A type the guest is not, and a guest the token may not see.
    expect_err(
        cluster.find_guest(GuestType::Lxc, 101),
        "pve_guest_not_found",
        "lxc guest 101",
    );
    sim.set_privileges(Privileges {
        vm_audit: false,
        ..Privileges::LEAST
    });
    expect_err(
        cluster.find_guest(GuestType::Qemu, 101),
        "pve_guest_not_found",
        "VM.Audit",
    );
    sim.set_privileges(Privileges::LEAST);
    let guest = cluster.find_guest(GuestType::Qemu, 101).unwrap();

    // No Datastore.AllocateSpace: 403 before any task, with the server's
    // words and what to grant.
    sim.set_privileges(Privileges {
        allocate_space: false,
        ..Privileges::LEAST
    });
    let e = expect_err(
        cluster.dump(&guest, DumpMode::Snapshot, None),
        "pve_forbidden",
        "Datastore.AllocateSpace",
    );
    assert!(e.to_string().contains("docs/proxmox.md"), "{e}");
    assert!(!e.retryable());
    // No VM.Backup: Proxmox VE checks it inside the task.
    sim.set_privileges(Privileges {
        vm_backup: false,
        ..Privileges::LEAST
    });
    expect_err(
        cluster.dump(&guest, DumpMode::Snapshot, None),
        "pve_forbidden",
        "Permission check failed (/vms/101, VM.Backup)",
    );
    sim.set_privileges(Privileges::LEAST);

    // A failed task: its exit status and the end of its log; retryable.
    sim.set_behaviour(101, Behaviour::Fail("got timeout".into()));
    let e = expect_err(
        cluster.dump(&guest, DumpMode::Snapshot, None),
        "pve_task_failed",
        "ERROR: Backup of VM 101 failed - got timeout",
    );
    assert!(e.to_string().contains("job errors"), "{e}");
    assert!(e.retryable());

    // A task that never ends: stopped after task_timeout.
    sim.set_behaviour(101, Behaviour::Hang);
    let impatient = Cluster::new(ClusterSettings {
        task_timeout: Duration::from_secs(1),
        ..good.clone()
    })
    .unwrap();
    expect_err(
        impatient.dump(&guest, DumpMode::Snapshot, None),
        "pve_task_timeout",
        "task_timeout",
    );
    common::served::eventually("the endless task stopped as asked", || {
        sim.tasks()
            .iter()
            .any(|(_, exit, stop)| *stop && exit.as_deref() == Some("interrupted by signal"))
            .then_some(())
    });
    // Cancelled while it runs: the task is stopped too.
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let e = std::thread::scope(|s| {
        let run = s.spawn(|| cluster.dump(&guest, DumpMode::Snapshot, Some(&cancel)));
        std::thread::sleep(Duration::from_millis(300));
        cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        run.join().unwrap()
    });
    expect_err(e, "cancelled", "asked to stop");
    sim.set_behaviour(101, Behaviour::Ok);

    // The storage not mounted where the configuration says.
    let elsewhere = Cluster::new(ClusterSettings {
        mount: env.path("not-mounted"),
        ..good.clone()
    })
    .unwrap();
    expect_err(
        elsewhere.dump(&guest, DumpMode::Snapshot, None),
        "pve_dump_missing",
        "mounted at",
    );

    // The guest moved to another node since it was looked up: "OK", no task.
    let moved = vouch::providers::proxmox::api::Guest {
        node: "pve9".into(),
        ..cluster.find_guest(GuestType::Qemu, 102).unwrap()
    };
    let e = expect_err(
        cluster.dump(&moved, DumpMode::Snapshot, None),
        "pve_guest_moved",
        "moved",
    );
    assert!(e.retryable());
}

#[test]
fn a_service_plan_backs_up_a_vm_and_a_container_through_the_api() {
    use common::served::{get, post, sources_allow, start};
    let env = Env::new();
    let dir = env.dir.path();
    let mount = dir.join("mnt-pve");
    let a = disk(7 * CLUSTER_SIZE + 333, 71);
    let root = env.path("ct-root");
    container_root(&root);
    let sim = PveSim::start(
        &mount,
        vec![
            vm(101, "pve1", vec![("drive-scsi0".into(), a.clone())]),
            Guest {
                vmid: 200,
                node: "pve2".into(),
                name: "ct200".into(),
                content: Content::Root(root.clone()),
                behaviour: Behaviour::Ok,
            },
        ],
    );
    let secret_file = dir.join("pve.token");
    fs::write(&secret_file, format!("{}\n", sim.secret)).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&secret_file, fs::Permissions::from_mode(0o600)).unwrap();
    }
    let config = dir.join("vouch.toml");
    fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[[proxmox]]\nname = \"lab\"\nurl = \"{}\"\ntoken_id = \"{}\"\ntoken_secret_file = \"{}\"\nfingerprint = \"{}\"\nstorage = \"{}\"\nmount = \"{}\"\npoll = \"200ms\"\n",
            sources_allow(dir),
            sim.url,
            sim.token_id,
            secret_file.display(),
            sim.fingerprint,
            sim.storage,
            mount.display()
        ),
    )
    .unwrap();
    let svc = start(&dir.join("data"), &config, None);
    // A cluster the configuration does not have: refused by its field.
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "nope", "source": "pve:other/qemu/101"}),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["fields"]["source"]
            .as_str()
            .unwrap()
            .contains("[[proxmox]]"),
        "{body}"
    );
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "vm101", "source": "pve:lab/qemu/101", "schedule": "0 3 * * *",
            "rpo": "1h", "proxmox": {"mode": "stop", "remove_dump": true}}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["proxmox"]["mode"], "stop", "{body}");
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "ct200", "source": "pve:lab/lxc/200", "schedule": "0 3 * * *",
            "rpo": "1h"}),
    );
    assert_eq!(status, 201, "{body}");
    for plan in ["vm101", "ct200"] {
        let (status, body) = post(
            &svc,
            &format!("/api/v1/plans/{plan}/run"),
            &serde_json::Value::Null,
        );
        assert_eq!(status, 202, "{body}");
    }
    for plan in ["vm101", "ct200"] {
        common::served::eventually(&format!("{plan} recoverable"), || {
            let points = get(&svc, &format!("/api/v1/points?plan={plan}"));
            let all = points.as_array().cloned().unwrap_or_default();
            (all.len() == 1 && all[0]["state"] == "recoverable").then_some(())
        });
    }
    // vzdump ran in stop mode on each guest's node.
    let requests = sim.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("POST /api2/json/nodes/pve1/vzdump")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("POST /api2/json/nodes/pve2/vzdump")),
        "{requests:?}"
    );
    // The VM's dump was removed as its plan says; the container's kept.
    let left = sim.archives();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("vzdump-lxc-200-"), "{left:?}");
    // The VM's point restores to its disk, exactly; tagged with the guest.
    let points = get(&svc, "/api/v1/points?plan=vm101");
    let id = points[0]["id"].as_str().unwrap().to_owned();
    let target = env.path("vm-restored");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vouch"))
            .env("VOUCH_REPOSITORY", dir.join("data/repository"))
            .env(
                "VOUCH_PASSWORD_FILE",
                dir.join("data/repository.passphrase"),
            )
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["restore", &id, "--target", target.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read(target.join("drive-scsi0.raw")).unwrap(), a);
    let out = run(&["snapshots", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for tag in [
        "pve:vmid=101",
        "pve:type=qemu",
        "pve:cluster=lab",
        "pve:node=pve1",
    ] {
        assert!(text.contains(tag), "{tag} missing: {text}");
    }

    // A refused token fails the job at once, saying why, not retried.
    fs::write(&secret_file, "wrong-secret\n").unwrap();
    drop(svc);
    let svc = start(&dir.join("data"), &config, None);
    let (status, _) = post(&svc, "/api/v1/plans/vm101/run", &serde_json::Value::Null);
    assert_eq!(status, 202);
    let job = common::served::eventually("the job fails", || {
        let jobs = get(&svc, "/api/v1/jobs?plan=vm101");
        jobs.as_array()?
            .iter()
            .find(|j| j["state"] == "failed")
            .cloned()
    });
    let text = job.to_string();
    assert!(text.contains("pve_unauthorized"), "{text}");
    assert!(!text.contains("wrong-secret"), "{text}");
}

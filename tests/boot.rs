//! Restore tests that start the restored guest: a VM point's restored disk
//! boots under qemu (no network) until its serial console shows the
//! marker; a VM whose restored disk does not boot (its boot sector
//! broken) is a failed restore test with the console as evidence; a
//! container point's restored root runs `/bin/true` under chroot.
//!
//! The guest is `.ci/boot-guest.sh`'s: Debian's kernel and busybox on a
//! syslinux disk, booting from its own disk in seconds ($VOUCH_BOOT_GUEST;
//! `.ci/run` builds it). Without it the test says so and passes only
//! outside CI.

mod common;

use std::fs;
use std::path::PathBuf;

use common::guests::{container_root, gzip, service_config, tar_of, vma, zstd};
use common::served::{get, post, start, WAIT};
use common::Env;

fn guest_disk() -> Option<Vec<u8>> {
    let path = std::env::var_os("VOUCH_BOOT_GUEST").map(PathBuf::from);
    let have_qemu = std::process::Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    match path.filter(|p| p.is_file()) {
        Some(p) if have_qemu => Some(fs::read(p).unwrap()),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs qemu-system-x86_64 and VOUCH_BOOT_GUEST (.ci/boot-guest.sh)"
            );
            eprintln!("skipped: no qemu-system-x86_64 or no VOUCH_BOOT_GUEST guest image");
            None
        }
    }
}

fn wait_state(svc: &common::served::Service, plan: &str, want: &str) -> serde_json::Value {
    let until = std::time::Instant::now() + 2 * WAIT;
    loop {
        let points = get(svc, &format!("/api/v1/points?plan={plan}"));
        if let Some(p) = points
            .as_array()
            .and_then(|a| a.first())
            .filter(|p| p["state"] == want && !p["coverage"].is_null())
        {
            return p.clone();
        }
        assert!(
            std::time::Instant::now() < until,
            "{plan}: never {want}: {points}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_restored_vm_boots_a_broken_one_fails_and_a_container_runs() {
    let Some(disk) = guest_disk() else { return };
    let env = Env::new();
    let dir = env.dir.path();
    let good = dir.join("dump-good");
    let broken = dir.join("dump-broken");
    let ct = dir.join("dump-ct");
    for d in [&good, &broken, &ct] {
        fs::create_dir_all(d).unwrap();
    }
    let name = "vzdump-qemu-101-2026_12_03-02_00_00.vma.zst";
    fs::write(good.join(name), zstd(&vma(&[("drive-scsi0", &disk)], 1))).unwrap();
    // The same disk with its boot sector (the MBR's code and partition
    // table) zeroed: every byte restores exactly, and the BIOS finds
    // nothing to boot.
    let mut bad = disk.clone();
    bad[..512].fill(0);
    fs::write(broken.join(name), zstd(&vma(&[("drive-scsi0", &bad)], 1))).unwrap();
    // A container whose /bin/true is this host's (chroot runs it).
    let root = env.path("ct-root");
    container_root(&root);
    fs::write(
        ct.join("vzdump-lxc-200-2026_12_03-02_00_00.tar.gz"),
        gzip(&tar_of(&root)),
    )
    .unwrap();

    // A container whose /bin/true does not run (a script without its
    // interpreter): every byte restores, and the command fails.
    let ct_broken = dir.join("dump-ct-broken");
    fs::create_dir_all(&ct_broken).unwrap();
    let broken_root = env.path("ct-broken-root");
    container_root(&broken_root);
    fs::remove_file(broken_root.join("bin/true")).unwrap();
    fs::write(broken_root.join("bin/true"), b"#!/bin/no-such-shell\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(
            broken_root.join("bin/true"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    fs::write(
        ct_broken.join("vzdump-lxc-201-2026_12_03-02_00_00.tar.gz"),
        gzip(&tar_of(&broken_root)),
    )
    .unwrap();

    let config = service_config(dir);
    let svc = start(&dir.join("data"), &config, None);
    let boot = serde_json::json!({"marker": "login:", "timeout": "120s", "memory_mib": 256});
    for (plan, dump) in [
        ("good", &good),
        ("broken", &broken),
        ("ct", &ct),
        ("ct-broken", &ct_broken),
    ] {
        let (status, body) = post(
            &svc,
            "/api/v1/plans",
            &serde_json::json!({"id": plan, "source": format!("vzdump:{}", dump.display()),
                "schedule": "0 3 * * *", "rpo": "1h",
                "restore_test": {"every": "1d", "max_evidence_age": "7d", "boot": boot}}),
        );
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["restore_test"]["boot"]["marker"], "login:", "{body}");
        let (status, body) = post(
            &svc,
            &format!("/api/v1/plans/{plan}/run"),
            &serde_json::Value::Null,
        );
        assert_eq!(status, 202, "{body}");
    }

    let up = wait_state(&svc, "good", "recoverable");
    let g = &up["coverage"]["guest"];
    assert_eq!(g["check"], "boot", "{up}");
    assert_eq!(g["came_up"], true, "{up}");
    assert!(g["took_ms"].as_u64().unwrap() > 0, "{up}");
    assert!(g["command"].as_str().unwrap().contains("-net none"), "{up}");
    let tail = g["console_tail"].to_string();
    assert!(tail.contains("login:"), "{tail}");
    eprintln!(
        "boot test: marker after {} ms ({})",
        g["took_ms"], g["accelerator"]
    );

    let down = wait_state(&svc, "broken", "unrecoverable");
    let g = &down["coverage"]["guest"];
    assert_eq!(g["came_up"], false, "{down}");
    let tail = g["console_tail"].to_string();
    assert!(!tail.contains("login:"), "{tail}");
    // The data itself matched: only the boot failed.
    assert_eq!(down["coverage"]["passed"], false, "{down}");
    let plan = get(&svc, "/api/v1/plans/broken");
    assert_ne!(plan["protection"]["status"], "protected", "{plan}");

    let ran = wait_state(&svc, "ct", "recoverable");
    let g = &ran["coverage"]["guest"];
    assert_eq!(g["check"], "command", "{ran}");
    assert_eq!(g["came_up"], true, "{ran}");
    assert!(
        g["command"].as_str().unwrap().starts_with("chroot "),
        "{ran}"
    );

    let down = wait_state(&svc, "ct-broken", "unrecoverable");
    let g = &down["coverage"]["guest"];
    assert_eq!(g["check"], "command", "{down}");
    assert_eq!(g["came_up"], false, "{down}");
}

//! Starting a restored guest, the last step of its restore test: a VM's
//! restored disks are booted under `qemu-system-x86_64` (no network
//! device, the disks opened copy-on-write so the restored images stay as
//! restored) until its serial console shows a marker; a container's
//! restored root runs a command under `chroot`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines of console output kept as evidence.
pub const CONSOLE_TAIL: usize = 20;

/// Bytes of console output searched and kept (the newest).
const CONSOLE_WINDOW: usize = 64 * 1024;

/// What starting the guest showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestStart {
    /// `boot` (a VM) or `command` (a container).
    pub check: &'static str,
    /// The command run, as a shell would show it.
    pub command: String,
    /// `kvm` or `tcg` for a boot.
    pub accelerator: Option<String>,
    /// What had to appear (a boot's marker).
    pub marker: Option<String>,
    /// Whether the guest came up (the marker appeared; the command
    /// exited 0).
    pub came_up: bool,
    /// Time from start to the marker (or to the command's end).
    pub took: Duration,
    /// The last lines of the console (or the command's output).
    pub console_tail: Vec<String>,
    /// Why it did not come up, for humans.
    pub failure: Option<String>,
}

/// How a VM is booted.
#[derive(Clone, Debug)]
pub struct BootSpec {
    /// The text the serial console must show.
    pub marker: String,
    /// How long it may take.
    pub timeout: Duration,
    /// Guest memory.
    pub memory_mib: u32,
    /// `kvm`, `tcg`, or `None`: KVM when `/dev/kvm` is usable, else TCG
    /// (`$VOUCH_BOOT_ACCEL` overrides).
    pub accelerator: Option<String>,
    /// The emulator (default `qemu-system-x86_64`, or `$VOUCH_QEMU`).
    pub qemu: PathBuf,
}

impl BootSpec {
    /// A boot waiting `timeout` for `marker` with `memory_mib`.
    pub fn new(marker: &str, timeout: Duration, memory_mib: u32) -> Self {
        BootSpec {
            marker: marker.to_owned(),
            timeout,
            memory_mib,
            accelerator: std::env::var("VOUCH_BOOT_ACCEL")
                .ok()
                .filter(|a| !a.is_empty()),
            qemu: std::env::var_os("VOUCH_QEMU")
                .map_or_else(|| PathBuf::from("qemu-system-x86_64"), PathBuf::from),
        }
    }
}

/// Whether KVM can run guests here: `/dev/kvm` opens read-write and is
/// not the nested PVM flavour (`kvm_pvm`), which runs no real-mode boot
/// loader.
pub fn kvm_usable() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
        && !Path::new("/sys/module/kvm_pvm").exists()
}

/// The restored disks of a VM in boot order: the configuration's `boot:
/// order=...` (or legacy `bootdisk:`) first, then the rest by name.
pub fn boot_disks(restored: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut disks: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(restored)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(dev) = name
            .strip_prefix("drive-")
            .and_then(|n| n.strip_suffix(".raw"))
        {
            disks.push((dev.to_owned(), entry.path()));
        }
    }
    disks.sort();
    let config = std::fs::read_to_string(restored.join("qemu-server.conf")).unwrap_or_default();
    let mut order: Vec<String> = Vec::new();
    for line in config.lines() {
        // Only the guest's current configuration, not its snapshots'.
        if line.starts_with('[') {
            break;
        }
        if let Some(v) = line.strip_prefix("boot:") {
            if let Some(o) = v.split(',').find_map(|p| p.trim().strip_prefix("order=")) {
                order = o.split(';').map(str::to_owned).collect();
            }
        } else if let Some(v) = line.strip_prefix("bootdisk:") {
            if order.is_empty() {
                order = vec![v.trim().to_owned()];
            }
        }
    }
    disks.sort_by_key(|(dev, _)| order.iter().position(|o| o == dev).unwrap_or(usize::MAX));
    Ok(disks)
}

/// The qemu arguments booting `disks` (no network device, the console on
/// stdio, copy-on-write disks, no reboot: a BIOS that finds nothing to
/// boot ends the emulator).
fn qemu_args(disks: &[(String, PathBuf)], spec: &BootSpec, accel: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "-accel",
        accel,
        "-m",
        &spec.memory_mib.to_string(),
        "-smp",
        "1",
        "-nodefaults",
        "-nographic",
        "-no-reboot",
        "-serial",
        "stdio",
        "-net",
        "none",
        "-boot",
        "reboot-timeout=1000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // The guest is whatever the backup held: qemu may not call
    // obsolete or privileged system calls nor start processes, and runs
    // as `nobody` once its files are open when the service is root.
    args.extend(
        [
            "-sandbox",
            "on,obsolete=deny,spawn=deny,resourcecontrol=deny",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        args.extend(["-runas", "nobody"].iter().map(|s| s.to_string()));
    }
    for (dev, path) in disks {
        let interface = if dev.starts_with("ide") || dev.starts_with("sata") {
            "ide"
        } else {
            "virtio"
        };
        args.push("-drive".into());
        args.push(format!(
            "file={},format=raw,if={interface},snapshot=on",
            path.display().to_string().replace(',', ",,")
        ));
    }
    args
}

/// Removes terminal escape sequences (`ESC [ ... letter`, `ESC c`).
fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            if c != '\r' {
                out.push(c);
            }
            continue;
        }
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        }
    }
    out
}

fn tail_lines(text: &str) -> Vec<String> {
    let lines: Vec<String> = text
        .lines()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(CONSOLE_TAIL)..].to_vec()
}

/// Boots the VM restored in `restored` and waits for the marker. `Err`
/// only when the emulator cannot be started at all.
pub fn boot(
    restored: &Path,
    spec: &BootSpec,
    cancel: Option<&AtomicBool>,
) -> Result<GuestStart, String> {
    let disks = boot_disks(restored).map_err(|e| format!("reading {}: {e}", restored.display()))?;
    let accel = spec
        .accelerator
        .clone()
        .unwrap_or_else(|| if kvm_usable() { "kvm" } else { "tcg" }.to_owned());
    let args = qemu_args(&disks, spec, &accel);
    let command = std::iter::once(spec.qemu.display().to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let mut outcome = GuestStart {
        check: "boot",
        command,
        accelerator: Some(accel),
        marker: Some(spec.marker.clone()),
        came_up: false,
        took: Duration::ZERO,
        console_tail: Vec::new(),
        failure: None,
    };
    if disks.is_empty() {
        outcome.failure = Some("the point holds no disk image (drive-*.raw) to boot".into());
        return Ok(outcome);
    }
    let started = Instant::now();
    let mut child = Command::new(&spec.qemu)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} ({e}): install Debian's qemu-system-x86 package, or set VOUCH_QEMU",
                spec.qemu.display()
            )
        })?;
    let console = Arc::new(Mutex::new(String::new()));
    let mut readers = Vec::new();
    for (stream, sink) in [
        (
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            console.clone(),
        ),
        (
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            console.clone(),
        ),
    ] {
        let Some(mut stream) = stream else { continue };
        readers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut c = sink
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                c.push_str(&String::from_utf8_lossy(&buf[..n]));
                if c.len() > 2 * CONSOLE_WINDOW {
                    let cut = c.len() - CONSOLE_WINDOW;
                    let cut = (cut..c.len()).find(|i| c.is_char_boundary(*i)).unwrap_or(0);
                    c.drain(..cut);
                }
            }
        }));
    }
    let seen = |console: &Mutex<String>| {
        let c = console
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        strip_escapes(&c).contains(&spec.marker)
    };
    let exited = loop {
        if seen(&console) {
            outcome.came_up = true;
            outcome.took = started.elapsed();
            break None;
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Output may still be in the pipes.
            for r in readers.drain(..) {
                let _ = r.join();
            }
            if seen(&console) {
                outcome.came_up = true;
                outcome.took = started.elapsed();
                break None;
            }
            break Some(status);
        }
        if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            outcome.failure = Some("cancelled".into());
            break None;
        }
        if started.elapsed() >= spec.timeout {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !outcome.came_up {
        outcome.took = started.elapsed();
    }
    let _ = child.kill();
    let _ = child.wait();
    for r in readers {
        let _ = r.join();
    }
    let text = strip_escapes(
        &console
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    outcome.console_tail = tail_lines(&text);
    // qemu's own failure to start (exit 1: an option it lacks, a file it
    // cannot open) says nothing of the guest; a BIOS with nothing to boot
    // ends it with 0 (-no-reboot).
    if let Some(status) = exited.filter(|s| !s.success() && s.code().is_some()) {
        return Err(format!(
            "{} could not run the guest ({status}): {}",
            spec.qemu.display(),
            outcome.console_tail.join(" / ")
        ));
    }
    if !outcome.came_up && outcome.failure.is_none() {
        outcome.failure = Some(match exited {
            Some(status) => format!(
                "the guest stopped ({status}) after {:.1} s without showing {:?} on its console",
                outcome.took.as_secs_f64(),
                spec.marker
            ),
            None => format!(
                "the guest did not show {:?} on its console within {:?}",
                spec.marker, spec.timeout
            ),
        });
    }
    Ok(outcome)
}

/// Runs `/bin/true` inside the container root restored in `root`
/// (`chroot`), with a time limit.
pub fn run_in_container(root: &Path, timeout: Duration) -> Result<GuestStart, String> {
    let command = format!("chroot {} /bin/true", root.display());
    let started = Instant::now();
    let mut child = Command::new("chroot")
        .arg(root)
        .arg("/bin/true")
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run chroot ({e})"))?;
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break Some(s);
        }
        if started.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut output = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut output);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut output);
    }
    // chroot's own failure (125: it could not change root) says nothing
    // of the container.
    if status.and_then(|s| s.code()) == Some(125) {
        return Err(format!(
            "chroot could not enter {}: {}",
            root.display(),
            output.trim()
        ));
    }
    let came_up = status.is_some_and(|s| s.success());
    Ok(GuestStart {
        check: "command",
        command,
        accelerator: None,
        marker: None,
        came_up,
        took: started.elapsed(),
        console_tail: tail_lines(&output),
        failure: (!came_up).then(|| match status {
            Some(s) => format!("/bin/true inside the restored container failed ({s})"),
            None => {
                format!("/bin/true inside the restored container did not end within {timeout:?}")
            }
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_stripped_before_the_marker_is_looked_for() {
        let raw = "\u{1b}c\u{1b}[?7l\u{1b}[2JSeaBIOS\r\nvouch-guest lo\u{1b}[0mgin: ";
        assert_eq!(strip_escapes(raw), "SeaBIOS\nvouch-guest login: ");
    }

    #[test]
    fn an_emulator_that_cannot_start_is_no_verdict_on_the_guest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("drive-scsi0.raw"), vec![0u8; 4096]).unwrap();
        let mut spec = BootSpec::new("login:", Duration::from_secs(5), 256);
        spec.accelerator = Some("tcg".into());
        // Missing, and failing at its start (exit 1).
        spec.qemu = PathBuf::from("/nonexistent/qemu-system-x86_64");
        assert!(boot(dir.path(), &spec, None)
            .unwrap_err()
            .contains("qemu-system-x86"));
        spec.qemu = PathBuf::from("/bin/false");
        assert!(boot(dir.path(), &spec, None)
            .unwrap_err()
            .contains("could not run the guest"));
        // No disk at all: a guest that cannot come up (a verdict).
        let empty = tempfile::tempdir().unwrap();
        let started = boot(empty.path(), &spec, None).unwrap();
        assert!(!started.came_up);
        assert!(started.failure.unwrap().contains("no disk image"));
    }

    #[test]
    fn the_boot_disk_comes_first() {
        let dir = tempfile::tempdir().unwrap();
        for d in [
            "drive-scsi0.raw",
            "drive-scsi1.raw",
            "drive-virtio0.raw",
            "vzdump.log",
        ] {
            std::fs::write(dir.path().join(d), b"").unwrap();
        }
        std::fs::write(
            dir.path().join("qemu-server.conf"),
            "boot: order=virtio0;net0\nscsi0: x\n[snap1]\nboot: order=scsi1\n",
        )
        .unwrap();
        let names: Vec<String> = boot_disks(dir.path())
            .unwrap()
            .into_iter()
            .map(|d| d.0)
            .collect();
        assert_eq!(names, ["virtio0", "scsi0", "scsi1"]);
        let args = qemu_args(
            &boot_disks(dir.path()).unwrap(),
            &BootSpec::new("login:", Duration::from_secs(1), 256),
            "tcg",
        )
        .join(" ");
        assert!(args.contains("-net none"), "{args}");
        assert!(args.contains("snapshot=on"), "{args}");
    }
}

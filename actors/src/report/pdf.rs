//! A report's HTML printed to PDF by headless Chromium
//! (`--headless --print-to-pdf`), in a temporary directory of its own,
//! with no network (the page has nothing to fetch) and a time limit.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::ReportError;

/// The longest Chromium may take to print.
pub const PRINT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where Chromium is looked for when the configuration names none: the
/// first of these found on `PATH`.
pub const CHROMIUM_NAMES: &[&str] = &["chromium", "chromium-browser", "google-chrome"];

/// The first of [`CHROMIUM_NAMES`] on `PATH`, else `chromium`.
pub fn default_chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in CHROMIUM_NAMES {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    PathBuf::from(CHROMIUM_NAMES[0])
}

/// Whether this process runs as root (the owner of `/proc/self` is the
/// effective user), where Chromium refuses to start with its sandbox; as
/// any other user the sandbox stays on. Unknown counts as root: the page
/// is Vouch's own, escaped and script-free, and the print must not fail.
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(true, |m| m.uid() == 0)
}

/// Prints `html` to PDF with the Chromium at `chromium`. Blocks up to
/// [`PRINT_TIMEOUT`].
pub fn print(html: &[u8], chromium: &Path) -> Result<Vec<u8>, ReportError> {
    let io = |what: &str, e: std::io::Error| ReportError::Print(format!("{what}: {e}"));
    let dir = tempdir().map_err(|e| io("temporary directory", e))?;
    let result = print_in(&dir, html, chromium);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn tempdir() -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for i in 0..100u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = base.join(format!("vouch-report-{}-{nanos}-{i}", std::process::id()));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free temporary directory name"))
}

fn print_in(dir: &Path, html: &[u8], chromium: &Path) -> Result<Vec<u8>, ReportError> {
    let io = |what: &str, e: std::io::Error| ReportError::Print(format!("{what}: {e}"));
    let page = dir.join("report.html");
    let out = dir.join("report.pdf");
    std::fs::write(&page, html).map_err(|e| io("writing the page", e))?;
    let mut print_arg = std::ffi::OsString::from("--print-to-pdf=");
    print_arg.push(&out);
    let mut profile_arg = std::ffi::OsString::from("--user-data-dir=");
    profile_arg.push(dir.join("profile"));
    let mut url = std::ffi::OsString::from("file://");
    url.push(&page);
    let mut child = match Command::new(chromium)
        .args(running_as_root().then_some("--no-sandbox"))
        .args([
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--no-pdf-header-footer",
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
        ])
        .arg(profile_arg)
        .arg(print_arg)
        .arg(url)
        .env("HOME", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReportError::NoChromium {
                path: chromium.display().to_string(),
            })
        }
        Err(e) => return Err(io("starting Chromium", e)),
    };
    let mut stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.take(64 * 1024).read_to_string(&mut s);
        }
        s
    });
    let started = Instant::now();
    let status = loop {
        match child
            .try_wait()
            .map_err(|e| io("waiting for Chromium", e))?
        {
            Some(status) => break status,
            None if started.elapsed() > PRINT_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ReportError::Print(format!(
                    "it did not finish within {}s",
                    PRINT_TIMEOUT.as_secs()
                )));
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let err = reader.join().unwrap_or_default();
    let pdf = std::fs::read(&out).unwrap_or_default();
    if !status.success() || !pdf.starts_with(b"%PDF") {
        let tail: String = err.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(ReportError::Print(format!("{status}: {tail}")));
    }
    Ok(pdf)
}

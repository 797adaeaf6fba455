//! A client of the Proxmox VE API (`/api2/json`), for what a backup of a
//! guest needs: find the guest's node, ask that node for a vzdump to the
//! dump storage, follow the task to its end, find the archive it wrote, and
//! remove it afterwards when the plan says so.
//!
//! Authentication is an API token (`Authorization: PVEAPIToken=USER@REALM!
//! TOKENID=SECRET`); the secret is never logged and never put in a URL.
//! HTTPS is verified: against the SHA-256 fingerprint of the cluster's
//! certificate when one is configured (Proxmox VE's own certificates are
//! self-signed), else against Mozilla's roots. Nothing turns verification
//! off.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::Method;
use actix_web::web::Bytes;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;
use zeroize::Zeroizing;

use vouch_events::DumpMode;

use super::archive::{ArchiveName, GuestType};
use crate::http_client::{Authorize, ClientOptions, HttpClient, Request};
use crate::tls_pin::Pin;

/// Characters left as they are in a path segment (RFC 3986 unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// What went wrong talking to a cluster. The messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum PveError {
    /// No answer at all.
    #[error("cannot reach the Proxmox VE API of cluster {cluster:?} at {origin}: {detail}")]
    Unreachable {
        /// The cluster's name.
        cluster: String,
        /// Where it was asked.
        origin: String,
        /// The transport's error.
        detail: String,
    },
    /// 401: the token is unknown, expired or its secret wrong.
    #[error(
        "the Proxmox VE API of cluster {cluster:?} refused the token {token_id:?} (401 {reason}): check token_id and the secret file, and that the token has not expired (`pveum user token list USER`)"
    )]
    Unauthorized {
        /// The cluster's name.
        cluster: String,
        /// The token's id (never its secret).
        token_id: String,
        /// The server's reason.
        reason: String,
    },
    /// 403: the token lacks a privilege.
    #[error(
        "the Proxmox VE API of cluster {cluster:?} denied {call} (403 {reason}): the token {token_id:?} lacks a privilege; docs/proxmox.md lists what it needs (VM.Audit and VM.Backup on the guest, Datastore.AllocateSpace and Datastore.Audit on the dump storage)"
    )]
    Forbidden {
        /// The cluster's name.
        cluster: String,
        /// The token's id.
        token_id: String,
        /// The call, `METHOD /path`.
        call: String,
        /// The server's reason.
        reason: String,
    },
    /// Any other error answer.
    #[error("the Proxmox VE API of cluster {cluster:?} answered {call} with {status}: {reason}")]
    Api {
        /// The cluster's name.
        cluster: String,
        /// The call.
        call: String,
        /// Its status.
        status: u16,
        /// What the server said.
        reason: String,
    },
    /// A successful answer Vouch cannot read.
    #[error("the Proxmox VE API of cluster {cluster:?} answered {call} with {detail}")]
    Malformed {
        /// The cluster's name.
        cluster: String,
        /// The call.
        call: String,
        /// What was wrong with it.
        detail: String,
    },
    /// The guest is not in the cluster (or the token may not see it).
    #[error(
        "cluster {cluster:?} has no {} guest {vmid} that the token may see (is it a {} guest, or does the token lack VM.Audit on /vms/{vmid}?)", kind.as_str(), other.as_str()
    )]
    GuestNotFound {
        /// The cluster's name.
        cluster: String,
        /// What the plan says it is.
        kind: GuestType,
        /// The other type, for the hint.
        other: GuestType,
        /// Its id.
        vmid: u32,
    },
    /// The node answered the vzdump request without starting a task: the
    /// guest is not on that node (any more).
    #[error(
        "node {node} started no vzdump task for guest {vmid} (it answered {answer:?}): the guest moved to another node since it was looked up; try again"
    )]
    GuestMoved {
        /// The node asked.
        node: String,
        /// The guest.
        vmid: u32,
        /// What it answered.
        answer: String,
    },
    /// The vzdump task was refused a privilege (Proxmox VE checks
    /// VM.Backup inside the task).
    #[error(
        "the vzdump task {upid} on node {node} was denied: {exitstatus}; the token lacks a privilege (docs/proxmox.md lists what it needs)"
    )]
    TaskDenied {
        /// The node.
        node: String,
        /// The task.
        upid: String,
        /// Its exit status.
        exitstatus: String,
    },
    /// The vzdump task ended with an error.
    #[error(
        "the vzdump task {upid} on node {node} failed: {exitstatus}; its log ends:\n{log_tail}"
    )]
    TaskFailed {
        /// The node.
        node: String,
        /// The task.
        upid: String,
        /// Its exit status.
        exitstatus: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// The vzdump task ran longer than allowed; it was asked to stop.
    #[error(
        "the vzdump task {upid} on node {node} was still running after {after:?} (task_timeout); it was asked to stop"
    )]
    TaskTimeout {
        /// The node.
        node: String,
        /// The task.
        upid: String,
        /// How long it was given.
        after: Duration,
    },
    /// The job was cancelled while the task ran; the task was asked to stop.
    #[error("cancelled while the vzdump task {upid} ran; it was asked to stop")]
    Cancelled {
        /// The task.
        upid: String,
    },
    /// The task succeeded but its archive is not where the storage is
    /// mounted on this server.
    #[error(
        "the vzdump task wrote {volid}, but {} does not exist on this server: is the storage {storage:?} mounted at {} (the `mount` of cluster {cluster:?})?",
        expected.display(),
        mount.display()
    )]
    DumpNotMounted {
        /// The cluster's name.
        cluster: String,
        /// The storage.
        storage: String,
        /// The volume the task wrote.
        volid: String,
        /// Where it should be here.
        expected: PathBuf,
        /// The configured mount.
        mount: PathBuf,
    },
    /// The task succeeded but no archive of it was found.
    #[error(
        "the vzdump task {upid} succeeded, but storage {storage:?} lists no archive of guest {vmid} it wrote"
    )]
    DumpNotListed {
        /// The task.
        upid: String,
        /// The storage.
        storage: String,
        /// The guest.
        vmid: u32,
    },
}

impl PveError {
    /// A stable kind for job failures.
    pub fn kind(&self) -> &'static str {
        match self {
            PveError::Unreachable { .. } => "pve_unreachable",
            PveError::Unauthorized { .. } => "pve_unauthorized",
            PveError::Forbidden { .. } | PveError::TaskDenied { .. } => "pve_forbidden",
            PveError::GuestMoved { .. } => "pve_guest_moved",
            PveError::Api { .. } | PveError::Malformed { .. } => "pve_api",
            PveError::GuestNotFound { .. } => "pve_guest_not_found",
            PveError::TaskFailed { .. } => "pve_task_failed",
            PveError::TaskTimeout { .. } => "pve_task_timeout",
            PveError::Cancelled { .. } => "cancelled",
            PveError::DumpNotMounted { .. } | PveError::DumpNotListed { .. } => "pve_dump_missing",
        }
    }

    /// Whether trying again later may help.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            PveError::Unreachable { .. }
                | PveError::Api { .. }
                | PveError::GuestMoved { .. }
                | PveError::TaskFailed { .. }
                | PveError::TaskTimeout { .. }
        )
    }
}

/// How a cluster is reached (from `[[proxmox]]`).
#[derive(Clone)]
pub struct ClusterSettings {
    /// Its name in plan sources (`pve:NAME/qemu/101`).
    pub name: String,
    /// The API's URL (`https://pve1.example:8006`).
    pub url: String,
    /// `USER@REALM!TOKENID`.
    pub token_id: String,
    /// The token's secret (a UUID).
    pub token_secret: Zeroizing<String>,
    /// The SHA-256 fingerprint of the API's certificate (else Mozilla's
    /// roots must vouch for it).
    pub fingerprint: Option<Pin>,
    /// The storage vzdump writes to (its id in Proxmox VE).
    pub storage: String,
    /// Where that storage is mounted on this server (its archives are in
    /// `MOUNT/dump/`).
    pub mount: PathBuf,
    /// How long a vzdump task may run.
    pub task_timeout: Duration,
    /// How often a running task is asked about.
    pub poll: Duration,
}

impl std::fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("token_id", &self.token_id)
            .field("token_secret", &"<redacted>")
            .field("storage", &self.storage)
            .field("mount", &self.mount)
            .finish()
    }
}

/// `PVEAPIToken=USER@REALM!TOKENID=SECRET`.
struct ApiToken {
    header: Zeroizing<String>,
}

impl Authorize for ApiToken {
    fn authorize(&self, request: &mut Request) {
        request
            .headers
            .push(("authorization", self.header.as_str().to_owned()));
    }
}

/// A guest, as `/cluster/resources` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guest {
    /// Its type.
    pub kind: GuestType,
    /// Its id.
    pub vmid: u32,
    /// The node it runs on.
    pub node: String,
    /// Its name.
    pub name: Option<String>,
    /// `running`, `stopped`, ...
    pub status: Option<String>,
}

/// A vzdump task that ended well, and what it wrote.
#[derive(Clone, Debug)]
pub struct Dump {
    /// The node that ran it.
    pub node: String,
    /// The task.
    pub upid: String,
    /// Its exit status (`OK`, or `WARNINGS: n`).
    pub exitstatus: String,
    /// The archive's volume id (`STORAGE:backup/vzdump-...`).
    pub volid: String,
    /// The archive on this server.
    pub path: PathBuf,
    /// The archive's name.
    pub archive: ArchiveName,
    /// How long the task took.
    pub took: Duration,
}

/// The `{"data": ...}` envelope of every answer.
#[derive(Deserialize)]
struct Envelope<T> {
    data: T,
}

#[derive(Deserialize)]
struct Resource {
    #[serde(rename = "type")]
    kind: String,
    vmid: Option<u64>,
    node: Option<String>,
    name: Option<String>,
    status: Option<String>,
}

#[derive(Deserialize)]
struct TaskStatus {
    status: String,
    exitstatus: Option<String>,
}

#[derive(Deserialize)]
struct LogLine {
    n: u64,
    t: String,
}

#[derive(Deserialize)]
struct Content {
    volid: String,
    ctime: Option<i64>,
    vmid: Option<u64>,
}

/// One Proxmox VE cluster.
pub struct Cluster {
    settings: ClusterSettings,
    client: HttpClient,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.settings.fmt(f)
    }
}

/// Lines of a task's log kept for an error.
const LOG_TAIL: usize = 20;

impl Cluster {
    /// A client of the cluster (no call made yet).
    pub fn new(settings: ClusterSettings) -> Result<Cluster, String> {
        if !settings.url.starts_with("https://") {
            return Err(format!(
                "proxmox {:?}: url {:?} must be https:// (the API token is a secret)",
                settings.name, settings.url
            ));
        }
        let (user, token) = settings.token_id.split_once('!').unwrap_or(("", ""));
        if !user.contains('@') || token.is_empty() {
            return Err(format!(
                "proxmox {:?}: token_id {:?} is not USER@REALM!TOKENID",
                settings.name, settings.token_id
            ));
        }
        if settings.token_secret.is_empty()
            || !settings.token_secret.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(format!(
                "proxmox {:?}: the token secret must be one line of visible ASCII",
                settings.name
            ));
        }
        let header = Zeroizing::new(format!(
            "PVEAPIToken={}={}",
            settings.token_id,
            settings.token_secret.as_str()
        ));
        let options = ClientOptions {
            pin: settings.fingerprint.clone(),
            timeout: Duration::from_secs(60),
            attempts: 4,
            backoff: Duration::from_millis(500),
            retry_statuses: &[502, 503, 504],
        };
        let client = HttpClient::with_auth(&settings.url, Arc::new(ApiToken { header }), options)?;
        Ok(Cluster { settings, client })
    }

    /// Its settings.
    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        form: Option<&[(&str, String)]>,
    ) -> Result<T, PveError> {
        let call = format!("{method} {path}");
        let mut request = Request::new(method, format!("/api2/json{path}"));
        if let Some(form) = form {
            let body = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
                .finish();
            request.body = Some((Bytes::from(body), "application/x-www-form-urlencoded"));
        }
        let answer = self
            .client
            .call(&request)
            .map_err(|detail| PveError::Unreachable {
                cluster: self.settings.name.clone(),
                origin: self.client.origin().to_owned(),
                detail,
            })?;
        let cluster = self.settings.name.clone();
        let reason = || {
            let m = answer.message();
            let m = m.trim();
            if m.is_empty() || m == r#"{"data":null}"# {
                String::from("(no message)")
            } else {
                m.to_owned()
            }
        };
        match answer.status {
            s if (200..300).contains(&s) => {}
            401 => {
                return Err(PveError::Unauthorized {
                    cluster,
                    token_id: self.settings.token_id.clone(),
                    reason: reason(),
                })
            }
            403 => {
                return Err(PveError::Forbidden {
                    cluster,
                    token_id: self.settings.token_id.clone(),
                    call,
                    reason: reason(),
                })
            }
            status => {
                return Err(PveError::Api {
                    cluster,
                    call,
                    status,
                    reason: reason(),
                })
            }
        }
        serde_json::from_slice::<Envelope<T>>(&answer.body)
            .map(|e| e.data)
            .map_err(|e| PveError::Malformed {
                cluster,
                call,
                detail: format!("a body Vouch cannot read: {e}"),
            })
    }

    /// The guest `vmid` of type `kind`, and the node it is on.
    pub fn find_guest(&self, kind: GuestType, vmid: u32) -> Result<Guest, PveError> {
        let all: Vec<Resource> = self.call(Method::GET, "/cluster/resources?type=vm", None)?;
        let other = match kind {
            GuestType::Qemu => GuestType::Lxc,
            GuestType::Lxc => GuestType::Qemu,
        };
        all.into_iter()
            .find(|r| r.vmid == Some(u64::from(vmid)) && r.kind == kind.as_str())
            .and_then(|r| {
                Some(Guest {
                    kind,
                    vmid,
                    node: r.node?,
                    name: r.name,
                    status: r.status,
                })
            })
            .ok_or(PveError::GuestNotFound {
                cluster: self.settings.name.clone(),
                kind,
                other,
                vmid,
            })
    }

    /// Asks the guest's node for a vzdump to the dump storage; its task.
    pub fn start_dump(&self, guest: &Guest, mode: DumpMode) -> Result<String, PveError> {
        let path = format!("/nodes/{}/vzdump", segment(&guest.node));
        let form = [
            ("vmid", guest.vmid.to_string()),
            ("storage", self.settings.storage.clone()),
            ("mode", mode.as_str().to_owned()),
            // zstd: fast, and read as a stream by the ingest.
            ("compress", "zstd".to_owned()),
            ("remove", "0".to_owned()),
        ];
        let upid: String = self.call(Method::POST, &path, Some(&form))?;
        if upid == "OK" {
            return Err(PveError::GuestMoved {
                node: guest.node.clone(),
                vmid: guest.vmid,
                answer: upid,
            });
        }
        if !upid.starts_with("UPID:") {
            return Err(PveError::Malformed {
                cluster: self.settings.name.clone(),
                call: format!("POST {path}"),
                detail: format!("{upid:?}, not a task id (UPID:...)"),
            });
        }
        Ok(upid)
    }

    /// The task's whole log.
    pub fn task_log(&self, node: &str, upid: &str) -> Result<Vec<String>, PveError> {
        let mut lines = Vec::new();
        loop {
            let path = format!(
                "/nodes/{}/tasks/{}/log?start={}&limit=1000",
                segment(node),
                segment(upid),
                lines.len()
            );
            let page: Vec<LogLine> = self.call(Method::GET, &path, None)?;
            let got = page.len();
            lines.extend(page.into_iter().map(|l| (l.n, l.t)));
            if got < 1000 {
                break;
            }
        }
        lines.sort_by_key(|(n, _)| *n);
        Ok(lines.into_iter().map(|(_, t)| t).collect())
    }

    /// Asks a task to stop (best effort: the answer is only logged).
    pub fn stop_task(&self, node: &str, upid: &str) {
        let path = format!("/nodes/{}/tasks/{}", segment(node), segment(upid));
        if let Err(e) = self.call::<serde_json::Value>(Method::DELETE, &path, None) {
            tracing::warn!(upid, error = %e, "could not stop the vzdump task");
        }
    }

    /// Waits for the task's end; its exit status when it ended well.
    pub fn wait_task(
        &self,
        node: &str,
        upid: &str,
        cancel: Option<&AtomicBool>,
    ) -> Result<String, PveError> {
        let started = Instant::now();
        let path = format!("/nodes/{}/tasks/{}/status", segment(node), segment(upid));
        loop {
            let status: TaskStatus = self.call(Method::GET, &path, None)?;
            if status.status == "stopped" {
                let exit = status.exitstatus.unwrap_or_default();
                if exit == "OK" || exit.starts_with("WARNINGS") {
                    return Ok(exit);
                }
                // VM.Backup is checked inside the task: its refusal ends
                // it as `403 Permission check failed (/vms/N, VM.Backup)`.
                if exit.starts_with("403 ") || exit.contains("Permission check failed") {
                    return Err(PveError::TaskDenied {
                        node: node.to_owned(),
                        upid: upid.to_owned(),
                        exitstatus: exit,
                    });
                }
                let log = self.task_log(node, upid).unwrap_or_default();
                let tail = log[log.len().saturating_sub(LOG_TAIL)..].join("\n");
                return Err(PveError::TaskFailed {
                    node: node.to_owned(),
                    upid: upid.to_owned(),
                    exitstatus: if exit.is_empty() {
                        "no exit status".into()
                    } else {
                        exit
                    },
                    log_tail: tail,
                });
            }
            if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                self.stop_task(node, upid);
                return Err(PveError::Cancelled {
                    upid: upid.to_owned(),
                });
            }
            if started.elapsed() >= self.settings.task_timeout {
                self.stop_task(node, upid);
                return Err(PveError::TaskTimeout {
                    node: node.to_owned(),
                    upid: upid.to_owned(),
                    after: self.settings.task_timeout,
                });
            }
            // Sleep in small steps so a cancel is heard soon.
            let until = Instant::now() + self.settings.poll;
            while Instant::now() < until {
                if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50).min(self.settings.poll));
            }
        }
    }

    /// The archive a finished task wrote: named by its log (`creating
    /// vzdump archive '...'`) and listed by the storage; found on this
    /// server below the storage's mount.
    pub fn find_dump(
        &self,
        guest: &Guest,
        upid: &str,
        exitstatus: String,
        took: Duration,
    ) -> Result<Dump, PveError> {
        let log = self.task_log(&guest.node, upid)?;
        let named = archive_named_by(&log);
        let path = format!(
            "/nodes/{}/storage/{}/content?content=backup&vmid={}",
            segment(&guest.node),
            segment(&self.settings.storage),
            guest.vmid
        );
        let listed: Vec<Content> = self.call(Method::GET, &path, None)?;
        let file_of = |volid: &str| -> Option<String> {
            volid
                .split_once(':')
                .map(|(_, v)| v.strip_prefix("backup/").unwrap_or(v))
                .map(str::to_owned)
        };
        let candidates = listed.into_iter().filter(|c| {
            c.vmid.is_none_or(|v| v == u64::from(guest.vmid))
                && file_of(&c.volid)
                    .and_then(|f| ArchiveName::parse(Path::new(&f)))
                    .is_some_and(|a| a.vmid == guest.vmid && a.guest == guest.kind)
        });
        // The one the log names; else (a log Vouch cannot read) the newest.
        let chosen = match &named {
            Some(name) => candidates
                .into_iter()
                .find(|c| file_of(&c.volid).as_deref() == Some(name.as_str())),
            None => candidates.max_by_key(|c| c.ctime.unwrap_or(0)),
        };
        let Some(content) = chosen else {
            return Err(PveError::DumpNotListed {
                upid: upid.to_owned(),
                storage: self.settings.storage.clone(),
                vmid: guest.vmid,
            });
        };
        let file = file_of(&content.volid).unwrap_or_default();
        let local = self.settings.mount.join("dump").join(&file);
        let archive = ArchiveName::parse(&local).filter(|_| local.is_file());
        let Some(archive) = archive else {
            return Err(PveError::DumpNotMounted {
                cluster: self.settings.name.clone(),
                storage: self.settings.storage.clone(),
                volid: content.volid,
                expected: local,
                mount: self.settings.mount.clone(),
            });
        };
        Ok(Dump {
            node: guest.node.clone(),
            upid: upid.to_owned(),
            exitstatus,
            volid: content.volid,
            path: local,
            archive,
            took,
        })
    }

    /// A dump of `guest`: asked for, followed to its end, found here.
    pub fn dump(
        &self,
        guest: &Guest,
        mode: DumpMode,
        cancel: Option<&AtomicBool>,
    ) -> Result<Dump, PveError> {
        let started = Instant::now();
        let upid = self.start_dump(guest, mode)?;
        tracing::info!(node = %guest.node, vmid = guest.vmid, %upid, "vzdump task started");
        let exit = self.wait_task(&guest.node, &upid, cancel)?;
        tracing::info!(%upid, exitstatus = %exit, secs = started.elapsed().as_secs_f64(), "vzdump task ended");
        self.find_dump(guest, &upid, exit, started.elapsed())
    }

    /// Removes a dump through the API (the storage deletes the archive
    /// with its log and notes); waits up to 30 s for the removal.
    pub fn remove_dump(&self, dump: &Dump) -> Result<(), PveError> {
        // A DELETE carries its parameters in the query.
        let path = format!(
            "/nodes/{}/storage/{}/content/{}?delay=30",
            segment(&dump.node),
            segment(&self.settings.storage),
            segment(&dump.volid)
        );
        let _: serde_json::Value = self.call(Method::DELETE, &path, None)?;
        Ok(())
    }
}

/// A path segment, percent-encoded.
fn segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// The file name of the archive a vzdump log says it creates (`INFO:
/// creating vzdump archive '/mnt/pve/x/dump/vzdump-qemu-101-....vma.zst'`;
/// containers: `creating archive '...'` in older releases).
pub fn archive_named_by(log: &[String]) -> Option<String> {
    log.iter().find_map(|line| {
        let at = line
            .find("creating vzdump archive '")
            .map(|i| i + "creating vzdump archive '".len())
            .or_else(|| {
                line.find("creating archive '")
                    .map(|i| i + "creating archive '".len())
            })?;
        let rest = &line[at..];
        let path = &rest[..rest.find('\'')?];
        let name = Path::new(path).file_name()?.to_str()?;
        // A temporary name (`.dat`/`.tmp`) is renamed to the final one.
        ArchiveName::parse(Path::new(name)).map(|_| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_is_read_off_the_log() {
        let log = vec![
            "INFO: starting new backup job: vzdump 101 --storage nfs".to_owned(),
            "INFO: creating vzdump archive '/mnt/pve/nfs/dump/vzdump-qemu-101-2026_12_03-02_00_00.vma.zst'".to_owned(),
        ];
        assert_eq!(
            archive_named_by(&log).as_deref(),
            Some("vzdump-qemu-101-2026_12_03-02_00_00.vma.zst")
        );
        let lxc = vec![
            "INFO: creating archive '/mnt/dump/vzdump-lxc-200-2026_12_03-02_00_00.tar.zst'"
                .to_owned(),
        ];
        assert_eq!(
            archive_named_by(&lxc).as_deref(),
            Some("vzdump-lxc-200-2026_12_03-02_00_00.tar.zst")
        );
        assert_eq!(archive_named_by(&["INFO: nothing".to_owned()]), None);
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(
            segment("UPID:pve1:00001234:0000ABCD:6750A0B0:vzdump:101:vouch@pve!backup:"),
            "UPID%3Apve1%3A00001234%3A0000ABCD%3A6750A0B0%3Avzdump%3A101%3Avouch%40pve%21backup%3A"
        );
        assert_eq!(segment("nfs:backup/x.vma"), "nfs%3Abackup%2Fx.vma");
    }

    #[test]
    fn settings_are_checked_and_the_secret_is_never_shown() {
        let s = ClusterSettings {
            name: "c".into(),
            url: "http://pve:8006".into(),
            token_id: "vouch@pve!backup".into(),
            token_secret: Zeroizing::new("s3cr3t".into()),
            fingerprint: None,
            storage: "nfs".into(),
            mount: "/mnt".into(),
            task_timeout: Duration::from_secs(1),
            poll: Duration::from_secs(1),
        };
        assert!(!format!("{s:?}").contains("s3cr3t"));
        assert!(Cluster::new(s.clone()).unwrap_err().contains("https://"));
        let bad_id = ClusterSettings {
            url: "https://pve:8006".into(),
            token_id: "vouch!backup".into(),
            ..s.clone()
        };
        assert!(Cluster::new(bad_id)
            .unwrap_err()
            .contains("USER@REALM!TOKENID"));
    }
}

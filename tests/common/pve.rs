//! A Proxmox VE API server for the tests, faithful to what the real one
//! does for the calls Vouch makes (schema: `proxmox/pve-docs`
//! `api-viewer/apidata.js`; behaviour: `pve-manager` `PVE/API2/VZDump.pm`,
//! `PVE/API2/Tasks.pm`, `pve-storage` `Content.pm`, `pve-http-server`):
//!
//! - HTTPS on 127.0.0.1 with a self-signed certificate;
//! - `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET` (or a space
//!   after `PVEAPIToken`; the secret after the last `=`); a refused token is
//!   answered `401 Authentication failed!` with no body after 3 s;
//! - answers in the `{"data": ...}` envelope; errors with the message as
//!   the status line's reason and in `{"data":null,"message":"...\n"}`,
//!   `errors` for a parameter that fails its schema (400);
//! - privileges as ACLs: `/cluster/resources` lists only guests with
//!   VM.Audit; `vzdump` needs Datastore.AllocateSpace on the storage before
//!   it forks (403) and VM.Backup on the guest inside the task (the task
//!   fails `403 Permission check failed (/vms/N, VM.Backup)`); a guest on
//!   another node is answered `"OK"` with no task;
//! - tasks with UPIDs (`UPID:node:PID:PSTART:STARTTIME:vzdump:VMID:USER:`),
//!   status and a paged log (1-based `n`, `total`), ending `TASK OK`,
//!   `TASK ERROR: job errors` or never (a task that hangs until stopped);
//! - real archives in the dump directory: VMA (by Vouch's writer, which
//!   the vzdump tests check against `dissect.archive`) or tar, zstd
//!   compressed, written under a temporary name and renamed, with the
//!   `.log` beside them; listed as storage content and removed by DELETE.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};

/// How a guest's dump goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// It is written and the task ends `TASK OK`.
    Ok,
    /// The task ends `TASK ERROR: job errors` with this error.
    Fail(String),
    /// The task never ends (until stopped).
    Hang,
}

/// What a guest holds.
#[derive(Clone, Debug)]
pub enum Content {
    /// A VM's disks (device name, bytes).
    Disks(Vec<(String, Vec<u8>)>),
    /// A container's root directory (tarred as vzdump does).
    Root(PathBuf),
}

/// A guest of the simulated cluster.
#[derive(Clone, Debug)]
pub struct Guest {
    /// Its id.
    pub vmid: u32,
    /// The node it runs on.
    pub node: String,
    /// Its name.
    pub name: String,
    /// What it holds.
    pub content: Content,
    /// How its dumps go.
    pub behaviour: Behaviour,
}

impl Guest {
    fn kind(&self) -> &'static str {
        match self.content {
            Content::Disks(_) => "qemu",
            Content::Root(_) => "lxc",
        }
    }
}

/// The token's privileges (ACLs granted to both the user and the token).
#[derive(Clone, Copy, Debug)]
pub struct Privileges {
    /// VM.Audit on /vms.
    pub vm_audit: bool,
    /// VM.Backup on /vms.
    pub vm_backup: bool,
    /// Datastore.AllocateSpace on the storage.
    pub allocate_space: bool,
    /// Datastore.Audit on the storage.
    pub datastore_audit: bool,
}

impl Privileges {
    /// What docs/proxmox.md grants.
    pub const LEAST: Privileges = Privileges {
        vm_audit: true,
        vm_backup: true,
        allocate_space: true,
        datastore_audit: true,
    };
}

struct Task {
    node: String,
    upid: String,
    vmid: u32,
    starttime: u64,
    pid: u32,
    pstart: u32,
    log: Vec<String>,
    exitstatus: Option<String>,
    stop: bool,
}

struct State {
    token_id: String,
    secret: String,
    storage: String,
    dump_dir: PathBuf,
    guests: Vec<Guest>,
    privileges: Privileges,
    tasks: HashMap<String, Task>,
    next_pid: u32,
    requests: Vec<String>,
}

/// The running server.
pub struct PveSim {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// SHA-256 of its certificate, `AB:CD:...`.
    pub fingerprint: String,
    /// `vouch@pve!backup`.
    pub token_id: String,
    /// The token's secret.
    pub secret: String,
    /// The storage's id.
    pub storage: String,
    /// The dump directory (`MOUNT/dump`).
    pub dump_dir: PathBuf,
    state: Arc<Mutex<State>>,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for PveSim {
    fn drop(&mut self) {
        let h = self.handle.clone();
        // Stops by itself with the test.
        std::thread::spawn(move || actix_web::rt::System::new().block_on(h.stop(false)));
    }
}

impl PveSim {
    /// A cluster of `guests` whose storage `backup-nfs` is mounted at
    /// `mount` (archives in `mount/dump`).
    pub fn start(mount: &Path, guests: Vec<Guest>) -> PveSim {
        let dump_dir = mount.join("dump");
        std::fs::create_dir_all(&dump_dir).expect("dump dir");
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("params");
        let cert = params.self_signed(&key).expect("certificate");
        let fingerprint = ring::digest::digest(&ring::digest::SHA256, cert.der())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("tls config");
        let token_id = "vouch@pve!backup".to_owned();
        let secret = "0c0ffee0-1234-4abc-9def-000000000001".to_owned();
        let state = Arc::new(Mutex::new(State {
            token_id: token_id.clone(),
            secret: secret.clone(),
            storage: "backup-nfs".into(),
            dump_dir: dump_dir.clone(),
            guests,
            privileges: Privileges::LEAST,
            tasks: HashMap::new(),
            next_pid: 0x1a2b,
            requests: Vec::new(),
        }));
        let (tx, rx) = std::sync::mpsc::channel();
        let st = state.clone();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let data = web::Data::new(st);
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(data.clone())
                        .app_data(web::PayloadConfig::new(1 << 20))
                        .default_service(web::to(handle))
                })
                .workers(1)
                .bind_rustls_0_23("127.0.0.1:0", tls)
                .expect("bind");
                let port = server.addrs()[0].port();
                let server = server.run();
                tx.send((port, server.handle())).expect("send");
                let _ = server.await;
            })
        });
        let (port, handle) = rx.recv().expect("server started");
        PveSim {
            url: format!("https://127.0.0.1:{port}"),
            fingerprint,
            token_id,
            secret,
            storage: "backup-nfs".into(),
            dump_dir,
            state,
            handle,
        }
    }

    /// Grants exactly `p`.
    pub fn set_privileges(&self, p: Privileges) {
        self.state.lock().unwrap().privileges = p;
    }

    /// Changes how guest `vmid`'s dumps go.
    pub fn set_behaviour(&self, vmid: u32, b: Behaviour) {
        let mut st = self.state.lock().unwrap();
        for g in st.guests.iter_mut().filter(|g| g.vmid == vmid) {
            g.behaviour = b.clone();
        }
    }

    /// Replaces guest `vmid`'s disks (a VM that changed between dumps).
    pub fn set_disks(&self, vmid: u32, disks: Vec<(String, Vec<u8>)>) {
        let mut st = self.state.lock().unwrap();
        for g in st.guests.iter_mut().filter(|g| g.vmid == vmid) {
            g.content = Content::Disks(disks.clone());
        }
    }

    /// Every request so far, `METHOD PATH?QUERY` with the
    /// `Authorization` header's scheme.
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The tasks so far: (upid, exit status, whether asked to stop).
    pub fn tasks(&self) -> Vec<(String, Option<String>, bool)> {
        let st = self.state.lock().unwrap();
        let mut all: Vec<_> = st
            .tasks
            .values()
            .map(|t| (t.upid.clone(), t.exitstatus.clone(), t.stop))
            .collect();
        all.sort();
        all
    }

    /// The archives in the dump directory.
    pub fn archives(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dump_dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".zst"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

type Shared = web::Data<Arc<Mutex<State>>>;

fn ok(data: Value) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json;charset=UTF-8")
        .body(json!({ "data": data }).to_string())
}

fn ok_total(data: Value, total: usize) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json;charset=UTF-8")
        .body(json!({ "data": data, "total": total }).to_string())
}

/// An error as pve-http-server renders it: the message's first line as
/// the reason phrase, and in the body with its newline.
fn error(status: u16, message: &str, errors: Option<Value>) -> HttpResponse {
    let reason: &'static str = Box::leak(message.lines().next().unwrap_or("").to_owned().into());
    let mut body = json!({"data": null, "message": format!("{message}\n")});
    if let Some(e) = errors {
        body["errors"] = e;
    }
    HttpResponse::build(StatusCode::from_u16(status).expect("status"))
        .reason(reason)
        .content_type("application/json;charset=UTF-8")
        .body(body.to_string())
}

/// What Tasks.pm answers for a UPID with no log.
fn no_such_task() -> HttpResponse {
    error(
        400,
        "Parameter verification failed.",
        Some(json!({"upid": "no such task"})),
    )
}

fn params(req: &HttpRequest, body: &[u8]) -> HashMap<String, String> {
    let mut p: HashMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
    // Query parameters are merged in and win.
    p.extend(form_urlencoded::parse(req.query_string().as_bytes()).into_owned());
    p
}

/// The token of an `Authorization` header: `(?:^|\s)PVEAPIToken(?:=| )`
/// then `USER@REALM!TOKENID=SECRET`, split at the last `=`.
fn token_of(header: &str) -> Option<(String, String)> {
    let at = header.find("PVEAPIToken")?;
    if at > 0 && !header[..at].ends_with(char::is_whitespace) {
        return None;
    }
    let rest = &header[at + "PVEAPIToken".len()..];
    let rest = rest.strip_prefix('=').or_else(|| rest.strip_prefix(' '))?;
    let value = rest.split(';').next()?;
    let value = percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .ok()?
        .into_owned();
    let (id, secret) = value.rsplit_once('=')?;
    Some((id.to_owned(), secret.to_owned()))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `YYYY_MM_DD-HH_MM_SS` of `secs` (UTC here; the real one uses the
/// node's local time).
fn stamp(secs: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(secs as i64).unwrap();
    format!(
        "{:04}_{:02}_{:02}-{:02}_{:02}_{:02}",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

async fn handle(req: HttpRequest, body: web::Bytes, st: Shared) -> HttpResponse {
    let method = req.method().as_str().to_owned();
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    {
        let mut s = st.lock().unwrap();
        let scheme = auth.split(['=', ' ']).next().unwrap_or("").to_owned();
        let line = format!("{method} {}?{} [{scheme}]", req.path(), req.query_string());
        s.requests.push(line);
    }
    // The whole path is unescaped before routing.
    let path = percent_encoding::percent_decode_str(req.path())
        .decode_utf8_lossy()
        .into_owned();
    if auth.is_empty() {
        return error(401, "No ticket", None);
    }
    let valid = {
        let s = st.lock().unwrap();
        token_of(&auth).is_some_and(|(id, secret)| id == s.token_id && secret == s.secret)
    };
    if !valid {
        actix_web::rt::time::sleep(Duration::from_secs(3)).await;
        return HttpResponse::build(StatusCode::UNAUTHORIZED)
            .reason("Authentication failed!")
            .finish();
    }
    let Some(rest) = path.strip_prefix("/api2/json/") else {
        return error(
            501,
            &format!("Method '{method} {path}' not implemented"),
            None,
        );
    };
    let parts: Vec<&str> = rest.splitn(7, '/').collect();
    let p = params(&req, &body);
    let mut s = st.lock().unwrap();
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["cluster", "resources"]) => cluster_resources(&s, &p),
        ("POST", ["nodes", node, "vzdump"]) => vzdump(&mut s, &st, node, &p),
        ("GET", ["nodes", _node, "tasks", upid, "status"]) => task_status(&s, upid),
        ("GET", ["nodes", _node, "tasks", upid, "log"]) => task_log(&s, upid, &p),
        ("DELETE", ["nodes", _node, "tasks", upid]) => match s.tasks.get_mut(*upid) {
            Some(t) => {
                t.stop = true;
                ok(Value::Null)
            }
            None => error(
                400,
                "Parameter verification failed.",
                Some(json!({"upid": "no such task"})),
            ),
        },
        ("GET", ["nodes", _node, "storage", storage, "content"]) => content(&s, storage, &p),
        ("DELETE", ["nodes", _node, "storage", storage, "content", volume]) => {
            remove(&mut s, storage, volume)
        }
        // A volid's `/` may come unescaped: `content/local:backup/x`.
        ("DELETE", ["nodes", _node, "storage", storage, "content", a, b]) => {
            remove(&mut s, storage, &format!("{a}/{b}"))
        }
        _ => error(
            501,
            &format!("Method '{method} /{rest}' not implemented"),
            None,
        ),
    }
}

fn cluster_resources(s: &State, p: &HashMap<String, String>) -> HttpResponse {
    if let Some(t) = p.get("type") {
        if !["vm", "storage", "node", "sdn"].contains(&t.as_str()) {
            return error(
                400,
                "Parameter verification failed.",
                Some(
                    json!({"type": format!("value '{t}' does not have a value in the enumeration 'vm, storage, node, sdn'")}),
                ),
            );
        }
    }
    // Guests the token may not audit are left out, silently.
    let guests: Vec<Value> = s
        .guests
        .iter()
        .filter(|_| s.privileges.vm_audit)
        .map(|g| {
            json!({
                "id": format!("{}/{}", g.kind(), g.vmid),
                "type": g.kind(),
                "vmid": g.vmid,
                "node": g.node,
                "name": g.name,
                "status": "running",
                "template": 0,
                "maxdisk": 34359738368u64,
                "uptime": 86400,
            })
        })
        .collect();
    let mut all = guests;
    if p.get("type").is_none_or(|t| t == "storage") {
        all.push(
            json!({"id": format!("storage/pve1/{}", s.storage), "type": "storage",
            "storage": s.storage, "node": "pve1", "status": "available", "shared": 1}),
        );
    }
    if p.get("type").is_some_and(|t| t == "storage") {
        all.retain(|v| v["type"] == "storage");
    }
    ok(Value::Array(all))
}

fn vzdump(s: &mut State, shared: &Shared, node: &str, p: &HashMap<String, String>) -> HttpResponse {
    let mut errors = serde_json::Map::new();
    if let Some(m) = p.get("mode") {
        if !["snapshot", "suspend", "stop"].contains(&m.as_str()) {
            errors.insert(
                "mode".into(),
                format!("value '{m}' does not have a value in the enumeration 'snapshot, suspend, stop'").into(),
            );
        }
    }
    if let Some(c) = p.get("compress") {
        if !["0", "1", "gzip", "lzo", "zstd"].contains(&c.as_str()) {
            errors.insert(
                "compress".into(),
                format!(
                    "value '{c}' does not have a value in the enumeration '0, 1, gzip, lzo, zstd'"
                )
                .into(),
            );
        }
    }
    let vmid: Option<u32> = p.get("vmid").and_then(|v| v.parse().ok());
    if vmid.is_none() {
        errors.insert(
            "vmid".into(),
            "value does not match the regex pattern".into(),
        );
    }
    if !errors.is_empty() {
        return error(
            400,
            "Parameter verification failed.",
            Some(Value::Object(errors)),
        );
    }
    let vmid = vmid.unwrap_or_default();
    let storage = p.get("storage").cloned().unwrap_or_else(|| "local".into());
    if storage != s.storage {
        return error(500, &format!("storage '{storage}' does not exist"), None);
    }
    if !s.privileges.allocate_space {
        return error(
            403,
            &format!("Permission check failed (/storage/{storage}, Datastore.AllocateSpace)"),
            None,
        );
    }
    let guest = s.guests.iter().find(|g| g.vmid == vmid).cloned();
    if guest.as_ref().is_some_and(|g| g.node != node) {
        return ok(json!("OK"));
    }
    let started = now();
    s.next_pid += 1;
    let user = s.token_id.clone();
    let upid = format!(
        "UPID:{node}:{:08X}:{:08X}:{:08X}:vzdump:{vmid}:{user}:",
        s.next_pid, 0x0089_abcd_u32, started
    );
    let mode = p.get("mode").cloned().unwrap_or_else(|| "snapshot".into());
    let compress = p.get("compress").cloned().unwrap_or_else(|| "0".into());
    s.tasks.insert(
        upid.clone(),
        Task {
            node: node.to_owned(),
            upid: upid.clone(),
            vmid,
            starttime: started,
            pid: s.next_pid,
            pstart: 0x0089_abcd,
            log: vec![format!(
                "INFO: starting new backup job: vzdump {vmid} --mode {mode} --node {node} --storage {storage} --compress {compress} --remove {}",
                p.get("remove").map_or("1", String::as_str)
            )],
            exitstatus: None,
            stop: false,
        },
    );
    let shared: Arc<Mutex<State>> = shared.get_ref().clone();
    let privileged = s.privileges.vm_backup;
    let dump_dir = s.dump_dir.clone();
    let u = upid.clone();
    std::thread::spawn(move || run_task(shared, u, guest, vmid, privileged, dump_dir, mode));
    ok(json!(upid))
}

fn log(shared: &Arc<Mutex<State>>, upid: &str, line: String) {
    if let Some(t) = shared.lock().unwrap().tasks.get_mut(upid) {
        t.log.push(line);
    }
}

fn end(shared: &Arc<Mutex<State>>, upid: &str, exit: &str) {
    if let Some(t) = shared.lock().unwrap().tasks.get_mut(upid) {
        let last = if exit == "OK" {
            "TASK OK".to_owned()
        } else {
            format!("TASK ERROR: {exit}")
        };
        t.log.push(last);
        t.exitstatus = Some(exit.to_owned());
    }
}

fn run_task(
    shared: Arc<Mutex<State>>,
    upid: String,
    guest: Option<Guest>,
    vmid: u32,
    privileged: bool,
    dump_dir: PathBuf,
    mode: String,
) {
    // VM.Backup is checked inside the worker.
    if !privileged {
        end(
            &shared,
            &upid,
            &format!("403 Permission check failed (/vms/{vmid}, VM.Backup)"),
        );
        return;
    }
    let Some(guest) = guest else {
        log(
            &shared,
            &upid,
            format!("ERROR: Backup of VM {vmid} failed - unable to find VM '{vmid}'"),
        );
        log(
            &shared,
            &upid,
            "INFO: Backup job finished with errors".into(),
        );
        end(&shared, &upid, "job errors");
        return;
    };
    let kind = guest.kind();
    log(
        &shared,
        &upid,
        format!("INFO: Starting Backup of VM {vmid} ({kind})"),
    );
    log(&shared, &upid, format!("INFO: backup mode: {mode}"));
    match &guest.behaviour {
        Behaviour::Fail(why) => {
            log(
                &shared,
                &upid,
                format!("ERROR: Backup of VM {vmid} failed - {why}"),
            );
            log(&shared, &upid, "INFO: Failed at 2026-12-03 02:00:05".into());
            log(
                &shared,
                &upid,
                "INFO: Backup job finished with errors".into(),
            );
            end(&shared, &upid, "job errors");
            return;
        }
        Behaviour::Hang => loop {
            std::thread::sleep(Duration::from_millis(50));
            let stop = shared
                .lock()
                .unwrap()
                .tasks
                .get(&upid)
                .is_none_or(|t| t.stop);
            if stop {
                end(&shared, &upid, "interrupted by signal");
                return;
            }
        },
        Behaviour::Ok => {}
    }
    // A unique stamp: the next free second, as two dumps of one guest in
    // one second would collide.
    let mut secs = now();
    let ext = if kind == "qemu" { "vma.zst" } else { "tar.zst" };
    let base = loop {
        let b = format!("vzdump-{kind}-{vmid}-{}", stamp(secs));
        if !dump_dir.join(format!("{b}.{ext}")).exists() {
            break b;
        }
        secs += 1;
    };
    let name = format!("{base}.{ext}");
    let path = dump_dir.join(&name);
    log(
        &shared,
        &upid,
        format!("INFO: creating vzdump archive '{}'", path.display()),
    );
    let bytes = match &guest.content {
        Content::Disks(disks) => {
            let named: Vec<(&str, &[u8])> = disks
                .iter()
                .map(|(n, b)| (n.as_str(), b.as_slice()))
                .collect();
            crate::common::guests::vma(&named, u64::from(vmid))
        }
        Content::Root(root) => crate::common::guests::tar_of(root),
    };
    let compressed = crate::common::guests::zstd(&bytes);
    // vzdump writes a temporary file and renames it when complete.
    let tmp = dump_dir.join(format!("{base}.{}.dat", ext.trim_end_matches(".zst")));
    std::fs::write(&tmp, &compressed).expect("write archive");
    std::fs::rename(&tmp, &path).expect("rename archive");
    std::fs::write(
        dump_dir.join(format!("{base}.log")),
        format!("2026-12-03 02:00:00 INFO: Starting Backup of VM {vmid} ({kind})\n"),
    )
    .expect("write log");
    log(
        &shared,
        &upid,
        format!("INFO: archive file size: {}KB", compressed.len() / 1024),
    );
    log(
        &shared,
        &upid,
        format!("INFO: Finished Backup of VM {vmid} (00:00:01)"),
    );
    log(
        &shared,
        &upid,
        "INFO: Backup job finished successfully".into(),
    );
    end(&shared, &upid, "OK");
}

fn task_status(s: &State, upid: &str) -> HttpResponse {
    let Some(t) = s.tasks.get(upid) else {
        return no_such_task();
    };
    let (user, tokenid) = s.token_id.split_once('!').unwrap_or((&s.token_id, ""));
    let mut v = json!({
        "upid": t.upid, "node": t.node, "pid": t.pid, "pstart": t.pstart,
        "starttime": t.starttime, "type": "vzdump", "id": t.vmid.to_string(),
        "user": user, "tokenid": tokenid,
        "status": if t.exitstatus.is_some() { "stopped" } else { "running" },
    });
    if let Some(e) = &t.exitstatus {
        v["exitstatus"] = json!(e);
    }
    ok(v)
}

fn task_log(s: &State, upid: &str, p: &HashMap<String, String>) -> HttpResponse {
    let Some(t) = s.tasks.get(upid) else {
        return no_such_task();
    };
    let start: usize = p.get("start").and_then(|v| v.parse().ok()).unwrap_or(0);
    let limit: usize = p.get("limit").and_then(|v| v.parse().ok()).unwrap_or(50);
    let limit = if limit == 0 { usize::MAX } else { limit };
    let lines: Vec<Value> = t
        .log
        .iter()
        .enumerate()
        .skip(start)
        .take(limit)
        .map(|(i, l)| json!({"n": i + 1, "t": l}))
        .collect();
    ok_total(Value::Array(lines), t.log.len())
}

/// A vzdump archive's name: `vzdump-(qemu|lxc)-VMID-STAMP.(vma|tar)[.zst|.gz|.lzo]`.
fn backup_file(name: &str) -> Option<(String, u32, String)> {
    let rest = name.strip_prefix("vzdump-")?;
    let (kind, rest) = rest.split_once('-')?;
    let (vmid, rest) = rest.split_once('-')?;
    let (_, ext) = rest.split_once('.')?;
    let ok = [
        "vma", "vma.zst", "vma.gz", "vma.lzo", "tar", "tar.zst", "tar.gz", "tar.lzo", "tgz",
    ]
    .contains(&ext);
    (ok && ["qemu", "lxc"].contains(&kind))
        .then(|| (kind.to_owned(), vmid.parse().ok(), ext.to_owned()))
        .and_then(|(k, v, e)| Some((k, v?, e)))
}

fn content(s: &State, storage: &str, p: &HashMap<String, String>) -> HttpResponse {
    if storage != s.storage {
        return error(500, &format!("storage '{storage}' does not exist"), None);
    }
    if !s.privileges.datastore_audit && !s.privileges.allocate_space {
        return error(
            403,
            &format!("Permission check failed (/storage/{storage}, Datastore.Audit|Datastore.AllocateSpace)"),
            None,
        );
    }
    let want_vmid: Option<u32> = p.get("vmid").and_then(|v| v.parse().ok());
    let mut items = Vec::new();
    for e in std::fs::read_dir(&s.dump_dir).expect("dump dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((kind, vmid, format)) = backup_file(&name) else {
            continue;
        };
        if want_vmid.is_some_and(|v| v != vmid) {
            continue;
        }
        // A backup is listed with VM.Backup on its guest (or
        // Datastore.Allocate, which this token lacks).
        if !s.privileges.vm_backup {
            continue;
        }
        let meta = e.metadata().expect("metadata");
        let ctime = meta
            .modified()
            .ok()
            .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        items.push(json!({
            "volid": format!("{}:backup/{name}", s.storage),
            "format": format, "size": meta.len(), "ctime": ctime, "vmid": vmid,
            "subtype": kind, "content": "backup",
        }));
    }
    ok(Value::Array(items))
}

fn remove(s: &mut State, storage: &str, volume: &str) -> HttpResponse {
    let (sid, name) = volume.split_once(':').unwrap_or((storage, volume));
    if sid != storage {
        return error(
            400,
            "Parameter verification failed.",
            Some(json!({"volume": format!("storage ID mismatch ({sid} != {storage})")})),
        );
    }
    let Some(file) = name.strip_prefix("backup/") else {
        return error(500, &format!("unable to parse volume name '{name}'"), None);
    };
    let path = s.dump_dir.join(file);
    if !path.is_file() {
        return error(500, &format!("volume '{volume}' does not exist"), None);
    }
    if !s.privileges.allocate_space || !s.privileges.vm_backup {
        return error(
            403,
            &format!("Permission check failed (/storage/{storage}, Datastore.Allocate)"),
            None,
        );
    }
    std::fs::remove_file(&path).expect("remove");
    if let Some((base, _)) = file.split_once('.') {
        let _ = std::fs::remove_file(s.dump_dir.join(format!("{base}.log")));
        let _ = std::fs::remove_file(s.dump_dir.join(format!("{file}.notes")));
    }
    // With `delay`, the removal's task finished within it: null.
    ok(Value::Null)
}

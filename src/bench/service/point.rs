//! `vouch bench point`: the service handling one large recovery point.
//!
//! Serve starts on a fresh data directory (its default local repository)
//! with the source as the only allowed root. A plan backs the source up
//! (`POST /api/v1/plans/.../run`); the harness times the backup job, then
//! the way to `recoverable` (verification and the sampled restore test the
//! service runs by itself), then puts the API under load on the routes
//! that read the point: its detail, its listing (the root and one
//! directory), the plan's points, the overview and `/metrics`. Serve's
//! peak RSS covers all of it, the backup included (the service backs up in
//! its own process).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use super::super::loadgen::{self, Conn, LoadOptions, LoadResult, Request};
use super::super::{BenchError, Ctx as _, Result};
use super::{rm, tail, Server, ServiceConditions};

/// The plan's id.
const PLAN: &str = "bench-point";
/// How often a job or a point is polled.
const POLL: Duration = Duration::from_millis(200);

/// What `vouch bench point` should do.
#[derive(Clone, Debug)]
pub struct PointOptions {
    /// Work directory (serve's data directory, logs).
    pub workdir: PathBuf,
    /// The tree to back up.
    pub source: PathBuf,
    /// Load generator bounds, per route.
    pub load: LoadOptions,
    /// Longest wait for the backup, and again for `recoverable`.
    pub timeout: Duration,
    /// The vouch binary.
    pub vouch: PathBuf,
    /// The command line, recorded.
    pub command_line: String,
    /// No progress lines.
    pub quiet: bool,
}

/// What the run found.
#[derive(Clone, Debug, Serialize)]
pub struct PointReport {
    /// The machine and the run.
    pub conditions: ServiceConditions,
    /// The tree backed up.
    pub source: String,
    /// The point.
    pub point: String,
    /// Files and bytes of the point (its summary).
    pub files: u64,
    /// Bytes read.
    pub bytes: u64,
    /// From the run request to the backup job's end, seconds.
    pub backup_s: f64,
    /// From the backup job's end to the point's `recoverable`, seconds.
    pub to_recoverable_s: f64,
    /// The point's state at the end of the wait.
    pub state: String,
    /// The latest verification of the point, as the API shows it.
    pub verification: Value,
    /// The latest restore test of the point, as the API shows it (its
    /// evidence's restored paths left out).
    pub restore_test: Value,
    /// The routes under load.
    pub loads: Vec<LoadResult>,
    /// Serve's peak RSS (VmHWM), MiB, after the load.
    pub serve_peak_rss_mib: f64,
}

struct Api {
    conn: Conn,
    token: String,
}

impl Api {
    fn call(&mut self, req: Request) -> Result<(u16, Value)> {
        let r = self
            .conn
            .get(&req.bytes())
            .ctx(|| format!("requesting {}", req.path))?;
        let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        Ok((r.status, v))
    }

    fn get(&mut self, path: &str) -> Result<Value> {
        match self.call(Request::get(path, Some(&self.token.clone())))? {
            (200, v) => Ok(v),
            (status, v) => Err(BenchError::Workdir(format!("GET {path}: {status} {v}"))),
        }
    }

    fn post(&mut self, path: &str, body: &Value) -> Result<Value> {
        let req = Request {
            path: path.into(),
            token: Some(self.token.clone()),
            json: Some(body.to_string()),
        };
        match self.call(req)? {
            (200..=299, v) => Ok(v),
            (status, v) => Err(BenchError::Workdir(format!("POST {path}: {status} {v}"))),
        }
    }
}

fn say(o: &PointOptions, msg: &str) {
    if !o.quiet {
        eprintln!("[bench point] {msg}");
    }
}

/// Polls `f` until it returns a value, up to `timeout`.
fn wait_for<T>(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        if crate::util::interrupted() {
            return Err(BenchError::Interrupted);
        }
        if let Some(v) = f()? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(BenchError::Workdir(format!(
                "{what}: not within {}s",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// `s` percent-encoded for a query value.
fn query(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'.' | b'_' | b'-' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// States a point does not leave by waiting.
fn settled(state: &str) -> bool {
    matches!(
        state,
        "recoverable" | "corrupt" | "unrecoverable" | "expired"
    )
}

/// Runs the whole benchmark.
pub fn run_point(o: &PointOptions) -> Result<PointReport> {
    let source = std::fs::canonicalize(&o.source)
        .ctx(|| format!("resolving the source {}", o.source.display()))?;
    std::fs::create_dir_all(&o.workdir).ctx(|| format!("creating {}", o.workdir.display()))?;
    let workdir = std::path::absolute(&o.workdir).ctx(|| "resolving the work directory".into())?;
    let conditions = ServiceConditions::record(&workdir, &o.vouch, &o.command_line);
    let data = workdir.join("point-data");
    rm(&data)?;
    std::fs::create_dir_all(&data).ctx(|| format!("creating {}", data.display()))?;
    let log = workdir.join("serve-point.log");
    say(
        o,
        &format!(
            "serve on a fresh data directory, allowed: {}",
            source.display()
        ),
    );
    let mut server = Server::spawn_allowing(&o.vouch, &data, &log, &source)?;
    server.wait_listening(&log)?;
    server.wait_200("/readyz", None)?;
    let token = match server.token.clone() {
        Some(t) => t,
        None => std::fs::read_to_string(data.join(crate::cli::serve::INITIAL_ADMIN_TOKEN_FILE))
            .map(|t| t.trim().to_owned())
            .map_err(|e| BenchError::Workdir(format!("serve left no admin token: {e}")))?,
    };
    let addr = server.addr()?;
    let mut api = Api {
        conn: Conn::new(addr),
        token: token.clone(),
    };
    api.post(
        "/api/v1/plans",
        &json!({
            "id": PLAN,
            "source": source.display().to_string(),
            // Once a year: the harness starts the one backup itself.
            "schedule": "0 3 1 1 *",
            "rpo": "400days",
        }),
    )?;
    say(o, "backup");
    let t = Instant::now();
    let job = api.post(&format!("/api/v1/plans/{PLAN}/run"), &json!({}))?;
    let job_id = job
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| BenchError::Workdir(format!("the run answered no job id: {job}")))?
        .to_owned();
    let finished = wait_for(o.timeout, "the backup job's end", || {
        let j = api.get(&format!("/api/v1/jobs/{job_id}"))?;
        match j.get("state").and_then(Value::as_str) {
            Some("succeeded") => Ok(Some(j)),
            Some("failed" | "abandoned") => Err(BenchError::Workdir(format!(
                "the backup failed: {j}; serve's log ends with:\n{}",
                tail(&log)
            ))),
            _ => Ok(None),
        }
    })?;
    let backup_s = t.elapsed().as_secs_f64();
    let point = finished
        .get("point")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let point = match point {
        Some(p) => p,
        None => {
            let list = api.get(&format!("/api/v1/points?plan={PLAN}"))?;
            list.get(0)
                .and_then(|p| p.get("id"))
                .and_then(Value::as_str)
                .ok_or_else(|| BenchError::Workdir(format!("no point after the backup: {list}")))?
                .to_owned()
        }
    };
    say(
        o,
        &format!("backup took {backup_s:.1} s; waiting for the point to settle"),
    );
    let t = Instant::now();
    let detail = wait_for(o.timeout, "the point's recoverable", || {
        let d = api.get(&format!("/api/v1/points/{point}"))?;
        let state = d.get("state").and_then(Value::as_str).unwrap_or("");
        Ok(settled(state).then_some(d))
    })?;
    let to_recoverable_s = t.elapsed().as_secs_f64();
    let state = detail
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let summary = detail.get("summary").cloned().unwrap_or(Value::Null);
    let mut restore_test = detail.get("restore_test").cloned().unwrap_or(Value::Null);
    if let Some(ev) = restore_test
        .get_mut("evidence")
        .and_then(Value::as_object_mut)
    {
        ev.remove("restored");
    }
    // The source's own directory (a point holds absolute paths), and its
    // first subdirectory.
    let top = source.display().to_string();
    let listing = api.get(&format!(
        "/api/v1/points/{point}/files?path={}",
        query(&top)
    ))?;
    let first_dir = listing
        .get("entries")
        .and_then(Value::as_array)
        .and_then(|e| {
            e.iter()
                .find(|x| x.get("kind").and_then(Value::as_str) == Some("dir"))
        })
        .and_then(|x| x.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut routes = vec![
        format!("/api/v1/points/{point}"),
        format!("/api/v1/points/{point}/files?path={}", query(&top)),
    ];
    if let Some(d) = first_dir {
        routes.push(format!(
            "/api/v1/points/{point}/files?path={}",
            query(&format!("{top}/{d}"))
        ));
    }
    routes.extend([
        format!("/api/v1/points?plan={PLAN}"),
        "/api/v1/overview".into(),
        "/metrics".into(),
    ]);
    let mut loads = Vec::new();
    for path in routes {
        if crate::util::interrupted() {
            return Err(BenchError::Interrupted);
        }
        say(o, &format!("load: {path}"));
        loads.push(loadgen::run(
            addr,
            &Request::get(&path, Some(&token)),
            &o.load,
        ));
    }
    let serve_peak_rss_mib = server.peak_rss_mib();
    server.terminate()?;
    Ok(PointReport {
        conditions,
        source: source.display().to_string(),
        point,
        files: summary.get("files").and_then(Value::as_u64).unwrap_or(0),
        bytes: summary.get("bytes").and_then(Value::as_u64).unwrap_or(0),
        backup_s,
        to_recoverable_s,
        state,
        verification: detail.get("verification").cloned().unwrap_or(Value::Null),
        restore_test,
        loads,
        serve_peak_rss_mib,
    })
}

impl PointReport {
    /// The report as Markdown.
    pub fn to_markdown(&self) -> String {
        use std::fmt::Write as _;
        let c = &self.conditions;
        let mut md = String::new();
        let _ = writeln!(md, "# vouch bench point: {}\n", c.date_utc);
        let _ = writeln!(
            md,
            "Machine: {} ({} cores, {} MiB), kernel {}, work directory {} ({}), {} build {}; \
             load average at the start {:.2}.\n",
            c.cpu_model,
            c.cores,
            c.memory_mib,
            c.kernel,
            c.workdir,
            c.fs.fstype,
            c.build_profile,
            c.vouch,
            c.loadavg_start[0]
        );
        let _ = writeln!(
            md,
            "Source {}: {} files, {:.1} MiB. Point {}.\n",
            self.source,
            self.files,
            self.bytes as f64 / (1u64 << 20) as f64,
            &self.point[..self.point.len().min(12)]
        );
        let _ = writeln!(md, "| step | figure |\n|---|---|");
        let _ = writeln!(
            md,
            "| backup job (request to end) | {:.1} s |",
            self.backup_s
        );
        let _ = writeln!(
            md,
            "| backup end to `{}` (verification, restore test) | {:.1} s |",
            self.state, self.to_recoverable_s
        );
        let rt = &self.restore_test;
        let _ = writeln!(
            md,
            "| restore test | passed {}, {} files, {} bytes, {} ms |",
            rt.get("passed").unwrap_or(&Value::Null),
            rt.pointer("/evidence/files").unwrap_or(&Value::Null),
            rt.pointer("/evidence/bytes").unwrap_or(&Value::Null),
            rt.pointer("/evidence/duration_ms").unwrap_or(&Value::Null),
        );
        let _ = writeln!(
            md,
            "| serve's peak RSS (backup included) | {:.0} MiB |\n",
            self.serve_peak_rss_mib
        );
        let _ = writeln!(
            md,
            "| route | clients | requests | ok | p50 ms | p99 ms | max ms | body bytes |\n|---|---|---|---|---|---|---|---|"
        );
        for l in &self.loads {
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} |",
                l.endpoint.replace(&self.point, "{id}"),
                l.clients,
                l.requests,
                l.ok,
                l.p50_ms,
                l.p99_ms,
                l.max_ms,
                l.body_bytes
            );
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query("/var/tmp/a b&c"), "/var/tmp/a%20b%26c");
        assert_eq!(query("/d-1/f_2.x"), "/d-1/f_2.x");
    }

    #[test]
    fn only_final_states_end_the_wait() {
        for s in ["recoverable", "corrupt", "unrecoverable", "expired"] {
            assert!(settled(s), "{s}");
        }
        for s in ["unknown", "unverified", "verified", ""] {
            assert!(!settled(s), "{s}");
        }
    }

    #[test]
    fn a_wait_ends_with_the_value_or_says_what_did_not_come() {
        let mut n = 0;
        let v = wait_for(Duration::from_secs(5), "x", || {
            n += 1;
            Ok((n == 3).then_some(n))
        })
        .unwrap();
        assert_eq!(v, 3);
        let e = wait_for(Duration::ZERO, "the thing", || Ok(None::<()>)).unwrap_err();
        assert!(e.to_string().contains("the thing"), "{e}");
    }
}

//! A tiny WebDriver client (W3C WebDriver, JSON over HTTP) on `awc`, enough
//! to drive Debian's `chromium` through `chromedriver` in the console tests:
//! sessions, navigation, elements by CSS selector, clicks, keys, text,
//! scripts, screenshots. Polling waits with a bounded timeout instead of
//! sleeps.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The key W3C WebDriver uses for element references.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where Debian puts the browser and its driver.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A WebDriver call that failed: transport or a WebDriver error object.
#[derive(Debug)]
pub struct WdError(pub String);

impl std::fmt::Display for WdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type WdResult<T> = Result<T, WdError>;

/// Whether the browser tests can run here. Without chromium they are skipped
/// with a loud message, except under CI (env `CI` set), where that is a
/// failure.
pub fn browser_available(test: &str) -> bool {
    let present = Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if present {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {CHROMIUM} or {CHROMEDRIVER} is missing, and CI is set: install chromium and chromium-driver");
    }
    eprintln!();
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    eprintln!("!! SKIPPED {test}: {CHROMIUM} / {CHROMEDRIVER} not installed");
    eprintln!("!! (apt-get install chromium chromium-driver); in CI this fails.");
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    false
}

/// A running `chromedriver` on a free loopback port; killed on drop.
pub struct Driver {
    child: Child,
    pub base: String,
}

impl Driver {
    /// Starts chromedriver and waits (bounded) until `/status` says ready.
    pub async fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap_or_else(|e| panic!("pick a port: {e}"))
            .port();
        let mut child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {CHROMEDRIVER}: {e}"));
        // Drain its stdout so a chatty driver never blocks on a full pipe.
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                BufReader::new(out)
                    .lines()
                    .map_while(Result::ok)
                    .for_each(drop)
            });
        }
        let driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let client = client();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut res) = client.get(format!("{}/status", driver.base)).send().await {
                if let Ok(v) = res.json::<Value>().await {
                    if v["value"]["ready"].as_bool() == Some(true) {
                        return driver;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready on port {port} within 30 s"
            );
            actix_web::rt::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A new headless chromium session; downloads go to `download_dir`.
    pub async fn session(&self, download_dir: &Path) -> Session {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--window-size=1400,1000", "--disable-dev-shm-usage",
                         "--no-first-run", "--disable-extensions"],
                "prefs": {
                    "download.default_directory": download_dir.to_string_lossy(),
                    "download.prompt_for_download": false,
                    "safebrowsing.enabled": false
                }
            }
        }}});
        let client = client();
        let v = call(
            &client,
            "POST",
            &format!("{}/session", self.base),
            Some(caps),
        )
        .await
        .unwrap_or_else(|e| panic!("new WebDriver session: {e}"));
        let id = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {v}"))
            .to_owned();
        let s = Session {
            client,
            base: format!("{}/session/{id}", self.base),
            id,
        };
        // Headless chromium honours the download prefs; the CDP command makes
        // sure of it on versions that do not (best effort).
        let _ = s
            .cmd(
                "POST",
                "/goog/cdp/execute",
                json!({"cmd": "Browser.setDownloadBehavior",
                       "params": {"behavior": "allow",
                                  "downloadPath": download_dir.to_string_lossy()}}),
            )
            .await;
        s
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(90))
        .finish()
}

/// One WebDriver command; returns its `value`, or the WebDriver error.
async fn call(
    client: &awc::Client,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> WdResult<Value> {
    let req = match method {
        "GET" => client.get(url),
        "DELETE" => client.delete(url),
        _ => client.post(url),
    };
    let mut res = match body {
        Some(b) => req.send_json(&b).await,
        None if method == "POST" => req.send_json(&json!({})).await,
        None => req.send().await,
    }
    .map_err(|e| WdError(format!("{method} {url}: {e}")))?;
    let v: Value = res
        .json()
        .limit(64 << 20)
        .await
        .map_err(|e| WdError(format!("{method} {url}: bad JSON: {e}")))?;
    if !res.status().is_success() {
        return Err(WdError(format!(
            "{method} {url}: {} {}: {}",
            res.status(),
            v["value"]["error"].as_str().unwrap_or("?"),
            v["value"]["message"].as_str().unwrap_or("")
        )));
    }
    Ok(v["value"].clone())
}

/// A browser session; delete it with [`Session::quit`] (the driver's drop
/// kills the browser anyway).
pub struct Session {
    client: awc::Client,
    base: String,
    pub id: String,
}

/// A reference to an element of the current page.
#[derive(Clone, Debug)]
pub struct Element(pub String);

impl Session {
    async fn cmd(&self, method: &str, path: &str, body: Value) -> WdResult<Value> {
        let body = if method == "GET" || method == "DELETE" {
            None
        } else {
            Some(body)
        };
        call(&self.client, method, &format!("{}{path}", self.base), body).await
    }

    pub async fn goto(&self, url: &str) -> WdResult<()> {
        self.cmd("POST", "/url", json!({ "url": url }))
            .await
            .map(|_| ())
    }

    pub async fn current_url(&self) -> WdResult<String> {
        let v = self.cmd("GET", "/url", Value::Null).await?;
        Ok(v.as_str().unwrap_or_default().to_owned())
    }

    pub async fn find(&self, css: &str) -> WdResult<Element> {
        let v = self
            .cmd(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await?;
        element(&v).ok_or_else(|| WdError(format!("no element reference for {css}: {v}")))
    }

    pub async fn find_all(&self, css: &str) -> WdResult<Vec<Element>> {
        let v = self
            .cmd(
                "POST",
                "/elements",
                json!({"using": "css selector", "value": css}),
            )
            .await?;
        Ok(v.as_array()
            .map(|a| a.iter().filter_map(element).collect())
            .unwrap_or_default())
    }

    pub async fn click(&self, e: &Element) -> WdResult<()> {
        self.cmd("POST", &format!("/element/{}/click", e.0), json!({}))
            .await
            .map(|_| ())
    }

    pub async fn clear(&self, e: &Element) -> WdResult<()> {
        self.cmd("POST", &format!("/element/{}/clear", e.0), json!({}))
            .await
            .map(|_| ())
    }

    pub async fn send_keys(&self, e: &Element, text: &str) -> WdResult<()> {
        self.cmd(
            "POST",
            &format!("/element/{}/value", e.0),
            json!({ "text": text }),
        )
        .await
        .map(|_| ())
    }

    pub async fn text(&self, e: &Element) -> WdResult<String> {
        let v = self
            .cmd("GET", &format!("/element/{}/text", e.0), Value::Null)
            .await?;
        Ok(v.as_str().unwrap_or_default().to_owned())
    }

    pub async fn attribute(&self, e: &Element, name: &str) -> WdResult<Option<String>> {
        let v = self
            .cmd(
                "GET",
                &format!("/element/{}/attribute/{name}", e.0),
                Value::Null,
            )
            .await?;
        Ok(v.as_str().map(str::to_owned))
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns
    /// what it returns.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> WdResult<Value> {
        self.cmd(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> WdResult<Vec<u8>> {
        let v = self.cmd("GET", "/screenshot", Value::Null).await?;
        let b64 = v
            .as_str()
            .ok_or_else(|| WdError("screenshot is not a string".into()))?;
        base64_decode(b64).ok_or_else(|| WdError("screenshot is not base64".into()))
    }

    /// Writes a screenshot to `path` (creating its directory).
    pub async fn save_screenshot(&self, path: &Path) -> WdResult<()> {
        let png = self.screenshot().await?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| WdError(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(path, png).map_err(|e| WdError(format!("{}: {e}", path.display())))
    }

    pub async fn set_window_size(&self, width: u32, height: u32) -> WdResult<()> {
        self.cmd(
            "POST",
            "/window/rect",
            json!({"width": width, "height": height}),
        )
        .await
        .map(|_| ())
    }

    /// Polls `script` (a function body) every 100 ms until it returns
    /// something other than `null`, `false`, `""` or `0`, and returns that;
    /// panics with `what` and the last value after `timeout`.
    pub async fn wait_for(&self, what: &str, timeout: Duration, script: &str) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.execute(script, vec![]).await {
                Ok(v) if truthy(&v) => return v,
                Ok(v) => v,
                Err(e) => Value::String(e.0),
            };
            if Instant::now() >= deadline {
                let body = self
                    .execute(
                        "return document.querySelector('main').innerText.slice(0, 3000)",
                        vec![],
                    )
                    .await
                    .unwrap_or_default();
                panic!(
                    "timed out after {timeout:?} waiting for {what}; last: {last}\n\
                     url: {}\npage text:\n{}",
                    self.current_url().await.unwrap_or_default(),
                    body.as_str().unwrap_or_default()
                );
            }
            actix_web::rt::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `css` matches an element and returns it.
    pub async fn wait_css(&self, css: &str, timeout: Duration) -> Element {
        let script = format!("return document.querySelector({}) !== null", json!(css));
        self.wait_for(&format!("element {css}"), timeout, &script)
            .await;
        self.find(css)
            .await
            .unwrap_or_else(|e| panic!("{css} appeared, then: {e}"))
    }

    pub async fn quit(self) -> WdResult<()> {
        call(&self.client, "DELETE", &self.base, None)
            .await
            .map(|_| ())
    }
}

fn element(v: &Value) -> Option<Element> {
    v.get(ELEMENT_KEY)
        .and_then(Value::as_str)
        .map(|s| Element(s.to_owned()))
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        _ => true,
    }
}

/// Standard base64 (with or without padding) to bytes.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let clean: Vec<u8> = s
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        match chunk.len() {
            4 => out.extend_from_slice(&bytes[1..4]),
            3 => out.extend_from_slice(&bytes[1..3]),
            2 => out.push(bytes[1]),
            _ => return None,
        }
    }
    Some(out)
}

#[test]
fn base64_decodes_padded_and_unpadded() {
    assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
    assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
    assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
    assert_eq!(base64_decode("YWJj").unwrap(), b"abc");
    assert!(base64_decode("a$==").is_none());
}

//! Where passphrases come from: `VOUCH_PASSWORD`, `VOUCH_PASSWORD_FILE`,
//! `VOUCH_PASSWORD_COMMAND`, or a prompt on the terminal. Never argv.

use std::io::IsTerminal;
use std::process::Command;

use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// A passphrase, wiped from memory when dropped.
pub type Secret = Zeroizing<Vec<u8>>;

/// The file `--password-file` named, which wins over the variables for the
/// repository's own passphrase.
static PASSWORD_FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Reads the repository's passphrase from `file` (`--password-file`).
pub fn use_file(file: &std::path::Path) {
    let _ = PASSWORD_FILE.set(file.to_path_buf());
}

fn from_file(what: &str, path: &std::path::Path) -> Result<Secret> {
    let text = std::fs::read(path)
        .map_err(|e| Error::NoPassword(format!("cannot read {what} {}: {e}", path.display())))?;
    Ok(first_line(Zeroizing::new(text)))
}

fn from_env(prefix: &str) -> Result<Option<Secret>> {
    if prefix == "VOUCH_PASSWORD" {
        if let Some(path) = PASSWORD_FILE.get() {
            return from_file("--password-file", path).map(Some);
        }
    }
    if let Ok(p) = std::env::var(prefix) {
        return Ok(Some(Zeroizing::new(p.into_bytes())));
    }
    if let Ok(path) = std::env::var(format!("{prefix}_FILE")) {
        return from_file(&format!("{prefix}_FILE"), path.as_ref()).map(Some);
    }
    if let Ok(cmd) = std::env::var(format!("{prefix}_COMMAND")) {
        let out = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| Error::NoPassword(format!("cannot run {prefix}_COMMAND: {e}")))?;
        if !out.status.success() {
            return Err(Error::NoPassword(format!(
                "{prefix}_COMMAND exited with {}",
                out.status
            )));
        }
        return Ok(Some(first_line(Zeroizing::new(out.stdout))));
    }
    Ok(None)
}

fn first_line(mut text: Secret) -> Secret {
    if let Some(pos) = text.iter().position(|&b| b == b'\n') {
        text.truncate(pos);
    }
    if text.last() == Some(&b'\r') {
        text.pop();
    }
    text
}

fn prompt(label: &str) -> Result<Secret> {
    if !std::io::stdin().is_terminal() {
        return Err(Error::NoPassword(
            "no VOUCH_PASSWORD* variable set and no terminal to ask on".into(),
        ));
    }
    rpassword::prompt_password(label)
        .map(|p| Zeroizing::new(p.into_bytes()))
        .map_err(|e| Error::NoPassword(format!("cannot read from the terminal: {e}")))
}

/// The passphrase of an existing repository.
pub fn existing() -> Result<Secret> {
    match from_env("VOUCH_PASSWORD")? {
        Some(p) => Ok(p),
        None => prompt("repository passphrase: "),
    }
}

/// The passphrase of another existing repository, from `PREFIX`,
/// `PREFIX_FILE` or `PREFIX_COMMAND`, else asked with `label`.
pub fn existing_with(prefix: &str, label: &str) -> Result<Secret> {
    match from_env(prefix)? {
        Some(p) => Ok(p),
        None => prompt(label),
    }
}

/// A new passphrase (init: `VOUCH_PASSWORD*`; key add/passwd:
/// `VOUCH_NEW_PASSWORD*`), asked twice on a terminal.
pub fn new(env_prefix: &str) -> Result<Secret> {
    if let Some(p) = from_env(env_prefix)? {
        return Ok(p);
    }
    let a = prompt("new passphrase: ")?;
    let b = prompt("repeat the new passphrase: ")?;
    if a != b {
        return Err(Error::InvalidArgument(
            "the passphrases do not match".into(),
        ));
    }
    if a.is_empty() {
        return Err(Error::InvalidArgument(
            "the passphrase must not be empty".into(),
        ));
    }
    Ok(a)
}

//! `vouch chaos`: runs the chaos harness, `vouch-chaos` (the `chaos/`
//! crate, which depends on this one and so cannot be linked into it), as
//! git runs its subcommands: the program beside this binary, else the one
//! on PATH, with every argument passed through (docs/chaos.md).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use clap::Args;

/// Options of `vouch chaos` (all passed to `vouch-chaos`).
#[derive(Args, Debug)]
#[command(
    disable_help_flag = true,
    after_help = "Examples:
  vouch chaos list
  vouch chaos run --seed 1 --duration 10m --report chaos.json
  vouch chaos replay chaos.json

EXIT STATUS
  0  every invariant held; 1 one was violated; 2 usage; 3 the run could not be made"
)]
pub struct ChaosArgs {
    /// `run`, `list` or `replay`, and their options (`vouch chaos --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// The harness's program: beside this binary, else on PATH.
fn harness() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("vouch-chaos")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("vouch-chaos"))
}

/// Replaces this process with `vouch-chaos ARGS`; returns only when that
/// could not be started.
pub fn run(a: ChaosArgs) -> anyhow::Result<i32> {
    let program = harness();
    let mut cmd = Command::new(&program);
    cmd.args(&a.args);
    // The harness runs this very binary as the service and agents.
    if let Ok(me) = std::env::current_exe() {
        cmd.env("VOUCH_BIN", me);
    }
    let err = cmd.exec();
    Err(err).with_context(|| {
        format!(
            "vouch chaos runs {}, which could not be started: build it with `cargo build \
             --release -p vouch-chaos` and put it beside vouch or on PATH (docs/chaos.md)",
            program.display()
        )
    })
}

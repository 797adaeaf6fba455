//! `vouch generate`: shell completions and man pages, made from the same
//! definitions as the command line itself (the package ships their
//! output; `docs/operations.md`, "Installing").

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory, Subcommand};

/// Options of `vouch generate`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch generate completions bash > /etc/bash_completion.d/vouch
  vouch generate man --out /usr/share/man/man1

EXIT STATUS
  0  written; 1 it failed")]
pub struct GenerateArgs {
    /// What to make.
    #[command(subcommand)]
    pub what: GenerateWhat,
}

/// What `vouch generate` makes.
#[derive(Subcommand, Debug)]
pub enum GenerateWhat {
    /// A completion script for a shell, on standard output (bash: put it
    /// in /usr/share/bash-completion/completions/vouch).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Man pages: vouch(1) and one per subcommand (vouch-serve(1), ...).
    Man {
        /// The directory to write them into (made if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Runs `vouch generate`.
pub fn run(a: GenerateArgs) -> anyhow::Result<i32> {
    let mut cmd = super::Cli::command();
    match a.what {
        GenerateWhat::Completions { shell } => {
            clap_complete::generate(shell, &mut cmd, "vouch", &mut std::io::stdout());
        }
        GenerateWhat::Man { out } => {
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            cmd.build();
            let n = write_pages(&cmd, "vouch", &out)?;
            eprintln!("{n} man pages written to {}", out.display());
        }
    }
    Ok(0)
}

/// Writes the page of `cmd` (named `name`) and of each of its visible
/// subcommands (`name-sub`), recursively; returns how many.
fn write_pages(cmd: &clap::Command, name: &str, out: &Path) -> anyhow::Result<usize> {
    let page = cmd
        .clone()
        .bin_name(name.to_owned())
        .display_name(name.to_owned());
    let mut buf = Vec::new();
    clap_mangen::Man::new(page).title(name).render(&mut buf)?;
    let path = out.join(format!("{name}.1"));
    std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
    let mut n = 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        n += write_pages(sub, &format!("{name}-{}", sub.get_name()), out)?;
    }
    Ok(n)
}

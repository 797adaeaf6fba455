//! The `vouch` binary: parse, run, map the outcome to an exit code.

use clap::Parser;

fn main() {
    let cli = vouch::cli::Cli::parse();
    let filter = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VOUCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let _ = ctrlc::set_handler(|| {
        if vouch::util::interrupted() {
            std::process::exit(vouch::exit_code::INTERRUPTED);
        }
        vouch::util::set_interrupted();
    });
    let json = cli.json;
    let code = match vouch::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            if json {
                let v = serde_json::json!({"type": "error", "error": e.to_string(), "hint": e.hint(), "exit_code": e.exit_code()});
                println!("{v}");
            }
            eprintln!("vouch: {e}\n  hint: {}", e.hint());
            e.exit_code()
        }
    };
    std::process::exit(code);
}

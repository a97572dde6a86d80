//! `cargo xtask fuzz`: the coverage-guided fuzz targets of `fuzz/`
//! (cargo-fuzz, libFuzzer, the nightly toolchain), several at a time, each
//! for a bounded time, with a table of what each did. See FUZZING.md.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::run;

/// The cargo-fuzz release the docs name.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
/// The bound of `--smoke`, per target.
const SMOKE_SECONDS: u64 = 30;

#[derive(clap::Args)]
pub struct Args {
    /// Run each target for 30 s (after replaying its corpus) instead of
    /// `--seconds`.
    #[arg(long)]
    pub smoke: bool,
    /// How long each target runs.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub seconds: u64,
    /// Targets run at the same time.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub parallel: usize,
    /// Only these targets (default: every one in fuzz/fuzz_targets).
    pub targets: Vec<String>,
}

/// What one run did, from libFuzzer's final lines.
struct Outcome {
    target: String,
    passed: bool,
    seconds: u64,
    executions: Option<u64>,
    coverage: Option<(u64, u64)>,
    log: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    let root = crate::workspace_root();
    let fuzz_dir = root.join("fuzz");
    let all = targets(&fuzz_dir)?;
    let chosen: Vec<String> = if args.targets.is_empty() {
        all.clone()
    } else {
        for t in &args.targets {
            if !all.contains(t) {
                bail!("no fuzz target `{t}` (there are: {})", all.join(", "));
            }
        }
        args.targets.clone()
    };
    let seconds = if args.smoke {
        args.seconds.min(SMOKE_SECONDS)
    } else {
        args.seconds
    };
    crate::step("[1/3] the nightly toolchain and cargo-fuzz");
    if run::output(Command::new("cargo").args(["+nightly", "--version"])).is_none() {
        bail!(
            "the nightly toolchain is missing; cargo-fuzz needs it (`rustup toolchain install nightly`)"
        );
    }
    cargo_fuzz()?;
    crate::step(
        "[2/3] building every target (release, coverage-instrumented; slow the first time)",
    );
    run::checked(cargo_fuzz_command(&fuzz_dir).arg("build").args(BUILD_FLAGS))?;
    crate::step(format!(
        "[3/3] {} target(s), {seconds} s each after replaying its corpus, {} at a time",
        chosen.len(),
        args.parallel.max(1)
    ));
    let logs = root.join("target/fuzz-logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let mut waiting = chosen.iter();
    let mut running: Vec<(String, Child, Instant, PathBuf)> = Vec::new();
    let mut outcomes = Vec::new();
    loop {
        while running.len() < args.parallel.max(1) {
            let Some(target) = waiting.next() else { break };
            let log = logs.join(format!("{target}.log"));
            let child = start(root, target, seconds, &log)?;
            println!("    started {target} (log: {})", log.display());
            running.push((target.clone(), child, Instant::now(), log));
        }
        if running.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        let mut still = Vec::new();
        for (target, mut child, started, log) in running {
            match child.try_wait().context("waiting for a fuzzer")? {
                None => still.push((target, child, started, log)),
                Some(status) => {
                    let outcome = read_outcome(&target, status.success(), started, log);
                    println!(
                        "    {target}: {} after {} s",
                        if outcome.passed {
                            "no finding"
                        } else {
                            "FAILED"
                        },
                        outcome.seconds
                    );
                    outcomes.push(outcome);
                }
            }
        }
        running = still;
    }
    print_table(&outcomes);
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.passed).collect();
    if !failed.is_empty() {
        for o in &failed {
            println!(
                "    {}: see {} and fuzz/artifacts/{}/",
                o.target,
                o.log.display(),
                o.target
            );
        }
        bail!("{} target(s) found a failing input", failed.len());
    }
    Ok(())
}

/// `cargo fuzz build`'s and `run`'s flags: no sanitizer (the products are
/// safe Rust; coverage without AddressSanitizer runs several times faster)
/// and debug assertions on (overflow checks, `debug_assert!`).
const BUILD_FLAGS: &[&str] = &["--sanitizer", "none", "--debug-assertions"];

fn cargo_fuzz_command(fuzz_dir: &Path) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(fuzz_dir).args(["+nightly", "fuzz"]);
    cmd
}

/// Installs cargo-fuzz unless it is installed, saying so.
fn cargo_fuzz() -> Result<()> {
    if let Some(version) =
        run::output(Command::new("cargo").args(["+nightly", "fuzz", "--version"]))
    {
        println!("    {version} is installed");
        return Ok(());
    }
    println!(
        "    cargo-fuzz is not installed; installing {CARGO_FUZZ_VERSION} (cargo install cargo-fuzz --locked)"
    );
    run::checked(Command::new("cargo").args([
        "install",
        "cargo-fuzz",
        "--version",
        CARGO_FUZZ_VERSION,
        "--locked",
    ]))
}

/// The target names: `fuzz/fuzz_targets/*.rs`.
fn targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let dir = fuzz_dir.join("fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".rs"))
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// The dictionary of a target: what its inputs are made of.
fn dictionary(target: &str) -> &'static str {
    match target {
        "smtp_session" => "smtp.dict",
        "feedback_report" => "mime.dict",
        "webhook_url" | "tracking_hostname" => "url.dict",
        "ingress_router" | "console_session" | "idempotency_if_match" | "log_cursor" => "http.dict",
        "release_verify" => "toml.dict",
        _ => "json.dict",
    }
}

/// Starts one target: new inputs go to `target/fuzz-corpus/TARGET` (the
/// kept corpus in `fuzz/corpus/TARGET` is read, never written), crashes to
/// `fuzz/artifacts/TARGET/`.
fn start(root: &Path, target: &str, seconds: u64, log: &Path) -> Result<Child> {
    let fuzz_dir = root.join("fuzz");
    let scratch = root.join("target/fuzz-corpus").join(target);
    let artifacts = fuzz_dir.join("artifacts").join(target);
    for dir in [&scratch, &artifacts] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = cargo_fuzz_command(&fuzz_dir);
    cmd.args(["run"])
        .args(BUILD_FLAGS)
        .arg(target)
        .arg(&scratch)
        .arg(fuzz_dir.join("corpus").join(target))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!(
            "-dict={}",
            fuzz_dir.join("dict").join(dictionary(target)).display()
        ))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .args(["-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1"])
        .stdout(out.try_clone()?)
        .stderr(out);
    cmd.spawn()
        .with_context(|| format!("cannot start `{}`", run::display(&cmd)))
}

/// libFuzzer's final figures from a run's log.
fn read_outcome(target: &str, passed: bool, started: Instant, log: PathBuf) -> Outcome {
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let executions = text
        .lines()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|n| n.trim().parse().ok());
    let coverage = text.lines().rev().find_map(|line| {
        let field = |name: &str| {
            line.split_whitespace()
                .skip_while(|w| *w != name)
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok())
        };
        Some((field("cov:")?, field("ft:")?))
    });
    Outcome {
        target: target.to_owned(),
        passed,
        seconds: started.elapsed().as_secs(),
        executions,
        coverage,
        log,
    }
}

fn print_table(outcomes: &[Outcome]) {
    println!();
    println!("| target | seconds | executions | coverage (cov / ft) | result |");
    println!("|---|---|---|---|---|");
    for o in outcomes {
        let show = |v: Option<u64>| v.map_or("?".to_owned(), |n| n.to_string());
        println!(
            "| {} | {} | {} | {} | {} |",
            o.target,
            o.seconds,
            show(o.executions),
            o.coverage
                .map_or("?".to_owned(), |(cov, ft)| format!("{cov} / {ft}")),
            if o.passed {
                "no finding"
            } else {
                "failing input"
            }
        );
    }
}

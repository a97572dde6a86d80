//! `umami-fake`: runs the Umami-compatible provider fake as a process.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use umami_fake::{FakeConfig, ResponseShape, UmamiFake};

/// An Umami-compatible analytics provider fake (loopback test tool).
#[derive(Parser)]
#[command(name = "umami-fake", version)]
struct Cli {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:3300")]
    listen: SocketAddr,
    /// Credential required on /api/* (Bearer or x-umami-api-key).
    #[arg(long, env = "UMAMI_FAKE_SECRET", hide_env_values = true)]
    secret: String,
    /// Response shape: v2, v3 or v3.0.0-postgres.
    #[arg(long, default_value = "v3")]
    shape: ResponseShape,
    /// Behave like a non-admin account (401 for missing or foreign websites).
    #[arg(long)]
    non_admin: bool,
    /// Login name for /api/auth/login.
    #[arg(long, default_value = "admin")]
    username: String,
    /// Password for /api/auth/login.
    #[arg(
        long,
        env = "UMAMI_FAKE_PASSWORD",
        hide_env_values = true,
        default_value = "umami"
    )]
    password: String,
    /// Keep websites and page views in this JSON file: loaded at start (if
    /// it exists), saved after every change. Without it, data is in memory only.
    #[arg(long, env = "UMAMI_FAKE_DATA_FILE")]
    data_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("UMAMI_FAKE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    anyhow::ensure!(!cli.secret.is_empty(), "--secret must not be empty");
    let config = FakeConfig {
        secret: cli.secret,
        username: cli.username,
        password: cli.password,
        shape: cli.shape,
        admin: !cli.non_admin,
        ..FakeConfig::new(String::new())
    };
    let fake = match &cli.data_file {
        Some(path) => UmamiFake::with_data_file(config, path)?,
        None => UmamiFake::new(config),
    };
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cli.listen))?;
    println!("umami-fake listening on http://{}", listener.local_addr()?);
    if let Some(path) = &cli.data_file {
        println!(
            "data file {} ({} websites, {} page views)",
            path.display(),
            fake.websites().len(),
            fake.events().len()
        );
    }
    tokio::select! {
        served = fake.serve(listener) => served?,
        () = stop_requested() => {}
    }
    Ok(())
}

/// Ctrl-C or SIGTERM. Every change is already in the data file, so stopping
/// here loses nothing.
async fn stop_requested() {
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

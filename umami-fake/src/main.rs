//! `umami-fake`: runs the Umami-compatible provider fake as a process.

use std::net::SocketAddr;

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(!cli.secret.is_empty(), "--secret must not be empty");
    let config = FakeConfig {
        secret: cli.secret,
        username: cli.username,
        password: cli.password,
        shape: cli.shape,
        admin: !cli.non_admin,
        ..FakeConfig::new(String::new())
    };
    let listener = tokio::net::TcpListener::bind(cli.listen).await?;
    println!("umami-fake listening on http://{}", listener.local_addr()?);
    UmamiFake::new(config).serve(listener).await?;
    Ok(())
}

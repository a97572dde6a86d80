//! `GET /analytics` over 1,000,000 emails: seeds one domain of a tenant
//! with 1,000,000 emails spread over the last 90 days (one bulk statement
//! per 100,000, through the same triggers that count every write), then
//! times the service's analytics call for 90 days (the path `GET
//! /analytics` runs, without HTTP) and, as the baseline from the same run,
//! a trivial indexed read (the domain by id, which analytics also does).
//! Prints p50/p99 of each and the ratio; the target is p99 <= 20 ms.
//!
//! Environment: MAIL_BENCH_EMAILS (default 1000000), MAIL_BENCH_CALLS
//! (default 500), MAIL_BENCH_ONLY (`sqlite` or `postgres`),
//! MAIL_TEST_DATABASE_URL (PostgreSQL, default
//! postgres://postgres@127.0.0.1:5432/test; a schema of its own, dropped
//! afterwards).

// The benchmarks share `support`; this one starts no server process.
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use mail_service::model::Permission;
use mail_service::model::Principal;
use mail_service::service::{AnalyticsQuery, Caller, MailService};
use mail_service::store::StorageConfig;

const DAY_MS: i64 = 86_400_000;
const CHUNK: i64 = 100_000;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].as_secs_f64() * 1000.0
}

/// The INSERT of emails `lo..=hi` (ids offset), spread over 90 days before
/// `now`, mostly sent, some failed or suppressed. `{rows}` is the row
/// source of the backend.
fn seed_sql(rows: &str, tenant: i64, key: i64, now: i64) -> String {
    format!(
        "INSERT INTO emails (id, tenant_id, api_key_id, status, revision, from_addr, to_addrs, subject, payload, message_id, created_at, updated_at, from_domain) \
         SELECT 8000000000000 + i, {tenant}, {key}, \
           CASE i % 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'suppressed' ELSE 'sent' END, 2, \
           'Bench <bench@example.com>', '[\"rcpt@example.com\"]', 'Load', '{{}}', '<m@example.com>', \
           {now} - (i % 90) * {DAY_MS} - (i % 3600000), {now} - (i % 90) * {DAY_MS} - (i % 3600000), 'example.com' \
         FROM {rows}"
    )
}

/// Runs one seeding statement on a connection of the benchmark's own (the
/// service is idle meanwhile).
async fn seed(storage: &StorageConfig, sql: &str) {
    use sqlx::Connection;
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    match storage {
        StorageConfig::Sqlite { path, .. } => {
            let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
        StorageConfig::Postgres { url, schema, .. } => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            if let Some(schema) = schema {
                sqlx::query(sqlx::AssertSqlSafe(format!("SET search_path TO {schema}")))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
    }
}

async fn run(label: &str, storage: StorageConfig, dir: &std::path::Path) {
    let emails = support::env_or("MAIL_BENCH_EMAILS", 1_000_000) as i64;
    let calls = support::env_or("MAIL_BENCH_CALLS", 500) as usize;
    let Some((store, service, key, _)) =
        support::bench_tenant(label, &storage, dir, "analytics").await
    else {
        return;
    };
    let caller = Caller {
        principal: Principal {
            tenant_id: key.tenant_id,
            api_key_id: key.id,
            permission: Permission::FullAccess,
            rate_limit_per_minute: support::RATE_LIMIT,
        },
        request_id: 0,
    };
    let domain = service
        .mark_domain_verified("bench", "example.com")
        .await
        .unwrap();
    let now = service.now_ms();
    let started = Instant::now();
    let mut lo = 1;
    while lo <= emails {
        let hi = (lo + CHUNK - 1).min(emails);
        let sql = match &storage {
            StorageConfig::Sqlite { .. } => format!(
                "WITH RECURSIVE n(i) AS (SELECT {lo} UNION ALL SELECT i + 1 FROM n WHERE i < {hi}) {}",
                seed_sql("n", key.tenant_id, key.id, now)
            ),
            StorageConfig::Postgres { .. } => seed_sql(
                &format!("generate_series({lo}::bigint, {hi}::bigint) AS i"),
                key.tenant_id,
                key.id,
                now,
            ),
        };
        seed(&storage, &sql).await;
        println!(
            "{label:<9} seeded {hi:>9} of {emails} emails ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
        lo = hi + 1;
    }
    let query = AnalyticsQuery {
        domain_id: Some(domain.id.to_string()),
        days: Some("90".into()),
    };
    let answer = service.analytics(&caller, &query).await.unwrap();
    assert_eq!(
        answer.totals.accepted, emails,
        "the aggregates count every seeded email"
    );
    let time = |service: &MailService| {
        let service = service.clone();
        let caller = caller.clone();
        let query = query.clone();
        async move {
            let mut analytics = Vec::with_capacity(calls);
            let mut baseline = Vec::with_capacity(calls);
            for _ in 0..calls {
                let t = Instant::now();
                service.analytics(&caller, &query).await.unwrap();
                analytics.push(t.elapsed());
                let t = Instant::now();
                service.domain(&caller, domain.id).await.unwrap();
                baseline.push(t.elapsed());
            }
            analytics.sort();
            baseline.sort();
            (analytics, baseline)
        }
    };
    let (analytics, baseline) = time(&service).await;
    let (a50, a99) = (percentile(&analytics, 0.5), percentile(&analytics, 0.99));
    let (b50, b99) = (percentile(&baseline, 0.5), percentile(&baseline, 0.99));
    println!(
        "{label:<9} analytics, 90 days over {emails} emails: p50 {a50:.3} ms  p99 {a99:.3} ms  ({calls} calls; target p99 <= 20 ms: {})",
        if a99 <= 20.0 { "met" } else { "NOT met" }
    );
    println!(
        "{label:<9} baseline, one domain read by id:       p50 {b50:.3} ms  p99 {b99:.3} ms  (analytics / baseline p99: {:.1}x)",
        a99 / b99
    );
    store.close().await;
}

#[tokio::main]
async fn main() {
    let only = std::env::var("MAIL_BENCH_ONLY").ok();
    let wanted = |kind: &str| only.as_deref().is_none_or(|o| o == kind);
    let dir = tempfile::tempdir().unwrap();
    if wanted("sqlite") {
        run(
            "sqlite",
            StorageConfig::sqlite(dir.path().join("mail.db")),
            dir.path(),
        )
        .await;
    }
    if wanted("postgres") {
        let pg = support::BenchSchema::new();
        let pg_dir = tempfile::tempdir().unwrap();
        run("postgres", pg.storage(4), pg_dir.path()).await;
        pg.drop().await;
    }
}

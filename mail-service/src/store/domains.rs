//! Sending domains: their records and statuses, the DKIM key, and the
//! background checks' bookkeeping.

use super::*;
use crate::model::{Domain, DomainStatus, suppression_key};
use rusqlite::OptionalExtension;

/// The columns of `Domain`, then the rest of the query.
macro_rules! select_domain {
    ($rest:literal) => {
        concat!(
            "SELECT id, name, return_path, dkim_selector, status, records, verified_at, verify_until, checked_at, created_at FROM domains ",
            $rest
        )
    };
}

/// A domain to store.
#[derive(Debug, Clone)]
pub struct NewDomain {
    pub id: i64,
    pub tenant_id: i64,
    pub name: String,
    pub return_path: String,
    pub dkim_selector: String,
    /// PKCS#8 DER, base64.
    pub dkim_private_key: String,
    pub records: String,
    pub created_at: i64,
}

/// The result of a check.
#[derive(Debug, Clone)]
pub struct DomainCheck {
    pub status: DomainStatus,
    pub records: String,
    pub verified_at: Option<i64>,
    pub verify_until: Option<i64>,
}

/// What a send needs of its `from` domain, in one read: whether it may
/// send, and what signs its mail.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SendingDomain {
    pub id: i64,
    pub status: DomainStatus,
    pub verified_at: Option<i64>,
    #[sqlx(flatten)]
    pub key: DkimKey,
}

/// What signs a verified domain's mail.
#[derive(Clone, sqlx::FromRow)]
pub struct DkimKey {
    pub name: String,
    /// The return-path subdomain (`send`): the envelope sender's domain is
    /// `<return_path>.<name>`.
    pub return_path: String,
    pub dkim_selector: String,
    /// PKCS#8 DER, base64.
    pub dkim_private_key: String,
}

impl std::fmt::Debug for DkimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DkimKey")
            .field("name", &self.name)
            .field("return_path", &self.return_path)
            .field("dkim_selector", &self.dkim_selector)
            .field("dkim_private_key", &"[redacted]")
            .finish()
    }
}

impl Store {
    /// Fails with `Conflict` when the tenant has a domain of that name.
    pub async fn create_domain(&self, d: &NewDomain) -> Result<(), Error> {
        let sealed_key = self
            .seal(
                &Slot::Dkim {
                    tenant_id: d.tenant_id,
                    domain_id: d.id,
                },
                &d.dkim_private_key,
            )
            .await?;
        self.write(
            Unit::one(Step::rows(
                "INSERT INTO domains (id, tenant_id, name, return_path, dkim_selector, dkim_private_key, status, records, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'not_started', $7, $8)",
                params![
                    d.id,
                    d.tenant_id,
                    &d.name,
                    &d.return_path,
                    &d.dkim_selector,
                    sealed_key,
                    &d.records,
                    d.created_at
                ],
            ))
            .conflict_means(format!("domain `{}` already exists", d.name)),
        )
        .await?;
        Ok(())
    }

    pub async fn domain(&self, tenant_id: i64, id: i64) -> Result<Option<Domain>, Error> {
        optional!(
            self,
            select_domain!("WHERE tenant_id = $1 AND id = $2"),
            tenant_id,
            id
        )
    }

    pub async fn domain_by_name(
        &self,
        tenant_id: i64,
        name: &str,
    ) -> Result<Option<Domain>, Error> {
        optional!(
            self,
            select_domain!("WHERE tenant_id = $1 AND name = $2"),
            tenant_id,
            name
        )
    }

    /// The tenant's domains, newest first, before `before_id`.
    pub async fn list_domains(
        &self,
        tenant_id: i64,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<Domain>, Error> {
        page!(
            self,
            select_domain!("WHERE tenant_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3"),
            tenant_id,
            before_id,
            limit
        )
    }

    /// Returns false when the tenant has no such domain.
    pub async fn delete_domain(&self, tenant_id: i64, id: i64) -> Result<bool, Error> {
        let deleted = self
            .write_one(Step::rows(
                "DELETE FROM domains WHERE tenant_id = $1 AND id = $2",
                params![tenant_id, id],
            ))
            .await?;
        Ok(deleted == 1)
    }

    /// Starts (or restarts) verification: `pending` until the first check,
    /// retried in the background until `verify_until`.
    pub async fn request_verification(
        &self,
        tenant_id: i64,
        id: i64,
        verify_until: i64,
    ) -> Result<bool, Error> {
        let changed = self
            .write_one(Step::rows(
                "UPDATE domains SET verify_until = $1, checked_at = NULL, \
                 status = CASE WHEN status = 'not_started' THEN 'pending' ELSE status END \
                 WHERE tenant_id = $2 AND id = $3",
                params![verify_until, tenant_id, id],
            ))
            .await?;
        Ok(changed == 1)
    }

    /// Takes the check of a domain for this node: moves `checked_at` from
    /// what the caller read to `now`; false when another node took it.
    pub async fn take_domain_check(
        &self,
        id: i64,
        read_checked_at: Option<i64>,
        now: i64,
    ) -> Result<bool, Error> {
        let changed = self
            .write_one(Step::rows(
                "UPDATE domains SET checked_at = $1 WHERE id = $2 AND checked_at IS NOT DISTINCT FROM $3",
                params![now, id, read_checked_at],
            ))
            .await?;
        Ok(changed == 1)
    }

    /// Stores a check's outcome and, in the same unit, its event (type
    /// and `data`) when there is one; nothing when the domain was deleted
    /// meanwhile.
    pub async fn record_domain_check(
        &self,
        tenant_id: i64,
        id: i64,
        check: &DomainCheck,
        event: Option<(crate::model::EventType, String)>,
        now: i64,
    ) -> Result<(), Error> {
        let mut steps = vec![
            Step::rows(
                "UPDATE domains SET status = $1, records = $2, verified_at = $3, verify_until = $4 WHERE id = $5",
                params![
                    check.status.as_str(),
                    &check.records,
                    check.verified_at,
                    check.verify_until,
                    id
                ],
            )
            .stop_if_zero(),
        ];
        if let Some((event, data)) = event {
            steps.push(Self::record_event(tenant_id, event, &data, now));
        }
        self.write(Unit::new(steps)).await?;
        Ok(())
    }

    /// Domains under background verification whose last check is older
    /// than `checked_before`, or whose period has ended (their last check).
    pub async fn domains_to_check(
        &self,
        now: i64,
        checked_before: i64,
        limit: i64,
    ) -> Result<Vec<(i64, Domain)>, Error> {
        let rows: Vec<DomainRow> = on_db!(self, pool => {
            sqlx::query_as(
                "SELECT tenant_id, id, name, return_path, dkim_selector, status, records, verified_at, verify_until, checked_at, created_at FROM domains \
                 WHERE verify_until IS NOT NULL AND (checked_at IS NULL OR checked_at <= $1 OR verify_until <= $2) \
                 ORDER BY checked_at LIMIT $3",
            )
            .bind(checked_before)
            .bind(now)
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        Ok(rows.into_iter().map(|r| (r.tenant_id, r.domain)).collect())
    }

    /// The tenant's domain of that name as a send needs it: status and key
    /// (the only read of a private key).
    pub async fn sending_domain(
        &self,
        tenant_id: i64,
        name: &str,
    ) -> Result<Option<SendingDomain>, Error> {
        Ok(self
            .sending_domain_screened(tenant_id, name, &[])
            .await?
            .map(|(domain, _)| domain))
    }

    /// [`Self::sending_domain`], with those of `recipients` that are on the
    /// tenant's suppression list (as [`Self::suppressed_among`] finds
    /// them). On PostgreSQL the two reads are one statement: one round trip
    /// of a send's few.
    pub async fn sending_domain_screened(
        &self,
        tenant_id: i64,
        name: &str,
        recipients: &[String],
    ) -> Result<Option<(SendingDomain, Vec<String>)>, Error> {
        const SQL: &str = "SELECT id, status, verified_at, name, return_path, dkim_selector, dkim_private_key FROM domains WHERE tenant_id = $1 AND name = $2";
        let row: Option<(SendingDomain, Vec<String>)> = match &self.db {
            Db::Sqlite { inline, .. } => {
                let domain = inline.read(|conn| {
                    conn.prepare_cached(SQL)?
                        .query_row(rusqlite::params![tenant_id, name], |row| {
                            Ok(SendingDomain {
                                id: row.get(0)?,
                                status: sqlite_reads::parsed(row, 1)?,
                                verified_at: row.get(2)?,
                                key: DkimKey {
                                    name: row.get(3)?,
                                    return_path: row.get(4)?,
                                    dkim_selector: row.get(5)?,
                                    dkim_private_key: row.get(6)?,
                                },
                            })
                        })
                        .optional()
                })?;
                match domain {
                    Some(domain) => {
                        Some((domain, self.suppressed_among(tenant_id, recipients).await?))
                    }
                    None => None,
                }
            }
            Db::Postgres { reads, .. } => {
                let keys: Vec<String> = recipients.iter().map(|e| suppression_key(e)).collect();
                sqlx::query_as::<_, ScreenedDomain>(
                    "SELECT id, status, verified_at, name, return_path, dkim_selector, dkim_private_key, \
                     array(SELECT email_key FROM suppressions WHERE tenant_id = $1 AND email_key = ANY($3::text[])) AS listed \
                     FROM domains WHERE tenant_id = $1 AND name = $2",
                )
                .bind(tenant_id)
                .bind(name)
                .bind(keys)
                .fetch_optional(reads)
                .await?
                .map(|row| (row.domain, row.listed))
            }
        };
        let Some((mut domain, listed)) = row else {
            return Ok(None);
        };
        let slot = Slot::Dkim {
            tenant_id,
            domain_id: domain.id,
        };
        domain.key.dkim_private_key = self
            .open_secret(&slot, &domain.key.dkim_private_key)
            .await?
            .to_string();
        Ok(Some((domain, listed)))
    }

    /// Marks a domain verified without DNS (the operator's command for
    /// local use).
    pub async fn mark_domain_verified(
        &self,
        id: i64,
        records: &str,
        now: i64,
    ) -> Result<(), Error> {
        self.write_one(Step::rows(
            "UPDATE domains SET status = 'verified', records = $1, verified_at = $2, verify_until = NULL WHERE id = $3",
            params![records, now, id],
        ))
        .await?;
        Ok(())
    }
}

#[derive(sqlx::FromRow)]
struct ScreenedDomain {
    #[sqlx(flatten)]
    domain: SendingDomain,
    listed: Vec<String>,
}

#[derive(sqlx::FromRow)]
struct DomainRow {
    tenant_id: i64,
    #[sqlx(flatten)]
    domain: Domain,
}

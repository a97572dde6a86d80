//! One check of a domain's records: every lookup at the same time under one
//! deadline (the bound of a single lookup), the statuses stored, and a
//! `domain.updated` event when the status changed (the trigger of migration
//! 0017) or a verify request asked for the check. A verify request runs it
//! in the background, so no request waits for DNS.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hickory_resolver::proto::rr::RecordType;

use crate::error::Error;
use crate::model::{self, DnsRecord, Domain, DomainStatus, EventType, RecordStatus};
use crate::store::DomainCheck;

use super::MailService;
use super::dns::{Found, mx_values, txt_values};

/// The checks a verify request started on this node and that have not
/// finished (tests and a stopping node wait for them).
#[derive(Default)]
pub(super) struct ChecksInFlight {
    running: AtomicUsize,
    idle: tokio::sync::Notify,
}

/// Counts one check while it lives.
struct Running(Arc<ChecksInFlight>);

impl Running {
    fn start(checks: &Arc<ChecksInFlight>) -> Running {
        checks.running.fetch_add(1, Ordering::SeqCst);
        Running(checks.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl MailService {
    /// Checks `domain` in the background (its check was taken by the
    /// caller); a failure to store the outcome is logged, and the domain is
    /// checked again by the next background pass.
    pub(super) fn spawn_domain_check(&self, tenant_id: i64, domain: Domain) {
        let service = self.clone();
        let running = Running::start(&self.domain_checks);
        tokio::spawn(async move {
            let _running = running;
            if let Err(e) = service.check_domain(tenant_id, &domain, true).await {
                tracing::warn!(domain_id = domain.id, error = %e, "the domain check could not be stored");
            }
        });
    }

    /// Waits until no check started by a verify request on this node runs.
    pub async fn domain_checks_settled(&self) {
        loop {
            let idle = self.domain_checks.idle.notified();
            if self.domain_checks.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Looks every record up and stores the statuses; `announce`: record a
    /// `domain.updated` event even when the status stays (a verify request's
    /// check). Answers the new status.
    pub(super) async fn check_domain(
        &self,
        tenant_id: i64,
        domain: &Domain,
        announce: bool,
    ) -> Result<DomainStatus, Error> {
        let now = self.clock.now_ms();
        let retrying = domain.verify_until.is_some_and(|until| until > now);
        let mut records = domain.records.0.clone();
        let looked_up = look_up_records(self, &domain.name, &records).await;
        for (record, status) in records.iter_mut().zip(looked_up) {
            record.status = match status {
                RecordStatus::Failed if retrying => RecordStatus::Pending,
                other => other,
            };
        }
        let mut status = model::domain_status(&records, retrying);
        if status != DomainStatus::Verified && domain.verified_at.is_some() && retrying {
            // A verified domain whose records vanished: still sending while
            // it is retried.
            status = DomainStatus::TemporaryFailure;
        }
        let verified_at = match status {
            DomainStatus::Verified => Some(domain.verified_at.unwrap_or(now)),
            DomainStatus::TemporaryFailure => domain.verified_at,
            _ => None,
        };
        let verify_until = match status {
            DomainStatus::Verified => None,
            _ if retrying => domain.verify_until,
            _ => None,
        };
        // A change of status records `domain.updated` by trigger (migration
        // 0017, shaped by 0026); a verify request's check announces its
        // outcome also when the status stayed.
        let event = (announce && status == domain.status).then(|| {
            let checked = Domain {
                status,
                records: model::JsonText(records.clone()),
                ..domain.clone()
            };
            (
                EventType::DomainUpdated,
                model::domain_json(&checked).to_string(),
            )
        });
        self.store
            .record_domain_check(
                tenant_id,
                domain.id,
                &DomainCheck {
                    status,
                    records: serde_json::to_string(&records).unwrap_or_default(),
                    verified_at,
                    verify_until,
                },
                event,
                now,
            )
            .await?;
        Ok(status)
    }
}

/// Looks every record up at the same time, all under one deadline (the
/// bound of one lookup): a record whose answer is not in by then is a
/// `temporary_failure`. The statuses in the records' order.
async fn look_up_records(
    service: &MailService,
    domain: &str,
    records: &[DnsRecord],
) -> Vec<RecordStatus> {
    let deadline = tokio::time::Instant::now() + service.dns.bound();
    let mut lookups = tokio::task::JoinSet::new();
    for (i, record) in records.iter().enumerate() {
        let (service, domain, record) = (service.clone(), domain.to_string(), record.clone());
        lookups.spawn(async move {
            let status =
                tokio::time::timeout_at(deadline, check_record(&service, &domain, &record))
                    .await
                    .unwrap_or(RecordStatus::TemporaryFailure);
            (i, status)
        });
    }
    // A lookup that panicked or outlived the deadline: temporary.
    let mut out = vec![RecordStatus::TemporaryFailure; records.len()];
    while let Some(done) = lookups.join_next().await {
        if let Ok((i, status)) = done {
            out[i] = status;
        }
    }
    out
}

/// Whether one record is published as it must be.
async fn check_record(service: &MailService, domain: &str, record: &DnsRecord) -> RecordStatus {
    let fqdn = format!("{}.{domain}", record.name);
    let record_type = if record.record_type == "MX" {
        RecordType::MX
    } else {
        RecordType::TXT
    };
    let data = match service.dns.lookup(&fqdn, record_type).await {
        Found::Temporary(_) => return RecordStatus::TemporaryFailure,
        Found::Nothing => return RecordStatus::Failed,
        Found::Records(data) => data,
    };
    let ok = match (record.record.as_str(), record_type) {
        (_, RecordType::MX) => mx_values(&data)
            .iter()
            .any(|(_, exchange)| exchange.eq_ignore_ascii_case(&record.value)),
        ("SPF", _) => {
            let include = record
                .value
                .split_whitespace()
                .find(|t| t.starts_with("include:"))
                .unwrap_or_default()
                .to_ascii_lowercase();
            txt_values(&data).iter().any(|v| {
                let v = v.to_ascii_lowercase();
                v.starts_with("v=spf1") && v.split_whitespace().any(|t| t == include)
            })
        }
        ("DKIM", _) => {
            let wanted = tag(&record.value, "p").unwrap_or_default();
            txt_values(&data)
                .iter()
                .any(|v| !wanted.is_empty() && tag(v, "p").as_deref() == Some(wanted.as_str()))
        }
        _ => txt_values(&data)
            .iter()
            .any(|v| v.trim_start().to_ascii_lowercase().starts_with("v=dmarc1")),
    };
    if ok {
        RecordStatus::Verified
    } else {
        RecordStatus::Failed
    }
}

/// The value of tag `name` in a `k=v; k=v` record, whitespace removed.
fn tag(record: &str, name: &str) -> Option<String> {
    record.split(';').find_map(|part| {
        let (k, v) = part.split_once('=')?;
        (k.trim() == name).then(|| v.chars().filter(|c| !c.is_whitespace()).collect())
    })
}

//! `GET /analytics?domain_id=ID&days=7|30|90`: totals and a zero-filled
//! per-day (UTC) series of a domain's email events, from the aggregates
//! kept on write.

use serde::Serialize;

use crate::error::Error;

use super::{Caller, MailService};

/// The periods one may ask for.
pub const ANALYTICS_DAYS: &[i64] = &[7, 30, 90];
/// The events counted, in answer order.
pub const ANALYTICS_EVENTS: &[&str] = &[
    "accepted",
    "sent",
    "failed",
    "unknown",
    "suppressed",
    "scheduled",
    "canceled",
    "delivered",
    "delivery_delayed",
    "bounced",
    "complained",
];
const DAY_MS: i64 = 86_400_000;

/// Raw query of `GET /analytics`, before checks.
#[derive(Debug, Clone, Default)]
pub struct AnalyticsQuery {
    pub domain_id: Option<String>,
    pub days: Option<String>,
}

/// The counts of one day, or of the period.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EventCounts {
    pub accepted: i64,
    pub sent: i64,
    pub failed: i64,
    pub unknown: i64,
    pub suppressed: i64,
    pub scheduled: i64,
    pub canceled: i64,
    /// Feedback events, one per recipient a report is about: delivery
    /// reports (`delivered`, `delivery_delayed`, `bounced`) and complaints.
    pub delivered: i64,
    pub delivery_delayed: i64,
    pub bounced: i64,
    pub complained: i64,
}

impl EventCounts {
    fn add(&mut self, status: &str, n: i64) {
        match status {
            "accepted" => self.accepted += n,
            "sent" => self.sent += n,
            "failed" => self.failed += n,
            "unknown" => self.unknown += n,
            "suppressed" => self.suppressed += n,
            "scheduled" => self.scheduled += n,
            "canceled" => self.canceled += n,
            "delivered" => self.delivered += n,
            "delivery_delayed" => self.delivery_delayed += n,
            "bounced" => self.bounced += n,
            "complained" => self.complained += n,
            _ => {}
        }
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DaySeries {
    /// The UTC day, `YYYY-MM-DD`.
    pub date: String,
    #[serde(flatten)]
    pub counts: EventCounts,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Analytics {
    /// Always `analytics`.
    pub object: &'static str,
    pub domain_id: String,
    pub domain: String,
    pub days: i64,
    /// First and last day of the series (UTC, inclusive; the last is today).
    pub from: String,
    pub to: String,
    pub totals: EventCounts,
    /// One entry per day, oldest first, zero-filled.
    pub series: Vec<DaySeries>,
}

impl MailService {
    pub async fn analytics(
        &self,
        caller: &Caller,
        query: &AnalyticsQuery,
    ) -> Result<Analytics, Error> {
        let domain_id = match query.domain_id.as_deref() {
            None => {
                return Err(Error::MissingField {
                    field: "domain_id".into(),
                });
            }
            Some(raw) => match crate::id::parse_id(raw) {
                crate::id::ParsedId::Id(id) => id,
                _ => {
                    return Err(Error::validation(
                        "domain_id",
                        format!("must match {}", crate::id::ID_PATTERN),
                    ));
                }
            },
        };
        let days = match query.days.as_deref() {
            None => 7,
            Some(raw) => match raw.parse::<i64>() {
                Ok(d) if ANALYTICS_DAYS.contains(&d) => d,
                _ => return Err(Error::validation("days", "must be 7, 30 or 90")),
            },
        };
        let domain = self.domain(caller, domain_id).await?;
        let today = self.clock.now_ms().div_euclid(DAY_MS);
        let first = today - days + 1;
        let rows = self
            .store
            .day_counts(caller.principal.tenant_id, &domain.name, first, today)
            .await?;
        let mut per_day = vec![EventCounts::default(); days as usize];
        let mut totals = EventCounts::default();
        for row in rows {
            if let Some(slot) = usize::try_from(row.day - first)
                .ok()
                .and_then(|i| per_day.get_mut(i))
            {
                slot.add(&row.status, row.count);
                totals.add(&row.status, row.count);
            }
        }
        let date = |day: i64| crate::clock::rfc3339(day * DAY_MS)[..10].to_string();
        Ok(Analytics {
            object: "analytics",
            domain_id: domain.id.to_string(),
            domain: domain.name,
            days,
            from: date(first),
            to: date(today),
            totals,
            series: per_day
                .into_iter()
                .enumerate()
                .map(|(i, counts)| DaySeries {
                    date: date(first + i as i64),
                    counts,
                })
                .collect(),
        })
    }
}

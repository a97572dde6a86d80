//! `GET /emails/metrics`: Resend's email metrics, in the shape its SDKs
//! read, served from the per-day aggregates `GET /analytics` reads (no
//! second bookkeeping). The aggregates are per sending domain and UTC day,
//! so the granularity is `daily`, the time zone `UTC`, and the dimensions
//! `period` and `domain`; what they cannot answer is refused naming the
//! parameter.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Error;

use super::{Caller, MailService};

const DAY_MS: i64 = 86_400_000;
/// The longest range one may ask for, in days (as `/analytics`' longest).
pub const MAX_METRICS_DAYS: i64 = 90;

/// The metrics served, Resend's name → the aggregate's status. Resend's
/// other metrics (opens, clicks, unsubscribes, the bounce kinds, rates)
/// are not counted here.
pub const METRICS: &[(&str, &str)] = &[
    ("received", "accepted"),
    ("sent", "sent"),
    ("failed", "failed"),
    ("suppressed", "suppressed"),
    ("delivered", "delivered"),
    ("delivery_delayed", "delivery_delayed"),
    ("bounced", "bounced"),
    ("complained", "complained"),
];

/// Raw query of `GET /emails/metrics`, before checks.
#[derive(Debug, Clone, Default)]
pub struct MetricsQuery {
    pub start_date: Option<String>,
    pub end_date: Option<String>,
    pub timezone: Option<String>,
    pub granularity: Option<String>,
    pub metrics: Option<String>,
    pub dimensions: Option<String>,
    pub domain_id: Option<String>,
    pub email_id: Option<String>,
    pub broadcast_id: Option<String>,
}

/// The answer, in the shape of Resend's.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EmailMetrics {
    /// Always `metrics`.
    pub object: &'static str,
    /// First and last day (UTC, inclusive), `YYYY-MM-DD`.
    pub start_date: String,
    pub end_date: String,
    pub metrics: Vec<&'static str>,
    pub dimensions: Vec<&'static str>,
    /// Always `daily`.
    pub granularity: &'static str,
    /// Each metric over the whole range.
    #[schema(value_type = Object)]
    pub totals: BTreeMap<&'static str, i64>,
    /// One row per combination of the dimensions (`period`: the day;
    /// `domain`: `domain_id` and `domain_name`) with the metrics; absent
    /// without dimensions.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub data: Option<Vec<serde_json::Map<String, serde_json::Value>>>,
}

impl MailService {
    pub async fn email_metrics(
        &self,
        caller: &Caller,
        query: &MetricsQuery,
    ) -> Result<EmailMetrics, Error> {
        let today = self.clock.now_ms().div_euclid(DAY_MS);
        let end = match &query.end_date {
            None => today,
            Some(text) => day_of("end_date", text)?,
        };
        let start = match &query.start_date {
            None => end - 6,
            Some(text) => day_of("start_date", text)?,
        };
        if start > end {
            return Err(Error::validation(
                "start_date",
                "must not be after end_date",
            ));
        }
        if end - start + 1 > MAX_METRICS_DAYS {
            return Err(Error::validation(
                "start_date",
                format!("the range may span at most {MAX_METRICS_DAYS} days"),
            ));
        }
        if let Some(tz) = &query.timezone
            && tz != "UTC"
            && tz != "Etc/UTC"
        {
            return Err(Error::validation(
                "timezone",
                "must be `UTC` (the counts are kept per UTC day)",
            ));
        }
        if let Some(g) = &query.granularity
            && g != "daily"
        {
            return Err(Error::validation(
                "granularity",
                "must be `daily` (the counts are kept per day)",
            ));
        }
        for (field, what) in [
            (&query.email_id, "email_id"),
            (&query.broadcast_id, "broadcast_id"),
        ] {
            if field.is_some() {
                return Err(Error::validation(
                    what,
                    "is not served: the counts are kept per sending domain and day",
                ));
            }
        }
        let metrics: Vec<(&'static str, &'static str)> = match &query.metrics {
            None => METRICS.to_vec(),
            Some(list) => list
                .split(',')
                .map(|name| {
                    METRICS
                        .iter()
                        .find(|(m, _)| *m == name.trim())
                        .copied()
                        .ok_or_else(|| {
                            Error::validation(
                                "metrics",
                                format!(
                                    "`{name}` is not counted here (counted: {})",
                                    names(METRICS)
                                ),
                            )
                        })
                })
                .collect::<Result<_, _>>()?,
        };
        let mut by_period = false;
        let mut by_domain = false;
        for d in query.dimensions.iter().flat_map(|l| l.split(',')) {
            match d.trim() {
                "period" => by_period = true,
                "domain" => by_domain = true,
                other => {
                    return Err(Error::validation(
                        "dimensions",
                        format!(
                            "`{other}` is not served (served: period, domain; the counts are kept per sending domain and day)"
                        ),
                    ));
                }
            }
        }
        // The tenant's domains, to name them and to filter by id.
        let tenant = caller.principal.tenant_id;
        let domains = self.store.list_domains(tenant, None, 10_000).await?;
        let wanted: Option<Vec<String>> = match &query.domain_id {
            None => None,
            Some(list) => Some(
                list.split(',')
                    .map(|raw| {
                        let id = match crate::id::parse_id(raw.trim()) {
                            crate::id::ParsedId::Id(id) => id,
                            _ => {
                                return Err(Error::validation(
                                    "domain_id",
                                    format!("`{raw}` must match {}", crate::id::ID_PATTERN),
                                ));
                            }
                        };
                        domains
                            .iter()
                            .find(|d| d.id == id)
                            .map(|d| d.name.clone())
                            .ok_or_else(|| Error::NotFound {
                                what: format!("domain {id}"),
                            })
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        let rows = self.store.domain_day_counts(tenant, start, end).await?;
        let date = |day: i64| crate::clock::rfc3339(day * DAY_MS)[..10].to_string();
        let mut totals: BTreeMap<&'static str, i64> =
            metrics.iter().map(|(m, _)| (*m, 0)).collect();
        // (period, domain) → metric → count
        type Key = (Option<i64>, Option<String>);
        let mut groups: BTreeMap<Key, BTreeMap<&'static str, i64>> = BTreeMap::new();
        if by_period {
            for day in start..=end {
                if !by_domain {
                    groups.insert((Some(day), None), totals.clone());
                }
            }
        }
        for row in rows {
            if wanted.as_ref().is_some_and(|w| !w.contains(&row.domain)) {
                continue;
            }
            let Some((metric, _)) = metrics.iter().find(|(_, status)| *status == row.status) else {
                continue;
            };
            *totals.entry(*metric).or_default() += row.count;
            if by_period || by_domain {
                let key = (
                    by_period.then_some(row.day),
                    by_domain.then(|| row.domain.clone()),
                );
                let group = groups
                    .entry(key)
                    .or_insert_with(|| metrics.iter().map(|(m, _)| (*m, 0)).collect());
                *group.entry(*metric).or_default() += row.count;
            }
        }
        let data = (by_period || by_domain).then(|| {
            groups
                .into_iter()
                .map(|((day, domain), counts)| {
                    let mut row = serde_json::Map::new();
                    if let Some(day) = day {
                        row.insert("period".into(), date(day).into());
                    }
                    if let Some(name) = domain {
                        let id = domains
                            .iter()
                            .find(|d| d.name == name)
                            .map(|d| d.id.to_string());
                        row.insert("domain_id".into(), id.into());
                        row.insert("domain_name".into(), name.into());
                    }
                    for (m, n) in counts {
                        row.insert(m.into(), n.into());
                    }
                    row
                })
                .collect()
        });
        let mut dimensions = Vec::new();
        if by_period {
            dimensions.push("period");
        }
        if by_domain {
            dimensions.push("domain");
        }
        Ok(EmailMetrics {
            object: "metrics",
            start_date: date(start),
            end_date: date(end),
            metrics: metrics.iter().map(|(m, _)| *m).collect(),
            dimensions,
            granularity: "daily",
            totals,
            data,
        })
    }
}

fn names(list: &[(&str, &str)]) -> String {
    list.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
}

/// The UTC day number of `YYYY-MM-DD` or of an RFC 3339 date-time.
fn day_of(field: &str, text: &str) -> Result<i64, Error> {
    let invalid = || {
        Error::validation(
            field,
            format!("`{text}` is not a date (YYYY-MM-DD) or an RFC 3339 date-time"),
        )
    };
    if text.len() == 10 {
        let mut parts = text.split('-');
        let (Some(y), Some(m), Some(d), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let (Ok(y), Ok(m), Ok(d)) = (y.parse::<i32>(), m.parse::<u8>(), d.parse::<u8>()) else {
            return Err(invalid());
        };
        let month = time::Month::try_from(m).map_err(|_| invalid())?;
        let date = time::Date::from_calendar_date(y, month, d).map_err(|_| invalid())?;
        let epoch =
            time::Date::from_calendar_date(1970, time::Month::January, 1).map_err(|_| invalid())?;
        return Ok(i64::from(date.to_julian_day() - epoch.to_julian_day()));
    }
    let ms = crate::model::parse_scheduled_at(field, text).map_err(|_| invalid())?;
    Ok(ms.div_euclid(DAY_MS))
}

#[cfg(test)]
mod tests {
    use super::day_of;

    #[test]
    fn days_from_dates_and_date_times() {
        assert_eq!(day_of("d", "1970-01-02").unwrap(), 1);
        assert_eq!(day_of("d", "2024-01-01").unwrap(), 19_723);
        assert_eq!(day_of("d", "2024-01-01T23:59:59Z").unwrap(), 19_723);
        assert_eq!(day_of("d", "2024-01-02T00:30:00+01:00").unwrap(), 19_723);
        for bad in ["2024-13-01", "2024-02-30", "yesterday", "2024-1-01x"] {
            assert!(
                day_of("start_date", bad)
                    .unwrap_err()
                    .to_string()
                    .starts_with("start_date: ")
            );
        }
    }
}

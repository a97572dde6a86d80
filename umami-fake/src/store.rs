//! The fake's in-memory state: websites, recorded events and the switches
//! (fault mode, response shape, admin account) that tests flip at run time.
//! Knows nothing about HTTP.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The user id of the account that the configured secret belongs to.
pub const ACCOUNT_USER_ID: Uuid = Uuid::from_u128(0x5f1c_2d6e_0a4b_4c8d_9e7f_1a2b_3c4d_5e6f);
/// The user id that owns websites seeded as "foreign" (another customer's).
pub const OTHER_USER_ID: Uuid = Uuid::from_u128(0x7a9b_0c1d_2e3f_4a5b_8c6d_7e8f_9a0b_1c2d);

const HOUR_MS: i64 = 3_600_000;
pub(crate) const DAY_MS: i64 = 86_400_000;

/// Which generation of Umami's response shapes the fake answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseShape {
    /// Umami v2: `{"pageviews": {"value": 3, "prev": 1}, ...}`.
    #[serde(rename = "v2")]
    V2,
    /// Umami v3: flat numbers plus a `comparison` object.
    #[serde(rename = "v3")]
    V3,
    /// Umami v3.0.0 on PostgreSQL: like v3, but counts are strings and
    /// `bounces`/`totaltime` are `null` when there were no visits.
    #[serde(rename = "v3.0.0-postgres")]
    V3Postgres,
}

impl std::str::FromStr for ResponseShape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "v2" => Ok(Self::V2),
            "v3" => Ok(Self::V3),
            "v3.0.0-postgres" => Ok(Self::V3Postgres),
            other => Err(format!(
                "unknown response shape `{other}` (expected v2, v3 or v3.0.0-postgres)"
            )),
        }
    }
}

/// A fault applied to every `/api/*` request (never to the control API or
/// `/script.js`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Fault {
    /// Behave like a healthy Umami server.
    None,
    /// Wait `delay_ms` before answering normally.
    Slow { delay_ms: u64 },
    /// Answer HTTP 500.
    ServerError,
    /// Answer HTTP 401 `unauthorized`, as if the credentials were revoked.
    Unauthorized,
    /// Answer HTTP 200 with a truncated JSON body.
    MalformedJson,
}

/// A website as the fake stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Website {
    pub id: Uuid,
    pub name: String,
    pub domain: String,
    /// The user that created the website.
    pub owner: Uuid,
    pub created_at_ms: i64,
    pub updated_at_ms: Option<i64>,
}

/// One recorded page view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub website_id: Uuid,
    pub url: String,
    pub timestamp_ms: i64,
    /// Derived from the website, the User-Agent and the client IP.
    pub session_id: Uuid,
    /// The session's visit: a new one every UTC hour, like Umami's salt.
    pub visit_id: Uuid,
}

/// Aggregates of a time window, computed from recorded events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub pageviews: u64,
    pub visitors: u64,
    pub visits: u64,
    /// Visits with exactly one page view.
    pub bounces: u64,
    /// Sum of the visits' durations, in seconds.
    pub totaltime: u64,
}

/// Bucket size of a page-view series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Hour,
    Day,
}

/// One bucket of a series: its start (Unix ms), page views and distinct sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub start_ms: i64,
    pub pageviews: u64,
    pub sessions: u64,
}

#[derive(Debug)]
pub struct Store {
    pub websites: BTreeMap<Uuid, Website>,
    pub events: Vec<Event>,
    pub creates: u64,
    pub renames: u64,
    pub fault: Fault,
    pub shape: ResponseShape,
    pub admin: bool,
}

impl Store {
    pub fn new(shape: ResponseShape, admin: bool, fault: Fault) -> Self {
        Self {
            websites: BTreeMap::new(),
            events: Vec::new(),
            creates: 0,
            renames: 0,
            fault,
            shape,
            admin,
        }
    }

    /// The website if the account may see it: an admin sees every website, a
    /// non-admin only its own.
    pub fn visible_website(&self, id: Uuid) -> Option<&Website> {
        self.websites
            .get(&id)
            .filter(|w| self.admin || w.owner == ACCOUNT_USER_ID)
    }

    /// Records a page view. Answers `None` for an unknown website.
    pub fn record(
        &mut self,
        website_id: Uuid,
        url: &str,
        timestamp_ms: i64,
        user_agent: &str,
        ip: &str,
    ) -> Option<Event> {
        if !self.websites.contains_key(&website_id) {
            return None;
        }
        let session_id = Uuid::new_v5(&website_id, format!("{user_agent}|{ip}").as_bytes());
        let hour = timestamp_ms.div_euclid(HOUR_MS);
        let visit_id = Uuid::new_v5(&session_id, hour.to_string().as_bytes());
        let event = Event {
            website_id,
            url: url.to_owned(),
            timestamp_ms,
            session_id,
            visit_id,
        };
        self.events.push(event.clone());
        Some(event)
    }

    fn window(&self, website_id: Uuid, start_ms: i64, end_ms: i64) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(move |e| {
            e.website_id == website_id && e.timestamp_ms >= start_ms && e.timestamp_ms < end_ms
        })
    }

    /// Totals of the events in `[start_ms, end_ms)`.
    pub fn totals(&self, website_id: Uuid, start_ms: i64, end_ms: i64) -> Totals {
        let mut sessions = BTreeSet::new();
        // visit -> (page views, first, last)
        let mut visits: HashMap<Uuid, (u64, i64, i64)> = HashMap::new();
        let mut pageviews = 0;
        for e in self.window(website_id, start_ms, end_ms) {
            pageviews += 1;
            sessions.insert(e.session_id);
            let v = visits
                .entry(e.visit_id)
                .or_insert((0, e.timestamp_ms, e.timestamp_ms));
            v.0 += 1;
            v.1 = v.1.min(e.timestamp_ms);
            v.2 = v.2.max(e.timestamp_ms);
        }
        Totals {
            pageviews,
            visitors: sessions.len() as u64,
            visits: visits.len() as u64,
            bounces: visits.values().filter(|v| v.0 == 1).count() as u64,
            totaltime: visits.values().map(|v| ((v.2 - v.1) / 1000) as u64).sum(),
        }
    }

    /// Page views and sessions per bucket; buckets without events are absent,
    /// as on Umami.
    pub fn series(&self, website_id: Uuid, start_ms: i64, end_ms: i64, unit: Unit) -> Vec<Bucket> {
        let size = match unit {
            Unit::Hour => HOUR_MS,
            Unit::Day => DAY_MS,
        };
        let mut buckets: BTreeMap<i64, (u64, BTreeSet<Uuid>)> = BTreeMap::new();
        for e in self.window(website_id, start_ms, end_ms) {
            let b = buckets
                .entry(e.timestamp_ms.div_euclid(size) * size)
                .or_default();
            b.0 += 1;
            b.1.insert(e.session_id);
        }
        buckets
            .into_iter()
            .map(|(start_ms, (pageviews, sessions))| Bucket {
                start_ms,
                pageviews,
                sessions: sessions.len() as u64,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with_site() -> (Store, Uuid) {
        let mut store = Store::new(ResponseShape::V3, true, Fault::None);
        let id = Uuid::from_u128(1);
        store.websites.insert(
            id,
            Website {
                id,
                name: "Site".into(),
                domain: "example.com".into(),
                owner: ACCOUNT_USER_ID,
                created_at_ms: 0,
                updated_at_ms: None,
            },
        );
        (store, id)
    }

    #[test]
    fn totals_count_sessions_visits_bounces_and_time() {
        let (mut store, id) = store_with_site();
        let t0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;
        // Visitor A: two page views 30 s apart in one visit.
        store
            .record(id, "/", t0, "Mozilla/5.0 A", "192.0.2.1")
            .unwrap();
        store
            .record(id, "/b", t0 + 30_000, "Mozilla/5.0 A", "192.0.2.1")
            .unwrap();
        // Visitor A again two hours later: a second visit that bounces.
        store
            .record(id, "/", t0 + 2 * HOUR_MS, "Mozilla/5.0 A", "192.0.2.1")
            .unwrap();
        // Visitor B: one bounce.
        store
            .record(id, "/", t0 + 60_000, "Mozilla/5.0 B", "192.0.2.2")
            .unwrap();
        let totals = store.totals(id, t0, t0 + DAY_MS);
        assert_eq!(
            totals,
            Totals {
                pageviews: 4,
                visitors: 2,
                visits: 3,
                bounces: 2,
                totaltime: 30
            }
        );
        // The window is half-open.
        assert_eq!(store.totals(id, t0 + 1, t0 + 30_000).pageviews, 0);
    }

    #[test]
    fn unknown_website_records_nothing() {
        let (mut store, _) = store_with_site();
        assert!(
            store
                .record(Uuid::from_u128(2), "/", 0, "Mozilla/5.0", "192.0.2.1")
                .is_none()
        );
        assert!(store.events.is_empty());
    }

    #[test]
    fn series_leaves_days_without_traffic_out() {
        let (mut store, id) = store_with_site();
        let day0 = 1_700_000_000_000 - 1_700_000_000_000 % DAY_MS;
        store
            .record(id, "/", day0 + 5, "Mozilla/5.0 A", "192.0.2.1")
            .unwrap();
        store
            .record(id, "/", day0 + 2 * DAY_MS + 5, "Mozilla/5.0 A", "192.0.2.1")
            .unwrap();
        store
            .record(id, "/", day0 + 2 * DAY_MS + 9, "Mozilla/5.0 B", "192.0.2.2")
            .unwrap();
        let series = store.series(id, day0, day0 + 3 * DAY_MS, Unit::Day);
        assert_eq!(
            series,
            vec![
                Bucket {
                    start_ms: day0,
                    pageviews: 1,
                    sessions: 1
                },
                Bucket {
                    start_ms: day0 + 2 * DAY_MS,
                    pageviews: 2,
                    sessions: 2
                },
            ]
        );
    }
}

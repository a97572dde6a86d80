//! Tracking domains: the operator's settings for them (ingress target,
//! reserved hostnames, the challenge key) and one resumable state machine
//! per (project, hostname). Every step is one conditional write: a step
//! runs only from the step before it, so a process killed between steps
//! leaves the domain at the last step that completed, and running the
//! command again continues from there.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::access::bump_project;
use super::error::{Result, StateError};
use super::secrets::{Sealer, Slot};
use super::steps::{Step, TrackingRefusal};
use super::{State, now_secs};

/// The length of the host's challenge key: HMAC-SHA-256's block size.
pub const CHALLENGE_KEY_LEN: usize = 64;

/// The operator's settings for tracking domains (public: no key).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TrackingSettings {
    /// The provider's ingress host every tracking hostname's CNAME leads to.
    pub ingress_target: Option<String>,
    /// The console's host, always reserved.
    pub console_host: Option<String>,
    /// Further hostnames the platform keeps for itself.
    pub reserved: Vec<String>,
}

/// One tracking domain as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TrackingDomain {
    pub hostname: String,
    pub project_id: String,
    pub step: Step,
    /// The TXT value issued at `add` (public).
    pub challenge: String,
    /// The CNAME target at `add`.
    pub ingress_target: String,
    /// The last DNS verification's report (JSON), if any.
    pub dns_report: Option<serde_json::Value>,
    pub checked_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// When `remove` began on it, while that removal is unfinished: the
    /// domain is out of the desired routing until it finishes or `keep`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removal_started_at: Option<i64>,
}

/// One applied route: requests for `hostname` go to the provider origin
/// of `project_id` (the two exact paths only, see `tracking::ingress`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct TrackingRoute {
    pub hostname: String,
    pub project_id: String,
    pub provider_origin: String,
}

fn read_routes(conn: &Connection) -> Result<Vec<TrackingRoute>> {
    let mut statement = conn.prepare_cached(
        "SELECT hostname, project_id, provider_origin FROM tracking_routes ORDER BY hostname",
    )?;
    let routes = statement
        .query_map([], |r| {
            Ok(TrackingRoute {
                hostname: r.get(0)?,
                project_id: r.get(1)?,
                provider_origin: r.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(routes)
}

const DOMAIN_COLUMNS: &str = "hostname, project_id, step, challenge, ingress_target, dns_report, checked_at, created_at, updated_at, removal_started_at";

fn domain_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(TrackingDomain, String)> {
    let report: Option<String> = row.get(5)?;
    Ok((
        TrackingDomain {
            hostname: row.get(0)?,
            project_id: row.get(1)?,
            step: Step::Added,
            challenge: row.get(3)?,
            ingress_target: row.get(4)?,
            dns_report: report.and_then(|text| serde_json::from_str(&text).ok()),
            checked_at: row.get(6)?,
            created_at: row.get(7)?,
            updated_at: row.get(8)?,
            removal_started_at: row.get(9)?,
        },
        row.get(2)?,
    ))
}

fn with_step((mut domain, step): (TrackingDomain, String)) -> Result<TrackingDomain> {
    domain.step = Step::parse(&step).ok_or_else(|| TrackingRefusal::UnknownStep {
        hostname: domain.hostname.clone(),
        value: step,
    })?;
    Ok(domain)
}

fn read_domain(conn: &Connection, hostname: &str) -> Result<Option<TrackingDomain>> {
    conn.prepare_cached(&format!(
        "SELECT {DOMAIN_COLUMNS} FROM tracking_domains WHERE hostname = ?1"
    ))?
    .query_row([hostname], domain_row)
    .optional()?
    .map(with_step)
    .transpose()
}

/// The domain of `project` at `hostname`, or the refusal naming why not.
fn project_domain(conn: &Connection, project: &str, hostname: &str) -> Result<TrackingDomain> {
    match read_domain(conn, hostname)? {
        Some(domain) if domain.project_id == project => Ok(domain),
        Some(domain) => Err(TrackingRefusal::BoundElsewhere {
            hostname: hostname.into(),
            project: domain.project_id,
        }
        .into()),
        None => Err(TrackingRefusal::Unknown {
            hostname: hostname.into(),
            project: project.into(),
        }
        .into()),
    }
}

/// Moves `hostname` from `from` to `to` inside `tx`, or refuses with the
/// step it is at.
fn advance(
    tx: &Transaction<'_>,
    project: &str,
    hostname: &str,
    from: Step,
    to: Step,
) -> Result<()> {
    let domain = project_domain(tx, project, hostname)?;
    if domain.step != from {
        return Err(TrackingRefusal::OutOfOrder {
            hostname: hostname.into(),
            at: domain.step,
            needs: from,
        }
        .into());
    }
    tx.execute(
        "UPDATE tracking_domains SET step = ?3, updated_at = ?4
         WHERE hostname = ?1 AND project_id = ?2",
        params![hostname, project, to.as_str(), now_secs()],
    )?;
    Ok(())
}

impl State {
    pub fn tracking_settings(&self) -> Result<TrackingSettings> {
        let conn = self.conn();
        let row = conn
            .prepare_cached(
                "SELECT ingress_target, console_host, reserved FROM tracking_settings WHERE id = 1",
            )?
            .query_row([], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .optional()?;
        let Some((ingress_target, console_host, reserved)) = row else {
            return Ok(TrackingSettings::default());
        };
        Ok(TrackingSettings {
            ingress_target,
            console_host,
            reserved: serde_json::from_str(&reserved)
                .map_err(|e| StateError::Corrupt(format!("tracking_settings.reserved: {e}")))?,
        })
    }

    /// Replaces the settings; the challenge key is kept (or created).
    pub fn set_tracking_settings(&self, settings: &TrackingSettings) -> Result<()> {
        let reserved = serde_json::to_string(&settings.reserved)
            .map_err(|e| StateError::Corrupt(e.to_string()))?;
        self.write(|tx| {
            ensure_key(tx, &self.secrets)?;
            tx.execute(
                "UPDATE tracking_settings SET ingress_target = ?1, console_host = ?2, reserved = ?3
                 WHERE id = 1",
                params![settings.ingress_target, settings.console_host, reserved],
            )?;
            Ok(())
        })
    }

    /// The host's challenge key (created on first use). Crate-private: the
    /// key never leaves the host; the challenges made with it are public.
    pub(crate) fn tracking_challenge_key(&self) -> Result<Vec<u8>> {
        let existing = {
            let conn = self.conn();
            read_key(&conn, &self.secrets)?
        };
        match existing {
            Some(key) => Ok(key),
            None => self.write(|tx| ensure_key(tx, &self.secrets)),
        }
    }

    /// Stores a new domain at step `added`, or answers the one `project`
    /// already has there (running `add` again resumes); refuses a hostname
    /// bound to another project.
    pub fn add_tracking_domain(
        &self,
        project: &str,
        hostname: &str,
        challenge: &str,
        ingress_target: &str,
    ) -> Result<TrackingDomain> {
        self.write(|tx| {
            if let Some(existing) = read_domain(tx, hostname)? {
                if existing.project_id != project {
                    return Err(TrackingRefusal::BoundElsewhere {
                        hostname: hostname.into(),
                        project: existing.project_id,
                    }
                    .into());
                }
                return Ok(existing);
            }
            let now = now_secs();
            tx.execute(
                "INSERT INTO tracking_domains
                 (hostname, project_id, step, challenge, ingress_target, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                params![
                    hostname,
                    project,
                    Step::Added.as_str(),
                    challenge,
                    ingress_target,
                    now
                ],
            )?;
            read_domain(tx, hostname)?
                .ok_or_else(|| StateError::Corrupt(format!("tracking domain {hostname} vanished")))
        })
    }

    pub fn tracking_domain(&self, hostname: &str) -> Result<Option<TrackingDomain>> {
        read_domain(&self.conn(), hostname)
    }

    /// The domain of `project` at `hostname`, or why there is none.
    pub fn project_tracking_domain(&self, project: &str, hostname: &str) -> Result<TrackingDomain> {
        project_domain(&self.conn(), project, hostname)
    }

    /// Every tracking domain (of one project, if given), by hostname.
    pub fn tracking_domains(&self, project: Option<&str>) -> Result<Vec<TrackingDomain>> {
        let conn = self.conn();
        let mut statement = conn.prepare_cached(&format!(
            "SELECT {DOMAIN_COLUMNS} FROM tracking_domains
             WHERE ?1 IS NULL OR project_id = ?1 ORDER BY hostname"
        ))?;
        let rows = statement
            .query_map([project], domain_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter().map(with_step).collect()
    }

    /// Records a DNS verification's report; a verified report moves a
    /// domain at `added` to `verified` (later steps keep theirs).
    pub fn record_tracking_dns(
        &self,
        project: &str,
        hostname: &str,
        report: &serde_json::Value,
        verified: bool,
    ) -> Result<TrackingDomain> {
        self.write(|tx| {
            let domain = project_domain(tx, project, hostname)?;
            tx.execute(
                "UPDATE tracking_domains SET dns_report = ?2, checked_at = ?3 WHERE hostname = ?1",
                params![hostname, report.to_string(), now_secs()],
            )?;
            if verified && domain.step == Step::Added {
                advance(tx, project, hostname, Step::Added, Step::Verified)?;
            }
            read_domain(tx, hostname)?
                .ok_or_else(|| StateError::Corrupt(format!("tracking domain {hostname} vanished")))
        })
    }

    /// Moves a domain one step on (or back), refusing unless it is at `from`.
    pub fn advance_tracking_domain(
        &self,
        project: &str,
        hostname: &str,
        from: Step,
        to: Step,
    ) -> Result<()> {
        self.write(|tx| advance(tx, project, hostname, from, to))
    }

    /// `remove`'s first write: the domain is being removed, and from now
    /// on out of the desired routing (idempotent: a resumed removal keeps
    /// its first time).
    pub fn start_tracking_removal(&self, project: &str, hostname: &str) -> Result<()> {
        self.write(|tx| {
            project_domain(tx, project, hostname)?;
            tx.execute(
                "UPDATE tracking_domains SET removal_started_at = coalesce(removal_started_at, ?2)
                  WHERE hostname = ?1",
                params![hostname, now_secs()],
            )?;
            Ok(())
        })
    }

    /// `keep`: undoes a stopped removal; the domain is desired again (the
    /// next `apply` routes it). Answers whether a removal was under way.
    pub fn keep_tracking_domain(&self, project: &str, hostname: &str) -> Result<bool> {
        self.write(|tx| {
            let domain = project_domain(tx, project, hostname)?;
            if domain.removal_started_at.is_none() {
                return Ok(false);
            }
            tx.execute(
                "UPDATE tracking_domains SET removal_started_at = NULL, updated_at = ?2
                  WHERE hostname = ?1",
                params![hostname, now_secs()],
            )?;
            Ok(true)
        })
    }

    /// Removes a domain that is at `added` or `verified` (nothing routed or
    /// active is left behind); answers whether there was one.
    pub fn delete_tracking_domain(&self, project: &str, hostname: &str) -> Result<bool> {
        self.write(|tx| {
            let domain = match project_domain(tx, project, hostname) {
                Ok(domain) => domain,
                Err(StateError::Tracking(TrackingRefusal::Unknown { .. })) => return Ok(false),
                Err(other) => return Err(other),
            };
            if domain.step > Step::Verified {
                return Err(TrackingRefusal::OutOfOrder {
                    hostname: hostname.into(),
                    at: domain.step,
                    needs: Step::Verified,
                }
                .into());
            }
            tx.execute(
                "DELETE FROM tracking_domains WHERE hostname = ?1",
                [hostname],
            )?;
            Ok(true)
        })
    }
}

impl State {
    /// The applied routes, by hostname (cached until the next commit).
    pub fn tracking_routes(&self) -> Result<std::sync::Arc<[TrackingRoute]>> {
        self.cached(&self.routes, (), |_, _| {
            Ok(read_routes(&self.conn())?.into())
        })
    }

    /// Replaces the applied routes by `desired`, in one commit, if the
    /// applied ones are still `reviewed` (what the plan was computed
    /// against); every domain routed for the first time moves from
    /// `verified` to `routed`. `plan_id` names both in a refusal.
    pub fn apply_tracking_routes(
        &self,
        reviewed: &[TrackingRoute],
        desired: &[TrackingRoute],
        plan_id: &str,
    ) -> Result<()> {
        self.write(|tx| {
            let now_applied = read_routes(tx)?;
            if now_applied != reviewed {
                return Err(TrackingRefusal::PlanChanged {
                    reviewed: plan_id.into(),
                    now: "the applied routes moved".into(),
                }
                .into());
            }
            for route in desired {
                let domain = project_domain(tx, &route.project_id, &route.hostname)?;
                if domain.step < Step::Verified {
                    return Err(TrackingRefusal::OutOfOrder {
                        hostname: route.hostname.clone(),
                        at: domain.step,
                        needs: Step::Verified,
                    }
                    .into());
                }
            }
            tx.execute("DELETE FROM tracking_routes", [])?;
            let now = now_secs();
            for route in desired {
                tx.execute(
                    "INSERT INTO tracking_routes (hostname, project_id, provider_origin, applied_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![route.hostname, route.project_id, route.provider_origin, now],
                )?;
                tx.execute(
                    "UPDATE tracking_domains SET step = ?2, updated_at = ?3
                     WHERE hostname = ?1 AND step = ?4",
                    params![
                        route.hostname,
                        Step::Routed.as_str(),
                        now,
                        Step::Verified.as_str()
                    ],
                )?;
            }
            Ok(())
        })
    }

    /// `activate`: in one commit, the domain moves from `tls-ready` to
    /// `active` and the project's `tracking_origin` becomes `origin`
    /// (bumping the project's runtime generations).
    pub fn activate_tracking_domain(
        &self,
        project: &str,
        hostname: &str,
        origin: &str,
    ) -> Result<()> {
        self.write(|tx| {
            advance(tx, project, hostname, Step::TlsReady, Step::Active)?;
            set_origin(tx, project, Some(origin))
        })
    }

    /// `remove`'s first undo, in one commit: back from `active` to
    /// `tls-ready`, and the project's `tracking_origin` cleared (bumping
    /// its generations).
    pub fn deactivate_tracking_domain(&self, project: &str, hostname: &str) -> Result<()> {
        self.write(|tx| {
            advance(tx, project, hostname, Step::Active, Step::TlsReady)?;
            set_origin(tx, project, None)
        })
    }

    /// `remove`'s undoing of the routing, in one commit: the route goes and
    /// the domain steps back from `routed` or `tls-ready` to `verified`.
    pub fn unroute_tracking_domain(&self, project: &str, hostname: &str) -> Result<()> {
        self.write(|tx| {
            let domain = project_domain(tx, project, hostname)?;
            if !matches!(domain.step, Step::Routed | Step::TlsReady) {
                return Err(TrackingRefusal::OutOfOrder {
                    hostname: hostname.into(),
                    at: domain.step,
                    needs: Step::Routed,
                }
                .into());
            }
            tx.execute(
                "DELETE FROM tracking_routes WHERE hostname = ?1",
                [hostname],
            )?;
            tx.execute(
                "UPDATE tracking_domains SET step = ?2, updated_at = ?3 WHERE hostname = ?1",
                params![hostname, Step::Verified.as_str(), now_secs()],
            )?;
            Ok(())
        })
    }
}

fn set_origin(tx: &Transaction<'_>, project: &str, origin: Option<&str>) -> Result<()> {
    tx.execute(
        "INSERT INTO projects (project_id, tracking_origin) VALUES (?1, ?2)
         ON CONFLICT (project_id) DO UPDATE SET tracking_origin = excluded.tracking_origin",
        params![project, origin],
    )?;
    bump_project(tx, project)
}

/// The stored challenge key, opened. Its plain form is hex text (the form
/// older states kept it in).
fn read_key(conn: &Connection, sealer: &Sealer) -> Result<Option<Vec<u8>>> {
    let stored: Option<String> = conn
        .prepare_cached("SELECT challenge_key FROM tracking_settings WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    let Some(stored) = stored else {
        return Ok(None);
    };
    let text = sealer.open_text(conn, &Slot::Challenge, &stored)?;
    let key = hex::decode(text.trim())
        .map_err(|_| StateError::Corrupt("the tracking challenge key is not hex".into()))?;
    Ok(Some(key))
}

/// The settings row with a challenge key, created (sealed) if missing;
/// answers the key.
fn ensure_key(tx: &Transaction<'_>, sealer: &Sealer) -> Result<Vec<u8>> {
    if let Some(key) = read_key(tx, sealer)? {
        return Ok(key);
    }
    let mut key = vec![0u8; CHALLENGE_KEY_LEN];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut key);
    let sealed = sealer.seal(tx, &Slot::Challenge, hex::encode(&key).as_bytes())?;
    tx.execute(
        "INSERT INTO tracking_settings (id, challenge_key, reserved) VALUES (1, ?1, '[]')",
        [&sealed],
    )?;
    Ok(key)
}

//! The projects' bindings: where a named binding of a project goes, how the
//! host authenticates there, and the secret. The `bindings` table is the
//! only place a provider secret is stored, sealed under the master key
//! (`state::secrets`; an empty secret is stored empty); [`BindingInfo`] is
//! a binding without it.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::access::bump_project;
use super::error::Result;
use super::secrets::{Sealer, Slot};
use super::{State, now_secs};
use crate::secret::Secret;

/// How the host authenticates to a binding's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthStyle {
    /// `Authorization: Bearer <secret>`
    Bearer,
    /// `x-umami-api-key: <secret>` (Umami Cloud)
    UmamiApiKey,
}

impl AuthStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthStyle::Bearer => "bearer",
            AuthStyle::UmamiApiKey => "x-umami-api-key",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "bearer" => Some(AuthStyle::Bearer),
            "x-umami-api-key" => Some(AuthStyle::UmamiApiKey),
            _ => None,
        }
    }

    /// The request header that carries the secret.
    pub fn header(self) -> &'static str {
        match self {
            AuthStyle::Bearer => "authorization",
            AuthStyle::UmamiApiKey => "x-umami-api-key",
        }
    }
}

/// A project's binding: where a named binding goes and with what secret.
#[derive(Debug, Clone)]
pub struct Binding {
    pub project_id: String,
    pub name: String,
    pub origin: String,
    pub secret: Secret,
    pub auth_style: AuthStyle,
    pub timeout: Duration,
}

/// A binding without its secret, for `binding show` and the context.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BindingInfo {
    pub project_id: String,
    pub name: String,
    pub origin: String,
    pub auth_style: String,
    pub timeout_ms: u64,
    pub secret_set: bool,
    pub updated_at: i64,
}

const BINDING_COLUMNS: &str = "project_id, name, origin, secret, auth_style, timeout_ms";

impl State {
    /// Sets a binding (bumps the project's generations); answers it as
    /// stored, without its secret.
    pub fn set_binding(&self, binding: &Binding) -> Result<BindingInfo> {
        self.write(|tx| {
            let secret = match binding.secret.expose() {
                "" => String::new(),
                plain => self.secrets.seal(
                    tx,
                    &Slot::Binding {
                        project_id: binding.project_id.clone(),
                        name: binding.name.clone(),
                    },
                    plain.as_bytes(),
                )?,
            };
            tx.execute(
                "INSERT INTO bindings (project_id, name, origin, secret, auth_style, timeout_ms, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (project_id, name) DO UPDATE SET origin = excluded.origin,
                   secret = excluded.secret, auth_style = excluded.auth_style,
                   timeout_ms = excluded.timeout_ms, updated_at = excluded.updated_at",
                params![
                    binding.project_id,
                    binding.name,
                    binding.origin,
                    secret,
                    binding.auth_style.as_str(),
                    binding.timeout.as_millis() as i64,
                    now_secs()
                ],
            )?;
            bump_project(tx, &binding.project_id)?;
            Ok(tx
                .prepare_cached(&format!(
                    "SELECT {INFO_COLUMNS} FROM bindings WHERE project_id = ?1 AND name = ?2"
                ))?
                .query_row(params![binding.project_id, binding.name], info_row)?)
        })
    }

    /// A binding with its secret: for the HTTP capability only.
    pub(crate) fn binding(&self, project_id: &str, name: &str) -> Result<Option<Binding>> {
        let conn = self.conn();
        conn.prepare_cached(&format!(
            "SELECT {BINDING_COLUMNS} FROM bindings WHERE project_id = ?1 AND name = ?2"
        ))?
        .query_row(params![project_id, name], binding_row)
        .optional()?
        .map(|row| row.open(&conn, &self.secrets))
        .transpose()
    }

    /// Every secret of a project, for redacting guest output.
    pub(crate) fn project_secrets(&self, project_id: &str) -> Result<Vec<Secret>> {
        let bindings = project_bindings(&self.conn(), &self.secrets, project_id)?;
        Ok(bindings.into_iter().map(|binding| binding.secret).collect())
    }

    /// Bindings without secrets, of one project or of all.
    pub fn bindings(&self, project_id: Option<&str>) -> Result<Vec<BindingInfo>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {INFO_COLUMNS} FROM bindings
             WHERE ?1 IS NULL OR project_id = ?1 ORDER BY project_id, name"
        ))?;
        let rows = stmt.query_map([project_id], info_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

const INFO_COLUMNS: &str =
    "project_id, name, origin, auth_style, timeout_ms, length(secret) > 0, updated_at";

fn info_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<BindingInfo> {
    Ok(BindingInfo {
        project_id: r.get(0)?,
        name: r.get(1)?,
        origin: r.get(2)?,
        auth_style: r.get(3)?,
        timeout_ms: r.get::<_, i64>(4)? as u64,
        secret_set: r.get(5)?,
        updated_at: r.get(6)?,
    })
}

/// A binding as stored: its secret still sealed.
struct BindingRow {
    binding: Binding,
    sealed: String,
}

impl BindingRow {
    fn open(mut self, conn: &Connection, sealer: &Sealer) -> Result<Binding> {
        if !self.sealed.is_empty() {
            let slot = Slot::Binding {
                project_id: self.binding.project_id.clone(),
                name: self.binding.name.clone(),
            };
            self.binding.secret = Secret::new(sealer.open_text(conn, &slot, &self.sealed)?);
        }
        Ok(self.binding)
    }
}

fn binding_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<BindingRow> {
    let style: String = r.get(4)?;
    Ok(BindingRow {
        binding: Binding {
            project_id: r.get(0)?,
            name: r.get(1)?,
            origin: r.get(2)?,
            secret: Secret::new(""),
            auth_style: AuthStyle::parse(&style).unwrap_or(AuthStyle::Bearer),
            timeout: Duration::from_millis(r.get::<_, i64>(5)?.max(1) as u64),
        },
        sealed: r.get(3)?,
    })
}

pub(super) fn project_bindings(
    conn: &Connection,
    sealer: &Sealer,
    project_id: &str,
) -> Result<Vec<Binding>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {BINDING_COLUMNS} FROM bindings WHERE project_id = ?1 ORDER BY name"
    ))?;
    let rows = stmt
        .query_map([project_id], binding_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter().map(|row| row.open(conn, sealer)).collect()
}

//! Public per-project settings (no secrets): what the invocation context
//! reports to an extension.

use rusqlite::{Connection, OptionalExtension, params};

use super::State;
use super::access::bump_project;
use super::error::Result;

/// Public per-project settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProjectSettings {
    pub tracking_origin: Option<String>,
}

impl State {
    /// Sets or clears the project's public `tracking_origin` (bumps the
    /// project's generations).
    pub fn set_tracking_origin(&self, project_id: &str, origin: Option<&str>) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO projects (project_id, tracking_origin) VALUES (?1, ?2)
                 ON CONFLICT (project_id) DO UPDATE SET tracking_origin = excluded.tracking_origin",
                params![project_id, origin],
            )?;
            bump_project(tx, project_id)
        })
    }

    pub fn project_settings(&self, project_id: &str) -> Result<ProjectSettings> {
        project_settings(&self.conn(), project_id)
    }
}

pub(super) fn project_settings(conn: &Connection, project_id: &str) -> Result<ProjectSettings> {
    Ok(conn
        .prepare_cached("SELECT tracking_origin FROM projects WHERE project_id = ?1")?
        .query_row([project_id], |r| {
            Ok(ProjectSettings {
                tracking_origin: r.get(0)?,
            })
        })
        .optional()?
        .unwrap_or_default())
}

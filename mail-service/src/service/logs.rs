//! Request logs: written around every request, listed newest first with an
//! opaque cursor.

use crate::error::Error;
use crate::model::RequestLog;
use crate::store::LogFilter;

use super::page::{Page, PageRequest};
use super::{Caller, MailService};

pub const LOG_METHODS: &[&str] = &["GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"];

/// Raw query of `GET /logs`, before checks.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
    pub method: Option<String>,
    pub status: Option<String>,
}

/// A `GET /logs` query that passed its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedLogQuery {
    pub page: PageRequest,
    /// One of [`LOG_METHODS`].
    pub method: Option<String>,
    /// An HTTP status (100 to 599), or 0 for an unfinished request.
    pub status: Option<i64>,
}

impl LogQuery {
    /// Checks every parameter; the error names the first wrong one.
    pub fn check(&self) -> Result<CheckedLogQuery, Error> {
        let page = PageRequest::parse("logs", self.limit.as_deref(), self.cursor.as_deref())?;
        let method = match &self.method {
            None => None,
            Some(m) if LOG_METHODS.contains(&m.as_str()) => Some(m.clone()),
            Some(_) => {
                return Err(Error::validation(
                    "method",
                    format!("must be one of {}", LOG_METHODS.join(", ")),
                ));
            }
        };
        let status = match &self.status {
            None => None,
            Some(raw) => match raw.parse::<i64>() {
                Ok(s) if s == 0 || (100..=599).contains(&s) => Some(s),
                _ => {
                    return Err(Error::validation(
                        "status",
                        "must be an HTTP status (100 to 599) or 0 for an unfinished request",
                    ));
                }
            },
        };
        Ok(CheckedLogQuery {
            page,
            method,
            status,
        })
    }
}

impl MailService {
    pub async fn log_finished(
        &self,
        request_id: i64,
        status: u16,
        duration_ms: i64,
    ) -> Result<(), Error> {
        self.store
            .finish_log(request_id, i64::from(status), duration_ms)
            .await
    }

    pub async fn list_logs(
        &self,
        caller: &Caller,
        query: &LogQuery,
    ) -> Result<Page<RequestLog>, Error> {
        let CheckedLogQuery {
            page,
            method,
            status,
        } = query.check()?;
        let rows = self
            .store
            .list_logs(
                caller.principal.tenant_id,
                &LogFilter {
                    before_id: page.before_id,
                    method,
                    status,
                    except_id: caller.request_id,
                    limit: page.fetch(),
                },
            )
            .await?;
        Ok(page.page(rows, |log| log.id))
    }

    pub async fn log(&self, caller: &Caller, id: i64) -> Result<RequestLog, Error> {
        self.store
            .log(caller.principal.tenant_id, id)
            .await?
            .ok_or_else(|| Error::NotFound { what: "log".into() })
    }
}

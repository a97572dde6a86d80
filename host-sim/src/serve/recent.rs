//! The invocations a development host lists in its developer view, from
//! every surface (the view's own forms, the HTTP API, MCP): recorded here,
//! below the surfaces that run them and the page that shows them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::capabilities::checks::GuestLogLine;
use crate::host::{Caller, Host, Invocation, InvokeRequest};

/// Invocations kept per project and extension.
const KEPT: usize = 20;
/// The surface an invocation came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    Api,
    Mcp,
    DeveloperView,
}

impl Via {
    pub(super) fn label(self) -> &'static str {
        match self {
            Via::Api => "HTTP API",
            Via::Mcp => "MCP",
            Via::DeveloperView => "developer view",
        }
    }
}

/// One invocation the developer view lists.
pub(super) struct Recent {
    pub(super) at: String,
    pub(super) via: Via,
    pub(super) action: String,
    pub(super) input: Value,
    pub(super) request_id: String,
    pub(super) outcome: Result<Value, (String, String)>,
    pub(super) log: Vec<GuestLogLine>,
}

/// The recent invocations, by (project, extension), newest first.
#[derive(Default)]
pub(crate) struct DeveloperLog(pub(super) Mutex<BTreeMap<(String, String), VecDeque<Recent>>>);

/// Runs an invocation (see [`super::invoke`]) and, in a development host,
/// lists it in the developer view with the surface it came through, so a
/// call over HTTP or MCP shows there as a form's call does.
pub(crate) async fn invoke_listed(
    host: &Arc<Host>,
    log: &DeveloperLog,
    caller: Caller,
    request: InvokeRequest,
    via: Via,
) -> Invocation {
    let listed = host.is_development().then(|| {
        (
            (request.project.clone(), request.extension.clone()),
            request.action.clone(),
            request.input.clone(),
        )
    });
    let invocation = super::invoke(host, caller, request).await;
    if let Some((key, action, input)) = listed {
        log.push(
            key,
            Recent {
                at: now(),
                via,
                action,
                input,
                request_id: invocation.request_id.clone(),
                outcome: invocation
                    .result
                    .as_ref()
                    .map(Clone::clone)
                    .map_err(|e| (e.code().to_owned(), e.to_string())),
                log: invocation.log.clone(),
            },
        );
    }
    invocation
}

pub(super) fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

impl DeveloperLog {
    pub(super) fn push(&self, key: (String, String), recent: Recent) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let list = all.entry(key).or_default();
        list.push_front(recent);
        list.truncate(KEPT);
    }
}

//! Capability `documents`: project-scoped JSON documents with revisions.
//!
//! - **Declared** in the manifest as `[capabilities.documents]` with the
//!   collections the extension uses.
//! - **Granted** per invocation: the extension's grant to the project and
//!   the approval of `documents` for the installed release.
//! - **Implemented** by [`documents::Host`] below; the scope (project and
//!   extension) comes from the invocation, never from the guest.
//! - **Enforced** in exactly one function, [`authorize`].

use crate::bindings::platform::extension::documents::{
    self, Document, DocumentError, Precondition,
};
use crate::runtime::InvocationState;
use crate::spec::DOCUMENTS;
use crate::state::{Condition, DocumentScope, WriteOutcome};

/// Longest collection name or document id.
const MAX_NAME: usize = 128;

/// A call that passed [`authorize`].
pub(crate) struct AuthorizedAccess {
    project_id: String,
    extension_id: String,
}

impl AuthorizedAccess {
    fn scope(&self) -> DocumentScope<'_> {
        DocumentScope {
            project_id: &self.project_id,
            extension_id: &self.extension_id,
        }
    }
}

/// The one place that decides whether a document call may touch the store:
/// budget, grant (now), approval of `documents`, a declared collection and
/// well-formed names. The scope is the invoking project, whatever the guest
/// passes.
pub(crate) fn authorize(
    state: &mut InvocationState,
    collection: &str,
    id: &str,
) -> wasmtime::Result<Result<AuthorizedAccess, DocumentError>> {
    state.charge_host_call()?;
    let scope = state.scope.clone();
    let (granted, approved) = match state.call_time_check(DOCUMENTS, None) {
        Ok(now) => (now.granted, now.approved),
        Err(e) => {
            tracing::error!(request_id = %scope.request_id, error = %e, "documents: state unavailable");
            return Ok(Err(DocumentError::Unavailable(
                "host state unavailable".into(),
            )));
        }
    };
    if !granted {
        state.grant_revoked = true;
        return Ok(Err(refuse(
            &scope.request_id,
            DocumentError::Denied(format!(
                "{} is not granted to project {}",
                scope.extension_id, scope.project_id
            )),
        )));
    }
    if !approved {
        return Ok(Err(refuse(
            &scope.request_id,
            DocumentError::Denied("capability documents is not approved".into()),
        )));
    }
    if let Err(problem) = check_name("collection", collection).and_then(|_| check_name("id", id)) {
        return Ok(Err(refuse(
            &scope.request_id,
            DocumentError::Invalid(problem),
        )));
    }
    let declared = scope
        .spec
        .collections
        .as_ref()
        .is_some_and(|c| c.contains(collection));
    if !declared {
        return Ok(Err(refuse(
            &scope.request_id,
            DocumentError::Denied(format!(
                "collection {collection} is not declared by the documents capability"
            )),
        )));
    }
    Ok(Ok(AuthorizedAccess {
        project_id: scope.project_id.clone(),
        extension_id: scope.extension_id.clone(),
    }))
}

fn refuse(request_id: &str, error: DocumentError) -> DocumentError {
    let message = match &error {
        DocumentError::Invalid(m) | DocumentError::Denied(m) => m.as_str(),
        _ => "refused",
    };
    tracing::warn!(request_id, refusal = %message, "document call refused");
    error
}

/// Names are `[a-z0-9][a-z0-9._-]*` (ids may also use upper case), at most
/// 128 bytes, and never `.`/`..`-like: there is nothing to traverse.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("{what} must be 1 to {MAX_NAME} characters"));
    }
    let upper_ok = what == "id";
    let valid = name.bytes().enumerate().all(|(i, b)| {
        b.is_ascii_lowercase()
            || b.is_ascii_digit()
            || (upper_ok && b.is_ascii_uppercase())
            || (i > 0 && matches!(b, b'.' | b'_' | b'-'))
    });
    if !valid || name.contains("..") {
        return Err(format!(
            "{what} may use letters, digits, `.`, `_` and `-` (not first, no `..`)"
        ));
    }
    Ok(())
}

fn condition(precondition: Precondition) -> Condition {
    match precondition {
        Precondition::None => Condition::None,
        Precondition::Absent => Condition::Absent,
        Precondition::Revision(r) => Condition::Revision(r),
    }
}

fn unavailable(request_id: &str, error: impl std::fmt::Display) -> DocumentError {
    tracing::error!(request_id, error = %error, "documents: state unavailable");
    DocumentError::Unavailable("the document store failed".into())
}

impl documents::Host for InvocationState {
    fn get(
        &mut self,
        collection: String,
        id: String,
    ) -> wasmtime::Result<Result<Option<Document>, DocumentError>> {
        let access = match authorize(self, &collection, &id)? {
            Ok(access) => access,
            Err(refusal) => return Ok(Err(refusal)),
        };
        Ok(
            match self.state.document_cached(access.scope(), &collection, &id) {
                Ok(document) => Ok(document.map(|d| Document {
                    collection,
                    id,
                    revision: d.revision,
                    body: d.body,
                })),
                Err(e) => Err(unavailable(&self.scope.request_id, e)),
            },
        )
    }

    fn put(
        &mut self,
        collection: String,
        id: String,
        body: String,
        precondition: Precondition,
    ) -> wasmtime::Result<Result<u64, DocumentError>> {
        let access = match authorize(self, &collection, &id)? {
            Ok(access) => access,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if body.len() > self.limits.max_document_bytes {
            return Ok(Err(DocumentError::LimitExceeded(format!(
                "a document is at most {} bytes",
                self.limits.max_document_bytes
            ))));
        }
        if serde_json::from_str::<serde::de::IgnoredAny>(&body).is_err() {
            return Ok(Err(DocumentError::Invalid(
                "the body is not a JSON text".into(),
            )));
        }
        // Defence in depth: a secret never lands in a stored document.
        let body = self.redact(body);
        Ok(
            match self.state.put_document(
                access.scope(),
                &collection,
                &id,
                &body,
                condition(precondition),
            ) {
                Ok(WriteOutcome::Done(revision)) => Ok(revision),
                Ok(WriteOutcome::Conflict(stored)) => Err(DocumentError::Conflict(stored)),
                Err(e) => Err(unavailable(&self.scope.request_id, e)),
            },
        )
    }

    fn delete(
        &mut self,
        collection: String,
        id: String,
        precondition: Precondition,
    ) -> wasmtime::Result<Result<bool, DocumentError>> {
        let access = match authorize(self, &collection, &id)? {
            Ok(access) => access,
            Err(refusal) => return Ok(Err(refusal)),
        };
        Ok(
            match self.state.delete_document(
                access.scope(),
                &collection,
                &id,
                condition(precondition),
            ) {
                Ok(WriteOutcome::Done(deleted)) => Ok(deleted),
                Ok(WriteOutcome::Conflict(stored)) => Err(DocumentError::Conflict(stored)),
                Err(e) => Err(unavailable(&self.scope.request_id, e)),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn names_cannot_traverse() {
        for bad in [
            "", "..", "../x", "a/b", ".hidden", "a..b", "items\0", "ITEMS", "%2e",
        ] {
            assert!(check_name("collection", bad).is_err(), "{bad:?}");
        }
        for good in ["site", "items", "a-b_c.d", "x1"] {
            assert!(check_name("collection", good).is_ok(), "{good}");
        }
        assert!(check_name("id", "Website-1").is_ok());
    }
}

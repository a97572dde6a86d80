//! Capability `documents`: project-scoped JSON documents with revisions.
//!
//! - **Declared** in the manifest as `[capabilities.documents]` with the
//!   collections the extension uses.
//! - **Granted** per invocation: the extension's grant to the project and
//!   the approval of `documents` for the installed release.
//! - **Implemented** by [`documents::Host`] below on [`DocumentsCtxView`];
//!   the scope (project and extension) comes from the invocation, never
//!   from the guest.
//! - **Enforced** in exactly one function, [`authorize`].

use std::sync::Arc;

use wasmtime::component::{HasData, Linker};

use super::checks::CallChecks;
use crate::bindings::platform::extension::documents::{
    self, Document, DocumentError, Precondition,
};
use crate::spec::DOCUMENTS;
use crate::state::{Condition, DocumentScope, State, WriteOutcome};

/// Longest collection name or document id.
const MAX_NAME: usize = 128;

/// The document capability's part of a store: where documents live and
/// how large one may be.
pub struct DocumentsCtx {
    state: Arc<State>,
    max_document_bytes: usize,
}

impl DocumentsCtx {
    pub fn new(state: Arc<State>, max_document_bytes: usize) -> Self {
        Self {
            state,
            max_document_bytes,
        }
    }
}

/// The capability's context and the invocation's checks, borrowed from the
/// store's data.
pub struct DocumentsCtxView<'a> {
    pub ctx: &'a mut DocumentsCtx,
    pub checks: &'a mut CallChecks,
}

/// Store data that can lend the document capability its parts.
pub trait DocumentsView: Send {
    fn documents(&mut self) -> DocumentsCtxView<'_>;
}

struct HasDocuments;

impl HasData for HasDocuments {
    type Data<'a> = DocumentsCtxView<'a>;
}

/// Adds `platform:extension/documents` to `linker`.
pub fn add_to_linker<T: DocumentsView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    documents::add_to_linker::<T, HasDocuments>(linker, T::documents)
}

/// A call that passed [`authorize`]: the invoking project and extension.
#[derive(Debug)]
pub struct AuthorizedAccess {
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
/// passes. `Err` ends the invocation (the budget); `Ok(Err)` is the
/// refusal the guest gets.
pub fn authorize(
    checks: &mut CallChecks,
    collection: &str,
    id: &str,
) -> wasmtime::Result<Result<AuthorizedAccess, DocumentError>> {
    checks.charge_host_call()?;
    let now = checks.at_call_time(DOCUMENTS, None);
    let scope = checks.scope_arc();
    let now = match now {
        Ok(now) => now,
        Err(e) => {
            tracing::error!(request_id = %scope.request_id, error = %e, "documents: state unavailable");
            return Ok(Err(DocumentError::Unavailable(
                "host state unavailable".into(),
            )));
        }
    };
    if !now.granted {
        checks.revoke();
        return Ok(Err(refuse(
            &scope.request_id,
            DocumentError::Denied(format!(
                "{} is not granted to project {}",
                scope.extension_id, scope.project_id
            )),
        )));
    }
    if !now.approved {
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

impl documents::Host for DocumentsCtxView<'_> {
    fn get(
        &mut self,
        collection: String,
        id: String,
    ) -> wasmtime::Result<Result<Option<Document>, DocumentError>> {
        let access = match authorize(self.checks, &collection, &id)? {
            Ok(access) => access,
            Err(refusal) => return Ok(Err(refusal)),
        };
        Ok(
            match self
                .ctx
                .state
                .document_cached(access.scope(), &collection, &id)
            {
                Ok(document) => Ok(document.map(|d| Document {
                    collection,
                    id,
                    revision: d.revision,
                    body: d.body,
                })),
                Err(e) => Err(unavailable(&self.checks.scope().request_id, e)),
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
        let access = match authorize(self.checks, &collection, &id)? {
            Ok(access) => access,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if body.len() > self.ctx.max_document_bytes {
            return Ok(Err(DocumentError::LimitExceeded(format!(
                "a document is at most {} bytes",
                self.ctx.max_document_bytes
            ))));
        }
        if serde_json::from_str::<serde::de::IgnoredAny>(&body).is_err() {
            return Ok(Err(DocumentError::Invalid(
                "the body is not a JSON text".into(),
            )));
        }
        // Defence in depth: a secret never lands in a stored document.
        let body = self.checks.redact(body);
        Ok(
            match self.ctx.state.put_document(
                access.scope(),
                &collection,
                &id,
                &body,
                condition(precondition),
            ) {
                Ok(WriteOutcome::Done(revision)) => Ok(revision),
                Ok(WriteOutcome::Conflict(stored)) => Err(DocumentError::Conflict(stored)),
                Err(e) => Err(unavailable(&self.checks.scope().request_id, e)),
            },
        )
    }

    fn delete(
        &mut self,
        collection: String,
        id: String,
        precondition: Precondition,
    ) -> wasmtime::Result<Result<bool, DocumentError>> {
        let access = match authorize(self.checks, &collection, &id)? {
            Ok(access) => access,
            Err(refusal) => return Ok(Err(refusal)),
        };
        Ok(
            match self.ctx.state.delete_document(
                access.scope(),
                &collection,
                &id,
                condition(precondition),
            ) {
                Ok(WriteOutcome::Done(deleted)) => Ok(deleted),
                Ok(WriteOutcome::Conflict(stored)) => Err(DocumentError::Conflict(stored)),
                Err(e) => Err(unavailable(&self.checks.scope().request_id, e)),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{DIGEST, EXTENSION, Fixture, PROJECT, SECRET};
    use super::*;

    fn denied(outcome: wasmtime::Result<Result<AuthorizedAccess, DocumentError>>) -> String {
        match outcome.unwrap() {
            Err(DocumentError::Denied(message)) => message,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

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

    #[test]
    fn a_declared_collection_is_authorized_for_the_invoking_project_only() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let access = authorize(&mut checks, "items", "one").unwrap().unwrap();
        assert_eq!(access.scope().project_id, PROJECT);
        assert_eq!(access.scope().extension_id, EXTENSION);
        let undeclared = denied(authorize(&mut checks, "other", "one"));
        assert!(undeclared.contains("not declared"), "{undeclared}");
        assert!(matches!(
            authorize(&mut checks, "items", "../p2").unwrap(),
            Err(DocumentError::Invalid(_))
        ));
    }

    #[test]
    fn a_revoked_grant_refuses_the_call_and_voids_the_invocation() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        authorize(&mut checks, "items", "one").unwrap().unwrap();
        fixture.state.revoke(EXTENSION, PROJECT).unwrap();
        let message = denied(authorize(&mut checks, "items", "one"));
        assert!(message.contains("not granted"), "{message}");
        assert!(checks.grant_revoked());
    }

    #[test]
    fn a_withdrawn_approval_refuses_the_call() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        fixture
            .state
            .set_approval(EXTENSION, DIGEST, &[DOCUMENTS.into()], false)
            .unwrap();
        let message = denied(authorize(&mut checks, "items", "one"));
        assert!(message.contains("not approved"), "{message}");
        assert!(!checks.grant_revoked());
    }

    #[test]
    fn every_call_counts_against_the_budget() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks_with_budget(1);
        authorize(&mut checks, "items", "one").unwrap().unwrap();
        assert!(authorize(&mut checks, "items", "one").is_err());
    }

    #[test]
    fn a_stored_body_is_redacted_and_revisions_are_compared() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let mut ctx = DocumentsCtx::new(fixture.state.clone(), 64);
        let mut view = DocumentsCtxView {
            ctx: &mut ctx,
            checks: &mut checks,
        };
        use documents::Host as _;
        let body = format!("{{\"k\":\"{SECRET}\"}}");
        let revision = view
            .put("items".into(), "one".into(), body, Precondition::Absent)
            .unwrap()
            .unwrap();
        let stored = view.get("items".into(), "one".into()).unwrap().unwrap();
        assert_eq!(stored.unwrap().body, r#"{"k":"[redacted]"}"#);
        assert!(matches!(
            view.put("items".into(), "one".into(), "1".into(), Precondition::Absent),
            Ok(Err(DocumentError::Conflict(r))) if r == revision
        ));
        assert!(matches!(
            view.put(
                "items".into(),
                "two".into(),
                "x".repeat(65),
                Precondition::None
            ),
            Ok(Err(DocumentError::LimitExceeded(_)))
        ));
        assert!(matches!(
            view.put("items".into(), "two".into(), "{".into(), Precondition::None),
            Ok(Err(DocumentError::Invalid(_)))
        ));
    }

    fn scope_of(project_id: &str) -> DocumentScope<'_> {
        DocumentScope {
            project_id,
            extension_id: EXTENSION,
        }
    }

    #[test]
    fn another_projects_document_of_the_same_name_is_out_of_reach() {
        let fixture = Fixture::new();
        fixture
            .state
            .put_document(
                scope_of("p2"),
                "items",
                "one",
                r#"{"p":2}"#,
                Condition::None,
            )
            .unwrap();
        let mut checks = fixture.checks();
        let mut ctx = DocumentsCtx::new(fixture.state.clone(), 64);
        let mut view = DocumentsCtxView {
            ctx: &mut ctx,
            checks: &mut checks,
        };
        use documents::Host as _;
        assert!(
            view.get("items".into(), "one".into())
                .unwrap()
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            view.delete("items".into(), "one".into(), Precondition::None),
            Ok(Ok(false))
        ));
        let kept = fixture
            .state
            .document(scope_of("p2"), "items", "one")
            .unwrap();
        assert_eq!(kept.unwrap().body, r#"{"p":2}"#);
    }

    #[test]
    fn a_refused_call_touches_no_document() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        fixture
            .state
            .set_approval(EXTENSION, DIGEST, &[DOCUMENTS.into()], false)
            .unwrap();
        let mut ctx = DocumentsCtx::new(fixture.state.clone(), 64);
        let mut view = DocumentsCtxView {
            ctx: &mut ctx,
            checks: &mut checks,
        };
        use documents::Host as _;
        assert!(matches!(
            view.put("items".into(), "one".into(), "1".into(), Precondition::None),
            Ok(Err(DocumentError::Denied(_)))
        ));
        assert!(matches!(
            view.put("other".into(), "one".into(), "1".into(), Precondition::None),
            Ok(Err(DocumentError::Denied(_)))
        ));
        assert!(fixture.state.documents(PROJECT).unwrap().is_empty());
    }

    #[test]
    fn a_delete_honours_its_precondition() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let mut ctx = DocumentsCtx::new(fixture.state.clone(), 64);
        let mut view = DocumentsCtxView {
            ctx: &mut ctx,
            checks: &mut checks,
        };
        use documents::Host as _;
        let revision = view
            .put("items".into(), "one".into(), "1".into(), Precondition::None)
            .unwrap()
            .unwrap();
        assert!(matches!(
            view.delete("items".into(), "one".into(), Precondition::Revision(revision + 1)),
            Ok(Err(DocumentError::Conflict(r))) if r == revision
        ));
        assert!(matches!(
            view.delete(
                "items".into(),
                "one".into(),
                Precondition::Revision(revision)
            ),
            Ok(Ok(true))
        ));
        assert!(matches!(
            view.delete("items".into(), "one".into(), Precondition::None),
            Ok(Ok(false))
        ));
    }

    #[test]
    fn a_write_by_another_process_is_read_at_the_next_get() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let mut ctx = DocumentsCtx::new(fixture.state.clone(), 64);
        let mut view = DocumentsCtxView {
            ctx: &mut ctx,
            checks: &mut checks,
        };
        use documents::Host as _;
        view.put("items".into(), "one".into(), "1".into(), Precondition::None)
            .unwrap()
            .unwrap();
        let first = view.get("items".into(), "one".into()).unwrap().unwrap();
        assert_eq!(first.unwrap().body, "1");
        fixture
            .other_process()
            .put_document(scope_of(PROJECT), "items", "one", "2", Condition::None)
            .unwrap();
        let second = view.get("items".into(), "one".into()).unwrap().unwrap();
        let second = second.unwrap();
        assert_eq!((second.body.as_str(), second.revision), ("2", 2));
    }
}

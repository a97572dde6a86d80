//! The project's mapping document (`site/mapping`): what it holds, how it
//! is read, and how the document service's refusals become action errors.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{COLLECTION, MAPPING_ID};
use crate::error::{ActionError, ErrorCode};
use crate::host::{DocumentError, Host};

/// The stored mapping of a project to its provider website.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub website_id: Uuid,
    pub name: String,
    pub domain: String,
    /// When this website id was first mapped (Unix ms).
    pub created_at: i64,
    /// When the mapping was last written (Unix ms).
    pub updated_at: i64,
}

/// A mapping document as read: its revision and body (`Err` when the body is
/// not a mapping, which a provision repairs).
pub(super) struct Stored {
    pub(super) revision: u64,
    pub(super) mapping: Result<Mapping, ()>,
}

pub(super) fn document_error(error: DocumentError) -> ActionError {
    match error {
        DocumentError::Conflict(_) => {
            ActionError::internal("the site mapping changed during the request; try again")
        }
        DocumentError::Invalid(_) => {
            ActionError::internal("the document service refused the site mapping as invalid")
        }
        DocumentError::Denied(_) => ActionError::new(
            ErrorCode::Forbidden,
            "the host denied access to the project's documents (grant or documents capability missing)",
        ),
        DocumentError::LimitExceeded(_) => ActionError::new(
            ErrorCode::LimitExceeded,
            "the document service's size or call limit was reached",
        ),
        DocumentError::Unavailable(_) => {
            ActionError::internal("the document service is unavailable; try again")
        }
    }
}

pub(super) fn read_stored<H: Host + ?Sized>(host: &H) -> Result<Option<Stored>, ActionError> {
    let document = host
        .get_document(COLLECTION, MAPPING_ID)
        .map_err(document_error)?;
    Ok(document.map(|d| Stored {
        revision: d.revision,
        mapping: serde_json::from_str(&d.body).map_err(|_| ()),
    }))
}

/// The mapping for reading actions: `not_provisioned` when absent.
pub(super) fn read_mapping<H: Host + ?Sized>(host: &H) -> Result<(Mapping, u64), ActionError> {
    match read_stored(host)? {
        None => Err(ActionError::new(
            ErrorCode::NotProvisioned,
            "the project has no analytics website yet; run analytics.provision with a name and a domain first",
        )),
        Some(Stored {
            revision,
            mapping: Ok(mapping),
        }) => Ok((mapping, revision)),
        Some(Stored {
            mapping: Err(()), ..
        }) => Err(ActionError::internal(
            "the stored site mapping is unreadable; run analytics.provision again to repair it",
        )),
    }
}

//! Typed access to the project's documents, with compare-and-set.
//!
//! The host keeps JSON documents per project in the collections the
//! manifest declares; every write names a [`Precondition`] and every stored
//! document has a revision (1 after the first write, one more per write).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{ActionError, ErrorCode};
use crate::host::{DocumentError, Host, Precondition};

/// A document read as `T`, with the revision it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored<T> {
    pub revision: u64,
    pub value: T,
}

/// Reads `collection/id` as `T`; `None` when there is none. A stored body
/// that is not a `T` is `internal`.
pub fn get<T, H>(host: &H, collection: &str, id: &str) -> Result<Option<Stored<T>>, ActionError>
where
    T: DeserializeOwned,
    H: Host + ?Sized,
{
    let Some(document) = host.get_document(collection, id)? else {
        return Ok(None);
    };
    let value = serde_json::from_str(&document.body).map_err(|e| {
        ActionError::internal(format!(
            "the stored document {collection}/{id} is unreadable: {e}"
        ))
    })?;
    Ok(Some(Stored {
        revision: document.revision,
        value,
    }))
}

/// Writes `value` to `collection/id` if `condition` holds; answers the new
/// revision. A [`DocumentError::Conflict`] carries the stored revision.
pub fn put<T, H>(
    host: &H,
    collection: &str,
    id: &str,
    value: &T,
    condition: Precondition,
) -> Result<u64, DocumentError>
where
    T: Serialize + ?Sized,
    H: Host + ?Sized,
{
    let body = serde_json::to_string(value)
        .map_err(|e| DocumentError::Invalid(format!("the document could not be written: {e}")))?;
    host.put_document(collection, id, &body, condition)
}

/// Read, change, write with compare-and-set, again on a conflict: `change`
/// gets the stored value (`None` when absent) and answers the new one,
/// which is written only if the stored revision is still the one read. A
/// value equal to the stored one is not written. After `attempts` lost
/// races the answer is `conflict`.
pub fn update<T, H, F>(
    host: &H,
    collection: &str,
    id: &str,
    attempts: usize,
    mut change: F,
) -> Result<Stored<T>, ActionError>
where
    T: Serialize + DeserializeOwned + PartialEq,
    H: Host + ?Sized,
    F: FnMut(Option<&T>) -> Result<T, ActionError>,
{
    for _ in 0..attempts {
        let current = get::<T, H>(host, collection, id)?;
        let next = change(current.as_ref().map(|stored| &stored.value))?;
        let condition = match &current {
            Some(stored) if stored.value == next => {
                return Ok(Stored {
                    revision: stored.revision,
                    value: next,
                });
            }
            Some(stored) => Precondition::Revision(stored.revision),
            None => Precondition::Absent,
        };
        match put(host, collection, id, &next, condition) {
            Ok(revision) => {
                return Ok(Stored {
                    revision,
                    value: next,
                });
            }
            Err(DocumentError::Conflict(_)) => continue,
            Err(other) => return Err(other.into()),
        }
    }
    Err(ActionError::new(
        ErrorCode::Conflict,
        format!(
            "{collection}/{id} kept changing during the request ({attempts} attempts); try again"
        ),
    ))
}

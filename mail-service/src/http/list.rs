//! The list envelope every list endpoint answers with, shared by the
//! handlers of each subject and named once in the OpenAPI document.

use serde::Serialize;
use utoipa::ToSchema;

use crate::service::Page;

/// A page of a list, newest first, in Resend's list shape with the
/// contract's `nextCursor` beside it.
#[derive(Debug, Serialize, ToSchema)]
pub struct List<T> {
    /// Always `list`.
    pub object: &'static str,
    pub data: Vec<T>,
    /// Whether a next page exists (then `nextCursor` is set).
    pub has_more: bool,
    /// Pass as `cursor` for the next page; null on the last page.
    #[serde(rename = "nextCursor")]
    pub next_cursor: Option<String>,
}

impl<T> List<T> {
    pub fn of<U>(page: Page<U>, f: impl FnMut(U) -> T) -> List<T> {
        let has_more = page.has_more();
        let page = page.map(f);
        List {
            object: "list",
            data: page.items,
            has_more,
            next_cursor: page.next_cursor,
        }
    }
}

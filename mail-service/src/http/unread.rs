//! Request bodies a handler answered without reading (a 401 decided from
//! the headers, a 403, a 404). HTTP/1.1 cannot carry the next request on
//! a connection until this one's body has been read, and hyper closes such
//! a connection after the answer without saying so, so a client that reuses
//! it meets "server disconnected" on its next request. The request
//! middleware watches each body (`watch`); what a handler left unread is
//! read and dropped before the answer goes out, up to `MOST_DRAINED` bytes
//! within `DRAIN_WAIT`. A body larger or slower than that is not read: the
//! answer then carries `Connection: close`, and the client opens a new
//! connection for its next request.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Version, header};
use axum::response::Response;
use http_body::{Body as _, Frame, SizeHint};

/// The most bytes of an unread body that are read to keep the connection.
pub const MOST_DRAINED: usize = 1024 * 1024;
/// How long the rest of an unread body may take to arrive.
pub const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// Where a request body the handler dropped unread ends up.
#[derive(Clone, Default)]
pub struct Unread(Arc<Mutex<Option<Body>>>);

impl Unread {
    /// Replaces the request's body with one that, dropped before its end,
    /// leaves the rest here.
    pub fn watch(&self, req: Request) -> Request {
        let left = self.clone();
        req.map(|body| {
            Body::new(Watched {
                inner: Some(body),
                left,
            })
        })
    }

    /// Reads what the handler left of the body (if anything), within the
    /// bounds; marks the answer `Connection: close` when it could not.
    pub async fn settle(&self, version: Version, response: &mut Response) {
        let left = self.0.lock().map(|mut left| left.take()).unwrap_or(None);
        let Some(body) = left else {
            return;
        };
        let drained = tokio::time::timeout(DRAIN_WAIT, axum::body::to_bytes(body, MOST_DRAINED))
            .await
            .is_ok_and(|read| read.is_ok());
        // HTTP/2 has no connection header (and needs no draining).
        if !drained && version <= Version::HTTP_11 {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
}

/// A request body that hands what is left of it to `left` when dropped
/// before its end.
struct Watched {
    inner: Option<Body>,
    left: Unread,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.inner = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(body) = self.inner.take().filter(|b| !b.is_end_stream())
            && let Ok(mut left) = self.left.0.lock()
        {
            *left = Some(body);
        }
    }
}

//! An answer given before the request body was read to its end (a 401 from
//! an extractor, a 413, a refusal by route) leaves the rest of that body on
//! the connection. hyper then closes the connection after the answer,
//! without saying so, and a client that reuses it (an MCP client sending
//! its discovery request right after the first 401) sees its next request
//! fail with "server disconnected". This layer marks such answers
//! `Connection: close`, so the client knows to open a new connection.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// The middleware: watches the request body, and says `Connection: close`
/// when the answer leaves part of it unread.
pub(super) async fn close_if_unread(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let watched = Body::new(Watched {
        inner: body,
        finished: finished.clone(),
    });
    let mut response = next.run(Request::from_parts(parts, watched)).await;
    if !finished.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request body that records reaching its end.
struct Watched {
    inner: Body,
    finished: Arc<AtomicBool>,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.finished.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

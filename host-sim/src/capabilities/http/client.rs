//! The HTTP client every binding call goes through.

use std::sync::Arc;

/// The client every binding call goes through: no proxy from the
/// environment, no redirects (a redirect must not carry the secret
/// elsewhere), no cookies kept, statuses passed to the guest as they are.
///
/// Calls run on the calling thread: reqwest's async client on a
/// current-thread tokio runtime that [`BindingClient::block_on`] drives, so
/// a call is a write and a wait on the socket. (reqwest's blocking client
/// hands every request to its runtime thread and the response back: two
/// thread wake-ups per request.) Clones share the runtime and the
/// connection pool. Concurrent callers all make progress: one of them at a
/// time drives the runtime's IO and wakes the others, as reqwest's runtime
/// thread would.
#[derive(Clone)]
pub struct BindingClient(Arc<ClientInner>);

struct ClientInner {
    runtime: Option<tokio::runtime::Runtime>,
    http: reqwest::Client,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which would panic inside another
        // runtime; the connection tasks need no waiting for.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl BindingClient {
    /// The async client; its futures must run in [`Self::block_on`].
    pub fn http(&self) -> &reqwest::Client {
        &self.0.http
    }

    /// Runs `future` to completion on the calling thread. Blocking: not
    /// for use inside an async runtime (like `reqwest::blocking`).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.0
            .runtime
            .as_ref()
            .expect("the runtime lives as long as the client")
            .block_on(future)
    }
}

/// Builds the [`BindingClient`].
pub fn client() -> std::io::Result<BindingClient> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent("host-sim")
        .build()
        .map_err(std::io::Error::other)?;
    Ok(BindingClient(Arc::new(ClientInner {
        runtime: Some(runtime),
        http,
    })))
}

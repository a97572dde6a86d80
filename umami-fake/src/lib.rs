//! An Umami-compatible analytics provider fake.
//!
//! It serves the endpoints the managed-analytics plugin uses (auth verify,
//! website read/create/rename, stats, per-day page views), Umami's `/me`
//! (which echoes the caller's token, as the real server does), the browser
//! side (`/script.js`, `/api/send`) and a control API under `/__fake/...`.
//! Statistics are real counts over the page views recorded by `/api/send`.
//! Data lives in memory, or also in a data file ([`UmamiFake::with_data_file`])
//! so it survives a restart.
//!
//! ```no_run
//! use umami_fake::{FakeConfig, UmamiFake};
//! let fake = UmamiFake::start(FakeConfig::new("provider-secret")).unwrap();
//! println!("{}", fake.base_url());
//! ```

mod api;
mod control;
mod persist;
mod store;

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;

use axum::Router;
use axum::middleware;
use axum::routing::{get, post, put};
use tokio::sync::oneshot;
use uuid::Uuid;

pub use store::{ACCOUNT_USER_ID, Event, Fault, OTHER_USER_ID, ResponseShape, Website};

/// How a fake starts.
#[derive(Clone)]
pub struct FakeConfig {
    /// The credential `/api/*` requires as `Authorization: Bearer` or
    /// `x-umami-api-key`, and the token `/api/auth/login` hands out.
    pub secret: String,
    /// Login name accepted by `/api/auth/login`.
    pub username: String,
    /// Password accepted by `/api/auth/login`.
    pub password: String,
    pub shape: ResponseShape,
    /// An admin account sees every website and gets `200 null` for a missing
    /// one; a non-admin account gets 401 for missing and foreign websites.
    pub admin: bool,
    pub fault: Fault,
}

impl FakeConfig {
    /// A healthy v3 server with an admin account `admin`/`umami`.
    pub fn new(secret: impl Into<String>) -> Self {
        Self {
            secret: secret.into(),
            username: "admin".into(),
            password: "umami".into(),
            shape: ResponseShape::V3,
            admin: true,
            fault: Fault::None,
        }
    }
}

impl fmt::Debug for FakeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeConfig")
            .field("secret", &"<redacted>")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("shape", &self.shape)
            .field("admin", &self.admin)
            .field("fault", &self.fault)
            .finish()
    }
}

struct Inner {
    config: FakeConfig,
    store: Mutex<store::Store>,
    /// Where websites and events are saved after every change, if anywhere.
    data_file: Option<persist::DataFile>,
}

/// The fake's state and behaviour; cheap to clone. Serve it with
/// [`UmamiFake::serve`] inside a runtime, or [`UmamiFake::start`] on a thread
/// of its own.
#[derive(Clone)]
pub struct UmamiFake {
    inner: Arc<Inner>,
}

impl UmamiFake {
    /// A fake whose data lives in memory only.
    pub fn new(config: FakeConfig) -> Self {
        let store = store::Store::new(config.shape, config.admin, config.fault.clone());
        Self {
            inner: Arc::new(Inner {
                config,
                store: Mutex::new(store),
                data_file: None,
            }),
        }
    }

    /// A fake that starts with the websites and page views saved in `path`
    /// (none if the file does not exist yet) and saves them there after every
    /// change, atomically (a temporary file, then `rename`). Fails when the
    /// file cannot be read or is not a data file of this fake.
    pub fn with_data_file(config: FakeConfig, path: &Path) -> io::Result<Self> {
        let data_file = persist::DataFile::new(path);
        let mut store = store::Store::new(config.shape, config.admin, config.fault.clone());
        data_file.load_into(&mut store)?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                store: Mutex::new(store),
                data_file: Some(data_file),
            }),
        })
    }

    /// Starts the fake on `127.0.0.1` with a free port, on a thread with its
    /// own runtime. Dropping the handle stops it.
    pub fn start(config: FakeConfig) -> io::Result<FakeHandle> {
        Self::start_on(config, SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Like [`UmamiFake::start`], on a chosen address.
    pub fn start_on(config: FakeConfig, addr: SocketAddr) -> io::Result<FakeHandle> {
        Self::new(config).spawn(addr)
    }

    /// Serves this fake on `addr` on a thread with its own runtime, e.g. one
    /// made by [`UmamiFake::with_data_file`]. Dropping the handle stops it.
    pub fn spawn(self, addr: SocketAddr) -> io::Result<FakeHandle> {
        let fake = self;
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let served = fake.clone();
        let thread = thread::Builder::new()
            .name("umami-fake".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => {
                            tracing::error!("umami-fake cannot listen: {e}");
                            return;
                        }
                    };
                    tokio::select! {
                        result = served.serve(listener) => {
                            if let Err(e) = result {
                                tracing::error!("umami-fake stopped: {e}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(FakeHandle {
            fake,
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Serves the fake on `listener` until the future is dropped.
    pub fn serve(
        &self,
        listener: tokio::net::TcpListener,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let app = self
            .router()
            .into_make_service_with_connect_info::<SocketAddr>();
        async move { axum::serve(listener, app).await }
    }

    /// The fake's routes: `/api/*` (with the fault layer), `/script.js` and
    /// the control API under `/__fake`.
    pub fn router(&self) -> Router {
        let api = Router::new()
            .route("/api/auth/login", post(api::login))
            .route("/api/auth/verify", post(api::verify))
            .route("/api/me", get(api::me))
            .route("/api/websites", post(api::create_website))
            .route(
                "/api/websites/{id}",
                get(api::get_website).post(api::update_website),
            )
            .route("/api/websites/{id}/stats", get(api::stats))
            .route("/api/websites/{id}/pageviews", get(api::pageviews))
            .route("/api/send", post(api::send).options(api::send_preflight))
            .layer(middleware::from_fn_with_state(
                self.clone(),
                api::fault_layer,
            ));
        let control = Router::new()
            .route("/__fake/state", get(control::state))
            .route("/__fake/fault", put(control::set_fault))
            .route("/__fake/shape", put(control::set_shape))
            .route("/__fake/admin", put(control::set_admin))
            .route(
                "/__fake/events",
                get(control::events).post(control::record_event),
            )
            .route("/__fake/websites", post(control::insert_website))
            .route("/__fake/reset", post(control::reset));
        api.merge(control)
            .route("/script.js", get(api::script))
            .with_state(self.clone())
    }

    fn store(&self) -> MutexGuard<'_, store::Store> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.inner.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn with_store<T>(&self, f: impl FnOnce(&store::Store) -> T) -> T {
        f(&self.store())
    }

    /// Saves the data file after a change, while the caller still holds the
    /// lock (so saves happen in the order of the changes). A failed save is
    /// logged; the change stays in memory.
    fn save(&self, store: &store::Store) {
        if let Some(file) = &self.inner.data_file
            && let Err(e) = file.save(store)
        {
            tracing::error!("umami-fake: {e}");
        }
    }

    pub(crate) fn secret_matches(&self, token: &str) -> bool {
        !self.inner.config.secret.is_empty() && token == self.inner.config.secret
    }

    /// The token for a correct username and password.
    pub(crate) fn login(&self, username: &str, password: &str) -> Option<String> {
        let config = &self.inner.config;
        (username == config.username && password == config.password).then(|| config.secret.clone())
    }

    pub(crate) fn create_website(
        &self,
        id: Uuid,
        name: String,
        domain: String,
        owner: Uuid,
        now_ms: i64,
    ) -> Option<Website> {
        let mut store = self.store();
        if store.websites.contains_key(&id) {
            return None;
        }
        let website = Website {
            id,
            name,
            domain,
            owner,
            created_at_ms: now_ms,
            updated_at_ms: None,
        };
        store.websites.insert(id, website.clone());
        store.creates += 1;
        self.save(&store);
        Some(website)
    }

    /// Renames a website the account can see. `Err(admin)` when it cannot.
    pub(crate) fn update_website(
        &self,
        id: Uuid,
        name: Option<String>,
        domain: Option<String>,
        now_ms: i64,
    ) -> Result<Website, bool> {
        let mut store = self.store();
        if store.visible_website(id).is_none() {
            return Err(store.admin);
        }
        store.renames += 1;
        let website = store.websites.get_mut(&id).ok_or(true)?;
        if let Some(name) = name {
            website.name = name;
        }
        if let Some(domain) = domain {
            website.domain = domain;
        }
        website.updated_at_ms = Some(now_ms);
        let website = website.clone();
        self.save(&store);
        Ok(website)
    }

    /// Seeds a website without counting a provider write; `owner` is
    /// [`ACCOUNT_USER_ID`] or [`OTHER_USER_ID`]. False if the id exists.
    pub fn insert_website(&self, id: Uuid, name: String, domain: String, owner: Uuid) -> bool {
        let mut store = self.store();
        if store.websites.contains_key(&id) {
            return false;
        }
        store.websites.insert(
            id,
            Website {
                id,
                name,
                domain,
                owner,
                created_at_ms: 0,
                updated_at_ms: None,
            },
        );
        self.save(&store);
        true
    }

    /// Records a page view as `/api/send` does, at a chosen time. `None` for
    /// an unknown website.
    pub fn record_event(
        &self,
        website_id: Uuid,
        url: &str,
        timestamp_ms: i64,
        user_agent: &str,
        ip: &str,
    ) -> Option<Event> {
        let mut store = self.store();
        let event = store.record(website_id, url, timestamp_ms, user_agent, ip)?;
        self.save(&store);
        Some(event)
    }

    /// Provider writes so far: creates plus renames.
    pub fn writes(&self) -> u64 {
        let store = self.store();
        store.creates + store.renames
    }

    pub fn creates(&self) -> u64 {
        self.store().creates
    }

    pub fn renames(&self) -> u64 {
        self.store().renames
    }

    pub fn events(&self) -> Vec<Event> {
        self.store().events.clone()
    }

    pub fn websites(&self) -> Vec<Website> {
        self.store().websites.values().cloned().collect()
    }

    pub fn website(&self, id: Uuid) -> Option<Website> {
        self.store().websites.get(&id).cloned()
    }

    pub fn fault(&self) -> Fault {
        self.store().fault.clone()
    }

    pub fn set_fault(&self, fault: Fault) {
        self.store().fault = fault;
    }

    pub fn shape(&self) -> ResponseShape {
        self.store().shape
    }

    pub fn set_shape(&self, shape: ResponseShape) {
        self.store().shape = shape;
    }

    pub fn set_admin(&self, admin: bool) {
        self.store().admin = admin;
    }

    /// Forgets websites, events and counters (in the data file too) and goes
    /// back to the configured shape, account kind and fault mode.
    pub fn reset(&self) {
        let config = &self.inner.config;
        let mut store = self.store();
        *store = store::Store::new(config.shape, config.admin, config.fault.clone());
        self.save(&store);
    }
}

/// A running fake (see [`UmamiFake::start`]); derefs to [`UmamiFake`] for
/// counters and switches. Dropping it stops the server.
pub struct FakeHandle {
    fake: UmamiFake,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl FakeHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Deref for FakeHandle {
    type Target = UmamiFake;
    fn deref(&self) -> &UmamiFake {
        &self.fake
    }
}

impl Drop for FakeHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

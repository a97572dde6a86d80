//! The browser side (wasm32 only): the session handshake with the console,
//! the API calls and the signals that the components in `view` read.
//!
//! Handshake: the panel posts `{"type":"platform.ready"}` to `window.parent`
//! and shows the loading state until the parent posts a `platform.session`
//! message. The token lives in this module's memory only (the sandboxed
//! iframe has no storage and the token is never put in a URL). When a call
//! answers 401, or the session's `expiresAt` has passed, the panel posts
//! `{"type":"platform.session-expired"}`, waits for the next session message
//! and retries the call once.
//!
//! Size: a `ResizeObserver` on the document element posts
//! `{"type":"platform.resize","height":N}` whenever the content's height
//! changes; the console sizes the iframe to it, so the panel has no
//! scrollbar of its own.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use leptos::prelude::*;
use serde::de::DeserializeOwned;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{JsFuture, spawn_local};
use web_sys::{
    Headers, MessageEvent, Request, RequestCache, RequestCredentials, RequestInit, RequestMode,
    Response,
};

use crate::api::{
    Configuration, Failure, FormErrors, HostMessage, Session, SiteInput, Stats, last_seven_days,
    outgoing, stats_path,
};
use crate::model::{FormStatus, PanelActions, PanelModel, Problem, Screen, StatsState};
use crate::view::Panel;

/// A session this close to its `expiresAt` is renewed before it is used.
const EXPIRY_MARGIN_MS: f64 = 5_000.0;

thread_local! {
    /// The current session; set only from the parent's messages.
    static SESSION: RefCell<Option<Session>> = const { RefCell::new(None) };
    /// Calls waiting for the next session (resolve functions of promises).
    static WAITING: RefCell<Vec<js_sys::Function>> = const { RefCell::new(Vec::new()) };
}

/// The signals behind the `PanelModel`.
#[derive(Clone, Copy)]
struct App {
    screen: RwSignal<Screen>,
    stats: RwSignal<StatsState>,
    editing: RwSignal<bool>,
    form: RwSignal<FormStatus>,
    announcement: RwSignal<String>,
}

#[wasm_bindgen(start)]
pub fn start() {
    let app = App {
        screen: RwSignal::new(Screen::Loading),
        stats: RwSignal::new(StatsState::Loading),
        editing: RwSignal::new(false),
        form: RwSignal::new(FormStatus::default()),
        announcement: RwSignal::new(String::new()),
    };
    let model = PanelModel {
        screen: app.screen.into(),
        stats: app.stats.into(),
        editing: app.editing.into(),
        form: app.form.into(),
        announcement: app.announcement.into(),
    };
    let actions = PanelActions {
        submit: Callback::new(move |input| submit(app, input)),
        set_editing: Callback::new(move |open| set_editing(app, open)),
        refresh: Callback::new(move |()| spawn_local(load(app))),
        reload: Callback::new(|()| post_to_console(outgoing::RELOAD)),
        copy: Callback::new(move |script| copy(app, script)),
    };
    leptos::mount::mount_to_body(move || view! { <Panel model=model actions=actions /> });
    listen_for_sessions(app);
    report_height();
    post_to_console(outgoing::READY);
}

/// Posts the content's height to the console now and whenever it changes
/// (a new screen, the stats arriving, the console's width reflowing text).
fn report_height() {
    let Some(root) = document().document_element() else {
        return;
    };
    let last = Cell::new(0u32);
    let measured = root.clone();
    let on_resize = Closure::<dyn Fn()>::new(move || {
        // The element's own box: its content, not the frame's viewport
        // (which `scrollHeight` would report when the frame is taller).
        let height = measured.get_bounding_client_rect().height().ceil() as u32;
        if height != last.replace(height) {
            post_to_console(&outgoing::resize(height));
        }
    });
    // Without ResizeObserver the console keeps its default height.
    let Ok(observer) = web_sys::ResizeObserver::new(on_resize.as_ref().unchecked_ref()) else {
        return;
    };
    // The document keeps an observer with a target alive; the callback
    // lives as long as the page.
    observer.observe(&root);
    on_resize.forget();
}

fn listen_for_sessions(app: App) {
    let on_message = Closure::<dyn Fn(MessageEvent)>::new(move |event: MessageEvent| {
        // Only the console, our parent window, hands out sessions.
        let from_parent = match (event.source(), window().parent()) {
            (Some(source), Ok(Some(parent))) => js_sys::Object::is(&source, &parent),
            _ => false,
        };
        if !from_parent {
            return;
        }
        let data = event.data();
        let json = match data.as_string() {
            Some(text) => text,
            None => match js_sys::JSON::stringify(&data) {
                Ok(text) => String::from(text),
                Err(_) => return,
            },
        };
        if let Some(HostMessage::Session(session)) = HostMessage::parse(&json) {
            let first = SESSION.with(|s| s.replace(Some(session)).is_none());
            for resolve in WAITING.with(|w| w.take()) {
                let _ = resolve.call0(&JsValue::NULL);
            }
            if first {
                spawn_local(load(app));
            }
        }
    });
    window()
        .add_event_listener_with_callback("message", on_message.as_ref().unchecked_ref())
        .expect("adding a message listener to the window");
    // The listener lives as long as the page.
    on_message.forget();
}

/// Posts one of the `outgoing` messages (JSON text) to the console as an
/// object.
fn post_to_console(message: &str) {
    let Ok(Some(parent)) = window().parent() else {
        return;
    };
    if let Ok(value) = js_sys::JSON::parse(message) {
        let _ = parent.post_message(&value, "*");
    }
}

/// The current session, renewed first when it is about to expire.
async fn session() -> Session {
    let current = SESSION.with(|s| s.borrow().clone());
    match current {
        Some(session) if session.expires_at as f64 > js_sys::Date::now() + EXPIRY_MARGIN_MS => {
            session
        }
        _ => renew_session().await,
    }
}

/// Tells the console the session expired and waits for the next one.
async fn renew_session() -> Session {
    loop {
        let mut register = |resolve: js_sys::Function, _reject: js_sys::Function| {
            let first_waiter = WAITING.with(|w| {
                let mut waiting = w.borrow_mut();
                waiting.push(resolve);
                waiting.len() == 1
            });
            if first_waiter {
                post_to_console(outgoing::SESSION_EXPIRED);
            }
        };
        let _ = JsFuture::from(js_sys::Promise::new(&mut register)).await;
        if let Some(session) = SESSION.with(|s| s.borrow().clone()) {
            return session;
        }
    }
}

/// One API call with the session's credentials; a 401 renews the session
/// and retries once.
async fn call<T: DeserializeOwned>(
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<T, Failure> {
    match send(&session().await, method, path, body).await {
        Err(Failure::Unauthenticated) => send(&renew_session().await, method, path, body).await,
        answer => answer,
    }
}

async fn send<T: DeserializeOwned>(
    session: &Session,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<T, Failure> {
    let headers = Headers::new().map_err(|_| Failure::Network)?;
    let set = |name: &str, value: &str| headers.set(name, value).map_err(|_| Failure::Network);
    set("Authorization", &format!("Bearer {}", session.token))?;
    set("X-Runtime-Generation", &session.generation.to_string())?;
    set("Accept", "application/json")?;
    let init = RequestInit::new();
    init.set_method(method);
    init.set_mode(RequestMode::Cors);
    init.set_credentials(RequestCredentials::Omit);
    init.set_cache(RequestCache::NoStore);
    if let Some(body) = body {
        set("Content-Type", "application/json")?;
        init.set_body(&JsValue::from_str(body));
    }
    init.set_headers(&headers);
    let url = format!("{}{path}", session.api_base.trim_end_matches('/'));
    let request = Request::new_with_str_and_init(&url, &init).map_err(|_| Failure::Network)?;
    let response: Response = JsFuture::from(window().fetch_with_request(&request))
        .await
        .and_then(|r| r.dyn_into())
        .map_err(|_| Failure::Network)?;
    let text = match response.text() {
        Ok(promise) => JsFuture::from(promise)
            .await
            .map_err(|_| Failure::Network)?
            .as_string()
            .unwrap_or_default(),
        Err(_) => return Err(Failure::Network),
    };
    if response.ok() {
        serde_json::from_str(&text).map_err(|err| Failure::Other {
            code: "unreadable_answer".into(),
            message: format!("The console sent an answer the panel cannot read ({err})."),
        })
    } else {
        Err(Failure::from_response(response.status(), &text))
    }
}

/// Loads the configuration, then the statistics (first load, refresh and
/// retry).
async fn load(app: App) {
    let ready = matches!(app.screen.get_untracked(), Screen::Ready(_));
    if !ready {
        app.screen.set(Screen::Loading);
    }
    app.stats.set(StatsState::Loading);
    match call::<Configuration>("GET", "/configuration", None).await {
        Ok(config) => {
            show_configuration(app, config);
            load_stats(app).await;
        }
        Err(Failure::NotProvisioned) => {
            app.editing.set(false);
            app.screen.set(Screen::Setup);
        }
        Err(Failure::StaleGeneration) => app.screen.set(Screen::Problem(Problem::StaleGeneration)),
        // Keep a configured website on screen; only its statistics failed.
        Err(failure) if ready => app
            .stats
            .set(StatsState::Failed(Problem::from_failure(&failure))),
        Err(failure) => app
            .screen
            .set(Screen::Problem(Problem::from_failure(&failure))),
    }
}

/// Replaces the configuration on screen only when it changed, so a refresh
/// does not re-create an open edit form.
fn show_configuration(app: App, config: Configuration) {
    let changed = app.screen.with_untracked(|screen| match screen {
        Screen::Ready(current) => **current != config,
        _ => true,
    });
    if changed {
        app.screen.set(Screen::Ready(Box::new(config)));
    }
}

async fn load_stats(app: App) {
    app.stats.set(StatsState::Loading);
    let (start_at, end_at) = last_seven_days(js_sys::Date::now() as i64);
    match call::<Stats>("GET", &stats_path(start_at, end_at), None).await {
        Ok(stats) => app.stats.set(StatsState::Loaded(Box::new(stats))),
        Err(Failure::StaleGeneration) => app.screen.set(Screen::Problem(Problem::StaleGeneration)),
        Err(Failure::NotProvisioned) => app.screen.set(Screen::Setup),
        Err(failure) => app
            .stats
            .set(StatsState::Failed(Problem::from_failure(&failure))),
    }
}

fn submit(app: App, input: SiteInput) {
    let input = SiteInput {
        name: input.name.trim().to_string(),
        domain: input.domain.trim().to_string(),
    };
    let errors = FormErrors::check(&input);
    if !errors.is_empty() {
        show_form_errors(app, errors);
        return;
    }
    app.form.set(FormStatus {
        errors: FormErrors::default(),
        submitting: true,
    });
    spawn_local(async move {
        let body = serde_json::json!({ "name": input.name, "domain": input.domain }).to_string();
        match call::<Configuration>("POST", "/site", Some(&body)).await {
            Ok(config) => {
                app.form.set(FormStatus::default());
                app.editing.set(false);
                announce(
                    app,
                    format!("Saved. Tracking is set up for {}.", config.domain),
                );
                show_configuration(app, config);
                // The form is gone; keep focus next to where it was.
                focus_after_render("edit-site");
                load_stats(app).await;
            }
            Err(Failure::StaleGeneration) => {
                app.screen.set(Screen::Problem(Problem::StaleGeneration))
            }
            Err(failure) => show_form_errors(app, FormErrors::from_failure(&failure)),
        }
    });
}

/// Shows the form's messages and moves focus to the first invalid field, so
/// a screen reader reads the field together with its message.
fn show_form_errors(app: App, errors: FormErrors) {
    let target = if errors.name.is_some() {
        Some("site-name")
    } else if errors.domain.is_some() {
        Some("site-domain")
    } else {
        None
    };
    app.form.set(FormStatus {
        errors,
        submitting: false,
    });
    if let Some(id) = target {
        focus_after_render(id);
    }
}

fn set_editing(app: App, open: bool) {
    app.form.set(FormStatus::default());
    app.editing.set(open);
    focus_after_render(if open { "site-name" } else { "edit-site" });
}

/// Focuses an element once the pending DOM updates are done.
fn focus_after_render(id: &'static str) {
    request_animation_frame(move || {
        if let Some(element) = document()
            .get_element_by_id(id)
            .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok())
        {
            let _ = element.focus();
        }
    });
}

/// Says something through the live region, which is also shown for a few
/// seconds. Clearing it first makes a repeated message ("Copied" twice) be
/// read again.
fn announce(app: App, message: String) {
    app.announcement.set(String::new());
    set_timeout(
        move || {
            app.announcement.set(message.clone());
            set_timeout(
                move || {
                    if app.announcement.get_untracked() == message {
                        app.announcement.set(String::new());
                    }
                },
                Duration::from_secs(6),
            );
        },
        Duration::from_millis(100),
    );
}

fn copy(app: App, script: String) {
    let navigator = window().navigator();
    // `navigator.clipboard` is missing outside secure contexts.
    let has_clipboard = js_sys::Reflect::get(&navigator, &JsValue::from_str("clipboard"))
        .map(|c| !c.is_undefined())
        .unwrap_or(false);
    if !has_clipboard {
        copy_failed(app);
        return;
    }
    let written = navigator.clipboard().write_text(&script);
    spawn_local(async move {
        match JsFuture::from(written).await {
            Ok(_) => announce(app, "Copied".into()),
            Err(_) => copy_failed(app),
        }
    });
}

/// The console may not allow clipboard access in the iframe: select the
/// script so the customer can copy it with the keyboard.
fn copy_failed(app: App) {
    let selected = document()
        .get_element_by_id("tracking-script")
        .zip(window().get_selection().ok().flatten())
        .map(|(code, selection)| selection.select_all_children(&code).is_ok())
        .unwrap_or(false);
    announce(
        app,
        if selected {
            "Copying is not allowed here. The script is selected; press Ctrl+C (⌘C on a Mac) to copy it."
        } else {
            "Copying is not allowed here. Select the script and copy it with Ctrl+C (⌘C on a Mac)."
        }
        .into(),
    );
}

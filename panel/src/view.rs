//! The panel's components. They turn the model into markup and call the
//! actions from their controls; they never fetch or touch browser APIs, so
//! they render the same in the browser and in native snapshot tests.

use leptos::prelude::*;

use crate::api::{Configuration, DayPoint, SiteInput, Stats, group_thousands, range_label};
use crate::chart::Chart;
use crate::model::{FormStatus, PanelActions, PanelModel, Problem, Screen, StatsState};

/// The whole panel.
#[component]
pub fn Panel(model: PanelModel, actions: PanelActions) -> impl IntoView {
    let screen = model.screen;
    let busy = move || matches!(screen.get(), Screen::Loading).then_some("true");
    view! {
        <main class="panel" aria-busy=busy>
            {move || match screen.get() {
                Screen::Loading => view! { <LoadingView /> }.into_any(),
                Screen::Setup => view! { <SetupView form=model.form actions=actions /> }.into_any(),
                Screen::Ready(config) => {
                    view! { <Dashboard config=*config model=model actions=actions /> }.into_any()
                }
                Screen::Problem(problem) => {
                    view! { <ProblemView problem=problem actions=actions /> }.into_any()
                }
            }}
            <p class="announcement" role="status" aria-live="polite" aria-atomic="true">
                {move || model.announcement.get()}
            </p>
        </main>
    }
}

#[component]
fn LoadingView() -> impl IntoView {
    view! {
        <div class="state state-loading">
            <span class="spinner" aria-hidden="true"></span>
            <p>"Loading website analytics…"</p>
        </div>
    }
}

/// Not provisioned yet: explain and ask for the two inputs.
#[component]
fn SetupView(form: Signal<FormStatus>, actions: PanelActions) -> impl IntoView {
    view! {
        <section class="setup" aria-labelledby="setup-heading">
            <h1 id="setup-heading">"Set up website analytics"</h1>
            <p class="lead">
                "Count visitors, visits and page views of your production site. Enter its name and public domain; you get a tracking script to add to your site's layout."
            </p>
            <SiteForm
                initial=SiteInput::default()
                status=form
                submit_label="Enable tracking"
                submit=actions.submit
                cancel=None
            />
        </section>
    }
}

/// The website form, used for setup and for editing. Client-side checks and
/// the API's 422 messages both arrive through `status`.
#[component]
pub fn SiteForm(
    initial: SiteInput,
    status: Signal<FormStatus>,
    submit_label: &'static str,
    submit: Callback<SiteInput>,
    cancel: Option<Callback<bool>>,
) -> impl IntoView {
    let name = RwSignal::new(initial.name.clone());
    let domain = RwSignal::new(initial.domain.clone());
    let errors = Memo::new(move |_| status.get().errors);
    let submitting = Memo::new(move |_| status.get().submitting);

    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if !submitting.get_untracked() {
            submit.run(SiteInput {
                name: name.get_untracked(),
                domain: domain.get_untracked(),
            });
        }
    };
    let form_error = move || {
        errors.get().form.map(|message| {
            view! {
                <p id="site-form-error" class="form-error" role="alert">
                    {message}
                </p>
            }
        })
    };

    view! {
        <form
            id="site-form"
            class="site-form"
            novalidate
            aria-busy=move || submitting.get().then_some("true")
            on:submit=on_submit
        >
            <Field
                id="site-name"
                label="Website name"
                hint="Shown in the analytics dashboard, e.g. Company website."
                name="name"
                value=initial.name
                max_length=100
                error=Signal::derive(move || errors.get().name)
                on_input=Callback::new(move |value| name.set(value))
            />
            <Field
                id="site-domain"
                label="Public domain"
                hint="The hostname of your production site, e.g. www.example.com, without https://, path or port."
                name="domain"
                value=initial.domain
                max_length=253
                error=Signal::derive(move || errors.get().domain)
                on_input=Callback::new(move |value| domain.set(value))
            />
            {form_error}
            <div class="form-actions">
                <button
                    type="submit"
                    class="button primary"
                    aria-disabled=move || submitting.get().then_some("true")
                >
                    {move || if submitting.get() { "Saving…" } else { submit_label }}
                </button>
                {cancel
                    .map(|cancel| {
                        view! {
                            <button
                                type="button"
                                class="button"
                                on:click=move |_| cancel.run(false)
                            >
                                "Cancel"
                            </button>
                        }
                    })}
            </div>
        </form>
    }
}

/// One labelled text input with its hint and inline error.
#[component]
fn Field(
    id: &'static str,
    label: &'static str,
    hint: &'static str,
    name: &'static str,
    value: String,
    max_length: u32,
    error: Signal<Option<String>>,
    on_input: Callback<String>,
) -> impl IntoView {
    let hint_id = format!("{id}-hint");
    let error_id = format!("{id}-error");
    let described_by = {
        let (hint_id, error_id) = (hint_id.clone(), error_id.clone());
        move || match error.get() {
            Some(_) => format!("{hint_id} {error_id}"),
            None => hint_id.clone(),
        }
    };
    let error_text = move || {
        error.get().map(|message| {
            view! {
                <p id=error_id.clone() class="field-error">
                    {message}
                </p>
            }
        })
    };
    view! {
        <div class="field" class:invalid=move || error.get().is_some()>
            <label for=id>{label}</label>
            <p id=hint_id class="hint">
                {hint}
            </p>
            <input
                id=id
                name=name
                type="text"
                value=value
                maxlength=max_length
                required
                autocomplete="off"
                autocapitalize="off"
                spellcheck="false"
                aria-invalid=move || error.get().is_some().then_some("true")
                aria-describedby=described_by
                on:input=move |ev| on_input.run(event_target_value(&ev))
            />
            {error_text}
        </div>
    }
}

/// A configured website: header, statistics and the tracking script.
#[component]
fn Dashboard(config: Configuration, model: PanelModel, actions: PanelActions) -> impl IntoView {
    let editing = model.editing;
    let initial = SiteInput {
        name: config.name.clone(),
        domain: config.domain.clone(),
    };
    let edit_form = move || {
        editing.get().then(|| {
            view! {
                <section class="edit" aria-labelledby="edit-heading">
                    <h2 id="edit-heading">"Change website"</h2>
                    <p class="hint">
                        "A new name renames the website. A new domain starts a separate website with its own statistics."
                    </p>
                    <SiteForm
                        initial=initial.clone()
                        status=model.form
                        submit_label="Save changes"
                        submit=actions.submit
                        cancel=Some(actions.set_editing)
                    />
                </section>
            }
        })
    };
    let restricted_to = if config.domain_restriction.is_empty() {
        config.domain.clone()
    } else {
        config.domain_restriction.join(" or ")
    };
    view! {
        <header class="site-header">
            <div class="site-title">
                <h1>{config.name.clone()}</h1>
                <p class="site-domain">{config.domain.clone()}</p>
            </div>
            <div class="header-actions">
                <button
                    id="edit-site"
                    type="button"
                    class="button"
                    aria-expanded=move || if editing.get() { "true" } else { "false" }
                    aria-controls="site-form"
                    on:click=move |_| actions.set_editing.run(!editing.get_untracked())
                >
                    "Edit"
                </button>
                <a
                    class="button"
                    href=config.dashboard_url.clone()
                    target="_blank"
                    rel="noopener noreferrer"
                >
                    "Open dashboard"
                    <span class="visually-hidden">" (opens in a new tab)"</span>
                </a>
            </div>
        </header>
        {edit_form}
        <StatsSection stats=model.stats actions=actions />
        <section class="script" aria-labelledby="script-heading">
            <h2 id="script-heading">"Tracking script"</h2>
            <p>
                "Add this tag to the " <code>"<head>"</code>
                " of your site's layout."
            </p>
            <pre><code id="tracking-script">{config.tracking_script.clone()}</code></pre>
            <div class="script-actions">
                <button
                    type="button"
                    class="button primary"
                    aria-describedby="script-heading"
                    on:click={
                        let script = config.tracking_script.clone();
                        move |_| actions.copy.run(script.clone())
                    }
                >
                    "Copy"
                </button>
            </div>
            <p class="restriction">
                "Only page views from " <strong>{restricted_to}</strong>
                " are counted; preview deployments on other hostnames are ignored."
            </p>
        </section>
    }
}

#[component]
fn StatsSection(stats: Signal<StatsState>, actions: PanelActions) -> impl IntoView {
    let loading = move || matches!(stats.get(), StatsState::Loading);
    view! {
        <section
            class="stats"
            aria-labelledby="stats-heading"
            aria-busy=move || loading().then_some("true")
        >
            <div class="section-head">
                <h2 id="stats-heading">"Last seven days"</h2>
                <button
                    type="button"
                    class="button"
                    aria-disabled=move || loading().then_some("true")
                    on:click=move |_| {
                        if !loading() {
                            actions.refresh.run(())
                        }
                    }
                >
                    "Refresh"
                </button>
            </div>
            {move || match stats.get() {
                StatsState::Loading => {
                    view! { <p class="muted">"Loading statistics…"</p> }.into_any()
                }
                StatsState::Loaded(stats) => view! { <StatsBody stats=*stats /> }.into_any(),
                StatsState::Failed(problem) => {
                    view! { <ProblemNotice problem=problem actions=actions /> }.into_any()
                }
            }}
        </section>
    }
}

#[component]
fn StatsBody(stats: Stats) -> impl IntoView {
    let no_traffic = stats.pageviews == 0 && stats.series.iter().all(|d| d.pageviews == 0);
    let empty_note = no_traffic.then(|| {
        view! {
            <p class="empty-note">
                "No page views in the last seven days. Once the tracking script below is in your site's layout, visits show up here within a few minutes."
            </p>
        }
    });
    let series = stats.series.clone();
    let chart = (!series.is_empty()).then(|| {
        view! {
            <Chart series=series.clone() />
            <DayTable series=series />
        }
    });
    view! {
        <p class="range">{range_label(&stats)} " (UTC)"</p>
        <dl class="cards">
            <Card label="Visitors" value=stats.visitors />
            <Card label="Visits" value=stats.visits />
            <Card label="Page views" value=stats.pageviews />
        </dl>
        {empty_note}
        {chart}
    }
}

#[component]
fn Card(label: &'static str, value: u64) -> impl IntoView {
    view! {
        <div class="card">
            <dt>{label}</dt>
            <dd>{group_thousands(value)}</dd>
        </div>
    }
}

/// The chart's data for screen readers and anyone who prefers numbers.
#[component]
fn DayTable(series: Vec<DayPoint>) -> impl IntoView {
    // Hidden by its wrapper: a table is never narrower than its content,
    // so `.visually-hidden` on the table itself would widen the panel.
    view! {
        <div class="visually-hidden">
        <table>
            <caption>"Page views and visitors per day (UTC)"</caption>
            <thead>
                <tr>
                    <th scope="col">"Day"</th>
                    <th scope="col">"Page views"</th>
                    <th scope="col">"Visitors"</th>
                </tr>
            </thead>
            <tbody>
                {series
                    .into_iter()
                    .map(|day| {
                        let label = crate::api::Date::parse(&day.date)
                            .map(|d| d.long())
                            .unwrap_or(day.date);
                        view! {
                            <tr>
                                <th scope="row">{label}</th>
                                <td>{group_thousands(day.pageviews)}</td>
                                <td>{group_thousands(day.visitors)}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        </div>
    }
}

/// A whole-panel failure.
#[component]
fn ProblemView(problem: Problem, actions: PanelActions) -> impl IntoView {
    let (class, heading, text) = problem_text(&problem);
    view! {
        <section class=format!("state {class}") role="alert" aria-labelledby="problem-heading">
            <h1 id="problem-heading">{heading}</h1>
            <p>{text}</p>
            <ProblemButton problem=problem actions=actions />
        </section>
    }
}

/// A failure of the statistics only; the rest of the dashboard stays usable.
#[component]
fn ProblemNotice(problem: Problem, actions: PanelActions) -> impl IntoView {
    let (class, heading, text) = problem_text(&problem);
    view! {
        <div class=format!("notice {class}") role="alert">
            <h3>{heading}</h3>
            <p>{text}</p>
            <ProblemButton problem=problem actions=actions />
        </div>
    }
}

#[component]
fn ProblemButton(problem: Problem, actions: PanelActions) -> impl IntoView {
    match problem {
        Problem::StaleGeneration => view! {
            <button type="button" class="button primary" on:click=move |_| actions.reload.run(())>
                "Reload"
            </button>
        }
        .into_any(),
        Problem::ProviderDown | Problem::Error(_) => view! {
            <button type="button" class="button primary" on:click=move |_| actions.refresh.run(())>
                "Try again"
            </button>
        }
        .into_any(),
    }
}

/// CSS class, heading and sentence of a problem.
fn problem_text(problem: &Problem) -> (&'static str, &'static str, String) {
    match problem {
        Problem::StaleGeneration => (
            "state-stale",
            "Reload needed",
            "This extension was updated or its access changed. Reload to continue.".into(),
        ),
        Problem::ProviderDown => (
            "state-provider-down",
            "Analytics provider unavailable",
            "The analytics provider is not reachable right now. Your settings are safe; try again in a few minutes.".into(),
        ),
        Problem::Error(message) => ("state-error", "Something went wrong", message.clone()),
    }
}

//! The panel's states rendered natively (Leptos `ssr`) from fixed inputs.
//! The HTML is indented for review before it is compared with the snapshot;
//! text is kept byte for byte.

use leptos::prelude::*;
use panel::api::{Configuration, DayPoint, FormErrors, Stats};
use panel::model::{FormStatus, PanelActions, PanelModel, Problem, Screen, StatsState};
use panel::view::Panel;

const WEBSITE_ID: &str = "5b0f6c1e-8d2a-5c47-9e3b-2f6a7d4c1b90";

fn configuration() -> Configuration {
    Configuration {
        project_id: "acme-shop".into(),
        website_id: WEBSITE_ID.into(),
        name: "Acme shop".into(),
        domain: "shop.acme.example".into(),
        revision: 2,
        tracking_script: format!(
            r#"<script defer src="https://analytics.platform.example/script.js" data-website-id="{WEBSITE_ID}" data-domains="shop.acme.example"></script>"#
        ),
        script_url: "https://analytics.platform.example/script.js".into(),
        domain_restriction: vec!["shop.acme.example".into()],
        tracking_origin: "https://analytics.platform.example".into(),
        dashboard_url: format!("https://analytics.platform.example/websites/{WEBSITE_ID}"),
    }
}

fn day(date: &str, pageviews: u64, visitors: u64) -> DayPoint {
    DayPoint {
        date: date.into(),
        pageviews,
        visitors,
    }
}

/// 15 to 21 Nov 2026 (UTC), with no traffic on the 18th.
fn week() -> Stats {
    Stats {
        website_id: WEBSITE_ID.into(),
        start_at: 1_794_700_800_000,
        end_at: 1_795_238_700_000,
        visitors: 610,
        visits: 742,
        pageviews: 2_345,
        bounces: Some(301),
        totaltime: Some(48_200),
        series: vec![
            day("2026-11-15", 310, 88),
            day("2026-11-16", 472, 131),
            day("2026-11-17", 1_020, 205),
            day("2026-11-18", 0, 0),
            day("2026-11-19", 198, 61),
            day("2026-11-20", 265, 83),
            day("2026-11-21", 80, 42),
        ],
    }
}

fn quiet_week() -> Stats {
    Stats {
        visitors: 0,
        visits: 0,
        pageviews: 0,
        bounces: None,
        totaltime: None,
        series: week()
            .series
            .into_iter()
            .map(|d| day(&d.date, 0, 0))
            .collect(),
        ..week()
    }
}

struct State {
    screen: Screen,
    stats: StatsState,
    editing: bool,
    form: FormStatus,
}

impl State {
    fn screen(screen: Screen) -> State {
        State {
            screen,
            stats: StatsState::Loading,
            editing: false,
            form: FormStatus::default(),
        }
    }

    fn ready(stats: StatsState) -> State {
        State {
            stats,
            ..State::screen(Screen::Ready(Box::new(configuration())))
        }
    }
}

fn render(state: State) -> String {
    let owner = Owner::new();
    let html = owner.with(|| {
        let model = PanelModel {
            screen: Signal::stored(state.screen),
            stats: Signal::stored(state.stats),
            editing: Signal::stored(state.editing),
            form: Signal::stored(state.form),
            announcement: Signal::stored(String::new()),
        };
        let actions = PanelActions {
            submit: Callback::new(|_| ()),
            set_editing: Callback::new(|_| ()),
            refresh: Callback::new(|()| ()),
            reload: Callback::new(|()| ()),
            copy: Callback::new(|_| ()),
        };
        view! { <Panel model=model actions=actions /> }.to_html()
    });
    indent(&html)
}

/// One tag or text run per line, indented by nesting depth.
fn indent(html: &str) -> String {
    const VOID: [&str; 4] = ["input", "br", "img", "meta"];
    let mut out = String::new();
    let mut depth = 0usize;
    let mut rest = html;
    while !rest.is_empty() {
        let (token, tail) = if rest.starts_with('<') {
            let mut quote = None;
            let end = rest
                .char_indices()
                .find(|&(_, c)| match (quote, c) {
                    (None, '"') => {
                        quote = Some(c);
                        false
                    }
                    (Some(_), '"') => {
                        quote = None;
                        false
                    }
                    (None, '>') => true,
                    _ => false,
                })
                .map(|(i, _)| i + 1)
                .expect("unterminated tag");
            rest.split_at(end)
        } else {
            rest.split_at(rest.find('<').unwrap_or(rest.len()))
        };
        rest = tail;
        if token.trim().is_empty() {
            continue;
        }
        let name: String = token
            .trim_start_matches(['<', '/'])
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        let closing = token.starts_with("</");
        if closing {
            depth = depth.saturating_sub(1);
        }
        out.push_str(&"  ".repeat(depth));
        out.push_str(token);
        out.push('\n');
        let opening = token.starts_with('<')
            && !closing
            && !token.starts_with("<!")
            && !token.ends_with("/>")
            && !VOID.contains(&name.as_str());
        if opening {
            depth += 1;
        }
    }
    out
}

#[test]
fn loading() {
    insta::assert_snapshot!(render(State::screen(Screen::Loading)));
}

#[test]
fn setup_form() {
    insta::assert_snapshot!(render(State::screen(Screen::Setup)));
}

#[test]
fn setup_form_with_inline_errors() {
    let html = render(State {
        form: FormStatus {
            errors: FormErrors {
                name: Some("Enter a website name.".into()),
                ..FormErrors::from_invalid_input(
                    "domain: must be a hostname without scheme, path or port",
                )
            },
            submitting: false,
        },
        ..State::screen(Screen::Setup)
    });
    insta::assert_snapshot!(html);
}

#[test]
fn setup_form_with_a_message_for_no_field() {
    let html = render(State {
        form: FormStatus {
            errors: FormErrors::from_failure(&panel::api::Failure::ProviderUnavailable),
            submitting: false,
        },
        ..State::screen(Screen::Setup)
    });
    insta::assert_snapshot!(html);
}

#[test]
fn setup_form_submitting() {
    let html = render(State {
        form: FormStatus {
            errors: FormErrors::default(),
            submitting: true,
        },
        ..State::screen(Screen::Setup)
    });
    insta::assert_snapshot!(html);
}

#[test]
fn provisioned_with_stats() {
    insta::assert_snapshot!(render(State::ready(StatsState::Loaded(Box::new(week())))));
}

#[test]
fn provisioned_with_zero_traffic() {
    insta::assert_snapshot!(render(State::ready(StatsState::Loaded(Box::new(
        quiet_week()
    )))));
}

#[test]
fn provisioned_while_stats_load() {
    insta::assert_snapshot!(render(State::ready(StatsState::Loading)));
}

#[test]
fn provisioned_editing() {
    let html = render(State {
        editing: true,
        ..State::ready(StatsState::Loaded(Box::new(week())))
    });
    insta::assert_snapshot!(html);
}

#[test]
fn provider_down_for_stats() {
    insta::assert_snapshot!(render(State::ready(StatsState::Failed(
        Problem::ProviderDown
    ))));
}

#[test]
fn provider_down() {
    insta::assert_snapshot!(render(State::screen(Screen::Problem(
        Problem::ProviderDown
    ))));
}

#[test]
fn error() {
    let problem = Problem::Error(
        "The extension is not granted to this project. Ask an operator to grant it.".into(),
    );
    insta::assert_snapshot!(render(State::screen(Screen::Problem(problem))));
}

#[test]
fn stale_generation() {
    insta::assert_snapshot!(render(State::screen(Screen::Problem(
        Problem::StaleGeneration
    ))));
}

#[test]
fn inline_errors_are_tied_to_their_fields() {
    let html = render(State {
        form: FormStatus {
            errors: FormErrors::from_invalid_input("domain: must not be an IP address"),
            submitting: false,
        },
        ..State::screen(Screen::Setup)
    });
    let domain_input = html
        .lines()
        .find(|l| l.contains(r#"id="site-domain""#) && l.contains("<input"))
        .expect("domain input");
    assert!(domain_input.contains(r#"aria-invalid="true""#));
    assert!(domain_input.contains(r#"aria-describedby="site-domain-hint site-domain-error""#));
    assert!(html.contains(r#"<p id="site-domain-error" class="field-error">"#));
    assert!(html.contains("Must not be an IP address."));
    let name_input = html
        .lines()
        .find(|l| l.contains(r#"id="site-name""#) && l.contains("<input"))
        .expect("name input");
    assert!(!name_input.contains("aria-invalid"));
    assert!(name_input.contains(r#"aria-describedby="site-name-hint""#));
}

#[test]
fn the_chart_draws_a_day_without_traffic_as_an_empty_bar() {
    let html = render(State::ready(StatsState::Loaded(Box::new(week()))));
    let bars: Vec<&str> = html
        .lines()
        .filter(|l| l.contains(r#"class="bar""#))
        .collect();
    assert_eq!(bars.len(), 7);
    assert!(bars[3].contains(r#"height="0.0""#), "{}", bars[3]);
    assert!(!bars[2].contains(r#"height="0.0""#));
    assert!(html.contains(r#"role="img""#));
    assert!(html.lines().any(|l| l.trim() == "Wed 18 Nov 2026"));
}

//! The per-day chart: bars for page views, a line for visitors, as SVG.
//!
//! The SVG is one image to assistive technology (`role="img"`, a `<title>`
//! and an `aria-label` summary); the numbers themselves are in the
//! visually-hidden table next to it.

use leptos::prelude::*;

use crate::api::{Date, DayPoint, group_thousands};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 40.0;
const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;
const PLOT_HEIGHT: f64 = HEIGHT - TOP - BOTTOM;
const AXIS_Y: f64 = TOP + PLOT_HEIGHT;

/// The top of the value axis and its tick step: four equal integer steps of
/// 1, 2 or 5 times a power of ten, reaching at least `max`.
pub fn axis_scale(max: u64) -> (u64, u64) {
    let mut magnitude = 1u64;
    loop {
        for factor in [1, 2, 5] {
            let step = factor * magnitude;
            if step * 4 >= max {
                return (step * 4, step);
            }
        }
        magnitude *= 10;
    }
}

/// Coordinates are written with one decimal so the markup is stable.
fn coord(value: f64) -> String {
    format!("{value:.1}")
}

fn day_label(day: &DayPoint) -> (String, String) {
    match Date::parse(&day.date) {
        Some(date) => (date.weekday().to_string(), date.short()),
        None => (String::new(), day.date.clone()),
    }
}

/// The chart's accessible summary.
pub fn summary(series: &[DayPoint]) -> String {
    let total: u64 = series.iter().map(|d| d.pageviews).sum();
    let first = series.first().map(day_label).map(|(_, d)| d);
    let last = series.last().map(day_label).map(|(_, d)| d);
    let span = match (first, last) {
        (Some(first), Some(last)) => format!(" from {first} to {last}"),
        _ => String::new(),
    };
    // The first of the busiest days.
    let busiest = series
        .iter()
        .rev()
        .max_by_key(|d| d.pageviews)
        .filter(|d| d.pageviews > 0);
    match busiest {
        Some(day) => {
            let name = Date::parse(&day.date)
                .map(|d| d.long())
                .unwrap_or_else(|| day.date.clone());
            format!(
                "Page views and visitors per day{span}: {} page views in total; the busiest day was {name} with {} page views and {} visitors.",
                group_thousands(total),
                group_thousands(day.pageviews),
                group_thousands(day.visitors)
            )
        }
        None => format!("Page views and visitors per day{span}: no page views."),
    }
}

#[component]
pub fn Chart(series: Vec<DayPoint>) -> impl IntoView {
    let peak = series
        .iter()
        .map(|d| d.pageviews.max(d.visitors))
        .max()
        .unwrap_or(0);
    let (top, step) = axis_scale(peak);
    let y = move |value: u64| AXIS_Y - PLOT_HEIGHT * value as f64 / top as f64;
    let slot = PLOT_WIDTH / series.len().max(1) as f64;
    let center = move |i: usize| LEFT + slot * (i as f64 + 0.5);
    let bar_width = (slot * 0.56).min(48.0);
    let label = summary(&series);
    let title = label.clone();

    let grid = (0..=4)
        .map(|i| {
            let value = step * i;
            view! {
                <g class="tick">
                    <line
                        class="grid"
                        x1=coord(LEFT)
                        x2=coord(WIDTH - RIGHT)
                        y1=coord(y(value))
                        y2=coord(y(value))
                    />
                    <text class="tick-label" x=coord(LEFT - 6.0) y=coord(y(value) + 4.0) text-anchor="end">
                        {group_thousands(value)}
                    </text>
                </g>
            }
        })
        .collect_view();

    let days = series
        .iter()
        .enumerate()
        .map(|(i, day)| {
            let (weekday, date) = day_label(day);
            let height = AXIS_Y - y(day.pageviews);
            let title = format!(
                "{date}: {} page views, {} visitors",
                group_thousands(day.pageviews),
                group_thousands(day.visitors)
            );
            view! {
                <g class="day">
                    <title>{title}</title>
                    <rect
                        class="bar"
                        x=coord(center(i) - bar_width / 2.0)
                        y=coord(AXIS_Y - height)
                        width=coord(bar_width)
                        height=coord(height)
                        rx="2"
                    />
                    <text class="day-label" x=coord(center(i)) y=coord(AXIS_Y + 16.0) text-anchor="middle">
                        {weekday}
                    </text>
                    <text class="day-label" x=coord(center(i)) y=coord(AXIS_Y + 31.0) text-anchor="middle">
                        {date}
                    </text>
                </g>
            }
        })
        .collect_view();

    let points = series
        .iter()
        .enumerate()
        .map(|(i, day)| format!("{},{}", coord(center(i)), coord(y(day.visitors))))
        .collect::<Vec<_>>();
    let dots = series
        .iter()
        .enumerate()
        .map(|(i, day)| {
            view! { <circle class="dot" cx=coord(center(i)) cy=coord(y(day.visitors)) r="3.5" /> }
        })
        .collect_view();

    view! {
        <figure class="chart">
            <svg
                role="img"
                aria-label=label
                viewBox=format!("0 0 {WIDTH} {HEIGHT}")
                preserveAspectRatio="xMidYMid meet"
            >
                <title>{title}</title>
                {grid}
                {days}
                <polyline class="line" points=points.join(" ") fill="none" />
                {dots}
            </svg>
            <figcaption class="legend" aria-hidden="true">
                <span class="key key-pageviews"></span>
                "Page views"
                <span class="key key-visitors"></span>
                "Visitors"
            </figcaption>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axis_reaches_the_peak_in_round_steps() {
        assert_eq!(axis_scale(0), (4, 1));
        assert_eq!(axis_scale(4), (4, 1));
        assert_eq!(axis_scale(5), (8, 2));
        assert_eq!(axis_scale(9), (20, 5));
        assert_eq!(axis_scale(40), (40, 10));
        assert_eq!(axis_scale(41), (80, 20));
        assert_eq!(axis_scale(1234), (2000, 500));
    }

    #[test]
    fn the_summary_names_the_first_busiest_day() {
        let day = |date: &str, pageviews, visitors| DayPoint {
            date: date.into(),
            pageviews,
            visitors,
        };
        let series = [
            day("2026-11-15", 3, 1),
            day("2026-11-16", 9, 4),
            day("2026-11-17", 9, 2),
        ];
        assert_eq!(
            summary(&series),
            "Page views and visitors per day from 15 Nov to 17 Nov: 21 page views in total; the busiest day was Mon 16 Nov 2026 with 9 page views and 4 visitors."
        );
        assert_eq!(
            summary(&[day("2026-11-15", 0, 0)]),
            "Page views and visitors per day from 15 Nov to 15 Nov: no page views."
        );
    }
}

//! What the panel shows, as plain data. The browser app (`app`) owns signals
//! of these types and changes them as answers arrive; the components in
//! `view` only read them, so the same components render natively in
//! snapshot tests.

use leptos::prelude::*;

use crate::api::{Configuration, Failure, FormErrors, SiteInput, Stats};

/// The panel's main state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Screen {
    /// Waiting for the console's session or the first configuration answer.
    Loading,
    /// Not provisioned yet: the setup form.
    Setup,
    /// A website is configured.
    Ready(Box<Configuration>),
    /// Nothing useful can be shown; the problem says what helps.
    Problem(Problem),
}

/// The statistics part of a configured website.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsState {
    Loading,
    Loaded(Box<Stats>),
    Failed(Problem),
}

/// A failure as the customer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The extension was upgraded or its access changed: reload.
    StaleGeneration,
    /// The analytics provider is not reachable: retry later.
    ProviderDown,
    /// Anything else, with a message from the host (never a secret).
    Error(String),
}

impl Problem {
    /// How a failed call is shown when it is not handled on the spot (a 404
    /// opens the setup form, a 422 goes under its field, a 401 is retried).
    pub fn from_failure(failure: &Failure) -> Problem {
        match failure {
            Failure::StaleGeneration => Problem::StaleGeneration,
            Failure::ProviderUnavailable => Problem::ProviderDown,
            other => Problem::Error(other.message()),
        }
    }
}

/// The setup form's status (its field values live in the form itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormStatus {
    pub errors: FormErrors,
    pub submitting: bool,
}

/// Everything the panel renders from. Each part is a separate signal so that,
/// e.g., statistics arriving do not re-create a form the customer is typing in.
#[derive(Clone, Copy)]
pub struct PanelModel {
    pub screen: Signal<Screen>,
    pub stats: Signal<StatsState>,
    /// The "Edit" form of a configured website is open.
    pub editing: Signal<bool>,
    pub form: Signal<FormStatus>,
    /// Read out by screen readers through a polite live region ("Copied").
    pub announcement: Signal<String>,
}

/// What the controls ask the app to do.
#[derive(Clone, Copy)]
pub struct PanelActions {
    /// Create or update the website from the form.
    pub submit: Callback<SiteInput>,
    /// Open (`true`) or close the edit form.
    pub set_editing: Callback<bool>,
    /// Load the configuration and statistics again (refresh and retry).
    pub refresh: Callback<()>,
    /// Ask the console to reload the panel (stale generation).
    pub reload: Callback<()>,
    /// Copy the tracking script to the clipboard.
    pub copy: Callback<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_map_to_what_helps() {
        assert_eq!(
            Problem::from_failure(&Failure::StaleGeneration),
            Problem::StaleGeneration
        );
        assert_eq!(
            Problem::from_failure(&Failure::ProviderUnavailable),
            Problem::ProviderDown
        );
        assert_eq!(
            Problem::from_failure(&Failure::Other {
                code: "forbidden".into(),
                message: "The extension is not granted to this project.".into()
            }),
            Problem::Error("The extension is not granted to this project.".into())
        );
        assert!(matches!(
            Problem::from_failure(&Failure::Network),
            Problem::Error(message) if message.contains("could not be reached")
        ));
    }
}

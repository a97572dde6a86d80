//! The steps of a tracking domain's state machine (`state::tracking`) and
//! what it refuses. Apart from `tracking` so that [`super::StateError`] can
//! carry a refusal without `error` and `tracking` importing each other.

/// The steps of a tracking domain, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// The challenge is issued; the records are to be created.
    Added,
    /// Both records were found.
    Verified,
    /// The routing for the hostname is applied.
    Routed,
    /// A valid certificate for the hostname is served.
    TlsReady,
    /// The project's `tracking_origin` is `https://<hostname>`.
    Active,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Added => "added",
            Step::Verified => "verified",
            Step::Routed => "routed",
            Step::TlsReady => "tls-ready",
            Step::Active => "active",
        }
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        [
            Step::Added,
            Step::Verified,
            Step::Routed,
            Step::TlsReady,
            Step::Active,
        ]
        .into_iter()
        .find(|step| step.as_str() == text)
    }

    /// The command that moves a domain on from this step.
    pub fn next_command(self) -> &'static str {
        match self {
            Step::Added => "tracking-domain verify",
            Step::Verified => "tracking-domain plan, then apply --yes",
            Step::Routed => "tracking-domain wait-tls",
            Step::TlsReady => "tracking-domain activate",
            Step::Active => "nothing: the domain is active",
        }
    }

    /// What the steps say about TLS: `wait-tls` moves a domain from
    /// `routed` to `tls-ready` only once a valid certificate was served.
    pub fn tls_state(self) -> &'static str {
        match self {
            Step::Added | Step::Verified => "not checked (the hostname is not routed yet)",
            Step::Routed => "not seen valid yet (run tracking-domain wait-tls)",
            Step::TlsReady | Step::Active => {
                "a valid certificate for the hostname was served (checked by wait-tls)"
            }
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the tracking-domain state refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackingRefusal {
    #[error("hostname {hostname} is already bound to project {project}; remove it there first")]
    BoundElsewhere { hostname: String, project: String },
    #[error(
        "hostname {hostname} is not a tracking domain of project {project}; add it with `tracking-domain add`"
    )]
    Unknown { hostname: String, project: String },
    #[error(
        "hostname {hostname} is at step {at}, and this step needs {needs}; run `{}` first",
        at.next_command()
    )]
    OutOfOrder {
        hostname: String,
        at: Step,
        needs: Step,
    },
    #[error(
        "the routing changed since the plan you reviewed ({reviewed}; now {now}); run `tracking-domain plan` again"
    )]
    PlanChanged { reviewed: String, now: String },
    #[error("the stored step `{value}` of {hostname} is not one this host knows")]
    UnknownStep { hostname: String, value: String },
}

//! The operator flow of a tracking domain, step by step: `configure`,
//! `add` (hostname rules, the records to create), `verify` (DNS) and
//! `status`. Each step checks the one before it through the state's step
//! machine (`state::tracking`).

use super::operator::check_project;
use super::{Host, HostError};
use crate::state::{StateError, Step, TrackingDomain, TrackingRoute, TrackingSettings};
use crate::tracking::challenge::{KEY_LEN, challenge_name, challenge_value};
use crate::tracking::dns::{self, DnsOptions, DnsReport, ResolverError};
use crate::tracking::edge::{self, EdgeAnswer, Probe};
use crate::tracking::hostname::{self, HostnameError};
use crate::tracking::ingress::Plan;
use crate::tracking::tls::{self, TlsCheck, TlsOptions, TlsSetupError, TlsTimeout};

/// Why a tracking-domain step cannot run (besides the state's refusals).
#[derive(Debug, thiserror::Error)]
pub enum TrackingError {
    #[error(transparent)]
    Hostname(#[from] HostnameError),
    #[error("hostname {hostname} is reserved by the platform ({why})")]
    Reserved { hostname: String, why: String },
    #[error(
        "no ingress target is set; set it with `tracking-domain configure --ingress-target HOST`"
    )]
    NoIngressTarget,
    #[error("--ingress-target: {0}")]
    IngressTarget(HostnameError),
    #[error(transparent)]
    Resolver(#[from] ResolverError),
    #[error(
        "project {project} has no `provider` binding, so {hostname} has nowhere to route; set it with `binding set --project {project} --name provider …`"
    )]
    NoProvider { project: String, hostname: String },
    #[error("apply needs --yes (review the routing with `tracking-domain plan` first)")]
    NotConfirmed,
    #[error(
        "--plan `{0}` is not a plan id (16 hexadecimal digits, the last line of `tracking-domain plan`)"
    )]
    MalformedPlanId(String),
    #[error(transparent)]
    TlsSetup(#[from] TlsSetupError),
    #[error(transparent)]
    TlsTimeout(#[from] TlsTimeout),
    #[error(
        "{hostname} is not activated: the edge does not serve the provider's tracker there ({reason}); fix the edge (`tracking-domain export nginx`, reload), then run activate again"
    )]
    NotServed { hostname: String, reason: String },
    #[error(
        "{hostname} is no longer routed here, but the edge still serves it ({reason}); re-export (`tracking-domain export nginx`) and reload the edge, then run remove again, or pass --removed-from-edge if you removed it from the edge yourself"
    )]
    StillServed { hostname: String, reason: String },
    #[error(
        "cannot tell whether the edge still serves {hostname} ({reason}); nothing was forgotten and the domain stays out of the routing. Ask the edge directly (--address IP:PORT, --roots PEM for a private CA) and run remove again, or pass --removed-from-edge if you removed it from the edge yourself"
    )]
    EdgeUnknown { hostname: String, reason: String },
    #[error("{hostname} of project {project} is not being removed; nothing to keep")]
    NotBeingRemoved { project: String, hostname: String },
}

/// The certificate a routed tracking hostname serves, as last looked at.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CertificateState {
    pub hostname: String,
    pub project_id: String,
    /// The leaf's `notAfter`, seconds since the Unix epoch.
    pub expires_at: Option<u64>,
    /// Whole days until then (negative: expired).
    pub days_left: Option<i64>,
    /// Why the certificate could not be checked.
    pub error: Option<String>,
}

/// How `remove` makes sure the edge stopped serving the hostname.
#[derive(Debug, Clone)]
pub enum EdgeRemoval {
    /// Check it through the edge (like `activate`'s check, the same options).
    Check(TlsOptions),
    /// The operator confirms the edge no longer serves the hostname.
    RemovedElsewhere,
}

/// What `add` hands the operator: the domain and the two records to create.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrackingRecords {
    pub domain: TrackingDomain,
    pub txt_name: String,
    pub txt_value: String,
    pub cname_name: String,
    pub cname_target: String,
}

impl Host {
    /// Sets the tracking-domain settings: the ingress target every CNAME
    /// must lead to, the console's host and further reserved hostnames.
    pub fn configure_tracking(
        &self,
        ingress_target: Option<&str>,
        console_host: Option<&str>,
        reserved: Option<Vec<String>>,
    ) -> Result<TrackingSettings, HostError> {
        let mut settings = self.state.tracking_settings()?;
        if let Some(target) = ingress_target {
            let target = hostname::normalize(target).or_else(|e| match e {
                // The provider's ingress may well sit at an apex of its own.
                HostnameError::Apex { hostname } => Ok(hostname),
                other => Err(TrackingError::IngressTarget(other)),
            })?;
            settings.ingress_target = Some(target);
        }
        if let Some(console) = console_host {
            settings.console_host = Some(hostname::host_of(console));
        }
        if let Some(reserved) = reserved {
            settings.reserved = reserved.iter().map(|h| hostname::host_of(h)).collect();
        }
        self.state.set_tracking_settings(&settings)?;
        Ok(settings)
    }

    pub fn tracking_settings(&self) -> Result<TrackingSettings, HostError> {
        Ok(self.state.tracking_settings()?)
    }

    /// `add`: checks the hostname (normalised, not an apex, IP or wildcard,
    /// not reserved, not bound to another project) and stores it at step
    /// `added`; answers the TXT challenge and the CNAME to create. Running
    /// it again for the same project answers the same records.
    pub fn add_tracking_domain(
        &self,
        project: &str,
        hostname: &str,
    ) -> Result<TrackingRecords, HostError> {
        check_project(project)?;
        let hostname = hostname::normalize(hostname).map_err(TrackingError::from)?;
        let settings = self.state.tracking_settings()?;
        let target = settings
            .ingress_target
            .clone()
            .ok_or(TrackingError::NoIngressTarget)?;
        if let Some(why) = self.reserved_because(&settings, &hostname)? {
            return Err(TrackingError::Reserved { hostname, why }.into());
        }
        let challenge = self.challenge(project, &hostname)?;
        let domain = self
            .state
            .add_tracking_domain(project, &hostname, &challenge, &target)?;
        Ok(TrackingRecords {
            txt_name: challenge_name(&domain.hostname),
            txt_value: domain.challenge.clone(),
            cname_name: domain.hostname.clone(),
            cname_target: domain.ingress_target.clone(),
            domain,
        })
    }

    /// Why `hostname` is the platform's, if it is: the configured list, the
    /// console's host, the ingress target, and every binding's origin host
    /// (the provider's own host among them).
    fn reserved_because(
        &self,
        settings: &TrackingSettings,
        hostname: &str,
    ) -> Result<Option<String>, HostError> {
        if settings.reserved.iter().any(|h| h == hostname) {
            return Ok(Some("on the reserved list".into()));
        }
        if settings.console_host.as_deref() == Some(hostname) {
            return Ok(Some("the console's host".into()));
        }
        if settings.ingress_target.as_deref() == Some(hostname) {
            return Ok(Some("the provider's ingress target".into()));
        }
        if let Some(binding) = self
            .state
            .bindings(None)?
            .into_iter()
            .find(|b| hostname::host_of(&b.origin) == hostname)
        {
            return Ok(Some(format!(
                "the origin of binding `{}` of project {}",
                binding.name, binding.project_id
            )));
        }
        Ok(None)
    }

    /// The challenge for (project, hostname) under the host's key,
    /// computed afresh (a stored value is never trusted).
    fn challenge(&self, project: &str, hostname: &str) -> Result<String, HostError> {
        let key = self.state.tracking_challenge_key()?;
        let key: &[u8; KEY_LEN] = key.as_slice().try_into().map_err(|_| {
            StateError::Corrupt(format!(
                "the tracking challenge key is {} bytes, not {KEY_LEN}",
                key.len()
            ))
        })?;
        Ok(challenge_value(key, project, hostname))
    }

    /// `verify`: asks DNS for the domain's TXT challenge and CNAME, stores
    /// the report and, when both are found, moves the domain from `added`
    /// to `verified`.
    pub fn verify_tracking_domain(
        &self,
        project: &str,
        hostname: &str,
        options: &DnsOptions,
    ) -> Result<(TrackingDomain, DnsReport), HostError> {
        check_project(project)?;
        let hostname = hostname::normalize(hostname).map_err(TrackingError::from)?;
        let domain = self.state.project_tracking_domain(project, &hostname)?;
        let expected = self.challenge(project, &hostname)?;
        let report = dns::check(options, &hostname, &expected, &domain.ingress_target)
            .map_err(TrackingError::from)?;
        let json = serde_json::to_value(&report)
            .map_err(|e| StateError::Corrupt(format!("a DNS report: {e}")))?;
        let domain =
            self.state
                .record_tracking_dns(project, &hostname, &json, report.verified())?;
        Ok((domain, report))
    }

    /// A project's tracking domain, for `status`.
    pub fn tracking_domain(
        &self,
        project: &str,
        hostname: &str,
    ) -> Result<TrackingDomain, HostError> {
        check_project(project)?;
        let hostname = hostname::normalize(hostname).map_err(TrackingError::from)?;
        Ok(self.state.project_tracking_domain(project, &hostname)?)
    }

    /// Every tracking domain (of one project, if given).
    pub fn tracking_domains(
        &self,
        project: Option<&str>,
    ) -> Result<Vec<TrackingDomain>, HostError> {
        Ok(self.state.tracking_domains(project)?)
    }

    /// `remove`: undoes the domain's steps in reverse order, one commit
    /// each (the activation, the routing, then the domain), so a process
    /// killed in between resumes where it stopped when run again. Before
    /// the domain is forgotten the edge must no longer serve it (`edge`:
    /// checked, or confirmed by the operator); until then it stays at
    /// `verified`, unrouted. `undone` hears each step. Answers whether
    /// there was a domain.
    pub fn remove_tracking_domain(
        &self,
        project: &str,
        hostname: &str,
        edge: &EdgeRemoval,
        undone: &mut dyn FnMut(&str),
    ) -> Result<bool, HostError> {
        check_project(project)?;
        let hostname = hostname::normalize(hostname).map_err(TrackingError::from)?;
        let domain = match self.state.project_tracking_domain(project, &hostname) {
            Ok(domain) => domain,
            Err(StateError::Tracking(crate::state::TrackingRefusal::Unknown { .. })) => {
                return Ok(false);
            }
            Err(other) => return Err(other.into()),
        };
        let mut step = domain.step;
        if step >= Step::Verified && domain.removal_started_at.is_none() {
            // Out of the desired routing from here on, so that no `apply`
            // routes it again while the removal is unfinished.
            self.state.start_tracking_removal(project, &hostname)?;
        }
        if step == Step::Active {
            self.state.deactivate_tracking_domain(project, &hostname)?;
            undone("activation undone: tracking_origin cleared");
            step = Step::TlsReady;
        }
        let origin = self.provider_origin(project)?;
        if matches!(step, Step::Routed | Step::TlsReady) {
            self.state.unroute_tracking_domain(project, &hostname)?;
            undone("routing removed");
            step = Step::Verified;
        }
        // A verified name leads to the edge: it must have stopped serving it.
        if step == Step::Verified {
            match edge {
                EdgeRemoval::RemovedElsewhere => {
                    undone("edge: removal confirmed by the operator");
                }
                EdgeRemoval::Check(options) => {
                    match edge::removal_check(&hostname, origin.as_deref(), options)
                        .map_err(TrackingError::from)?
                    {
                        EdgeAnswer::Stopped(how) => {
                            undone(&format!("edge: no longer serves it ({how})"))
                        }
                        EdgeAnswer::StillServed(reason) => {
                            return Err(TrackingError::StillServed { hostname, reason }.into());
                        }
                        EdgeAnswer::CannotTell(reason) => {
                            return Err(TrackingError::EdgeUnknown { hostname, reason }.into());
                        }
                    }
                }
            }
        }
        let removed = self.state.delete_tracking_domain(project, &hostname)?;
        undone("domain forgotten");
        Ok(removed)
    }

    /// `keep`: undoes a removal that stopped (the edge still served the
    /// name, or could not be asked); the domain is desired again and the
    /// next `apply` routes it.
    pub fn keep_tracking_domain(&self, project: &str, hostname: &str) -> Result<(), HostError> {
        check_project(project)?;
        let hostname = hostname::normalize(hostname).map_err(TrackingError::from)?;
        if self.state.keep_tracking_domain(project, &hostname)? {
            Ok(())
        } else {
            Err(TrackingError::NotBeingRemoved {
                project: project.to_string(),
                hostname,
            }
            .into())
        }
    }

    /// The origin of `project`'s `provider` binding, if it has one.
    fn provider_origin(&self, project: &str) -> Result<Option<String>, HostError> {
        Ok(self
            .state
            .bindings(None)?
            .into_iter()
            .find(|b| b.project_id == project && b.name == "provider")
            .map(|b| b.origin.trim_end_matches('/').to_string()))
    }

    /// The routes the domains call for: every domain at `verified` or later
    /// goes to its project's `provider` binding origin.
    fn desired_routes(&self) -> Result<Vec<TrackingRoute>, HostError> {
        let bindings = self.state.bindings(None)?;
        self.state
            .tracking_domains(None)?
            .into_iter()
            .filter(|domain| domain.step >= Step::Verified && domain.removal_started_at.is_none())
            .map(|domain| {
                let origin = bindings
                    .iter()
                    .find(|b| b.project_id == domain.project_id && b.name == "provider")
                    .map(|b| b.origin.trim_end_matches('/').to_string())
                    .ok_or_else(|| TrackingError::NoProvider {
                        project: domain.project_id.clone(),
                        hostname: domain.hostname.clone(),
                    })?;
                Ok(TrackingRoute {
                    hostname: domain.hostname,
                    project_id: domain.project_id,
                    provider_origin: origin,
                })
            })
            .collect()
    }

    /// `plan`: the desired routing as a diff against the applied one.
    pub fn tracking_plan(&self) -> Result<Plan, HostError> {
        let applied = self.state.tracking_routes()?.to_vec();
        Ok(Plan::new(applied, self.desired_routes()?))
    }

    /// `apply --yes [--plan ID]`: applies the plan (the one with id
    /// `reviewed`, refusing if the routing moved since) in one commit;
    /// domains routed for the first time move to `routed`.
    pub fn apply_tracking_plan(
        &self,
        confirmed: bool,
        reviewed: Option<&str>,
    ) -> Result<Plan, HostError> {
        if !confirmed {
            return Err(TrackingError::NotConfirmed.into());
        }
        if let Some(reviewed) = reviewed
            && !(reviewed.len() == 16 && reviewed.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(TrackingError::MalformedPlanId(reviewed.escape_debug().to_string()).into());
        }
        let plan = self.tracking_plan()?;
        if let Some(reviewed) = reviewed
            && reviewed != plan.id
        {
            return Err(
                StateError::Tracking(crate::state::TrackingRefusal::PlanChanged {
                    reviewed: reviewed.into(),
                    now: plan.id,
                })
                .into(),
            );
        }
        self.state
            .apply_tracking_routes(&plan.applied, &plan.desired, &plan.id)?;
        Ok(plan)
    }

    /// The applied routes (what `serve` and the exports use).
    pub fn tracking_routes(&self) -> Result<std::sync::Arc<[TrackingRoute]>, HostError> {
        Ok(self.state.tracking_routes()?)
    }

    /// `wait-tls`: repeats a TLS handshake with the routed hostname until
    /// the served certificate chains to the roots, is valid for the
    /// hostname and not near expiry, then moves the domain from `routed` to
    /// `tls-ready` (a domain already past it is only checked). `progress`
    /// hears each failed attempt. Answers the number of attempts.
    pub fn wait_tls(
        &self,
        project: &str,
        hostname: &str,
        options: &TlsOptions,
        timeout: std::time::Duration,
        interval: std::time::Duration,
        progress: &mut dyn FnMut(u32, &str),
    ) -> Result<u32, HostError> {
        check_project(project)?;
        let hostname = hostname::normalize(hostname).map_err(TrackingError::from)?;
        let domain = self.state.project_tracking_domain(project, &hostname)?;
        if domain.step < Step::Routed {
            return Err(
                StateError::Tracking(crate::state::TrackingRefusal::OutOfOrder {
                    hostname,
                    at: domain.step,
                    needs: Step::Routed,
                })
                .into(),
            );
        }
        let check = TlsCheck::new(&hostname, options).map_err(TrackingError::from)?;
        let attempts =
            tls::wait(&check, timeout, interval, progress).map_err(TrackingError::from)?;
        if domain.step == Step::Routed {
            self.state
                .advance_tracking_domain(project, &hostname, Step::Routed, Step::TlsReady)?;
        }
        Ok(attempts)
    }

    /// `activate`: once the edge serves the provider's script and the
    /// preflight at `https://<hostname>` (checked through `edge`, the
    /// certificate against its roots), sets the project's public
    /// `tracking_origin` to `https://<hostname>` (bumping its runtime
    /// generations) and moves the domain from `tls-ready` to `active`, in
    /// one commit. Answers the origin.
    pub fn activate_tracking_domain(
        &self,
        project: &str,
        hostname: &str,
        edge: &TlsOptions,
    ) -> Result<String, HostError> {
        check_project(project)?;
        let hostname = hostname::normalize(hostname).map_err(TrackingError::from)?;
        let domain = self.state.project_tracking_domain(project, &hostname)?;
        // Out of order, the state's refusal below names the step to run.
        let route = self
            .state
            .tracking_routes()?
            .iter()
            .find(|r| r.hostname == hostname)
            .cloned();
        if domain.step == Step::TlsReady {
            let Some(route) = route else {
                return Err(TrackingError::NotServed {
                    hostname,
                    reason: "it is not in the applied routing".into(),
                }
                .into());
            };
            if let Probe::NotServed(reason) =
                edge::probe(&hostname, &route.provider_origin, edge).map_err(TrackingError::from)?
            {
                return Err(TrackingError::NotServed { hostname, reason }.into());
            }
        }
        let origin = format!("https://{hostname}");
        self.state
            .activate_tracking_domain(project, &hostname, &origin)?;
        Ok(origin)
    }

    /// The certificate each tracking domain at `routed` or later serves
    /// (one handshake each through the edge `edge` names for the hostname,
    /// verified against its roots without the expiry margin): when it
    /// expires, or why it cannot be checked. For `status` and
    /// `tracking-domain check`.
    pub fn tracking_certificates(
        &self,
        project: Option<&str>,
        edge: &dyn Fn(&str) -> Result<TlsOptions, String>,
    ) -> Result<Vec<CertificateState>, HostError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut states = Vec::new();
        for domain in self.state.tracking_domains(project)? {
            if domain.step < Step::Routed {
                continue;
            }
            let expiry = edge(&domain.hostname).and_then(|options| {
                let options = TlsOptions {
                    min_validity: std::time::Duration::ZERO,
                    ..options
                };
                TlsCheck::new(&domain.hostname, &options)
                    .map_err(|e| e.to_string())?
                    .expiry()
            });
            let (expires_at, error) = match expiry {
                Ok(at) => (Some(at), None),
                Err(reason) => (None, Some(reason)),
            };
            states.push(CertificateState {
                hostname: domain.hostname,
                project_id: domain.project_id,
                expires_at,
                days_left: expires_at.map(|at| (at as i64 - now as i64).div_euclid(86400)),
                error,
            });
        }
        Ok(states)
    }
}

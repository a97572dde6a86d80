//! Tracking domains: the checks of the operator flow that connects a
//! project's own tracking hostname (`host-sim tracking-domain …`) against
//! the outside world. Which hostnames qualify ([`hostname`]), the
//! project-bound TXT challenge ([`challenge`]), the DNS verification
//! ([`dns`]) and the reviewed routing with its exports ([`ingress`]) and the TLS
//! check of the served certificate ([`tls`]) and of what the edge serves
//! ([`edge`]). The flow's steps are stored by `state::tracking`; the host
//! facade runs them in order.

pub mod challenge;
pub mod dns;
pub mod edge;
pub mod hostname;
pub mod ingress;
pub mod tls;

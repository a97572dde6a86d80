//! The reviewed routing of tracking domains: what a tracking hostname
//! exposes (exactly `GET /script.js`, `POST /api/send` and the CORS
//! preflight `OPTIONS /api/send`, nothing else of the provider), the plan
//! (a diff of the desired routes against the applied ones) and the same
//! routing exported for a real edge (an nginx server block, a Kubernetes
//! Ingress). `serve` applies the very same rules: [`exposes`] (which
//! requests), [`FORWARDED_REQUEST_HEADERS`] (which request headers reach the
//! provider), [`visitor_address`] (the one `X-Forwarded-For` it sees) and
//! [`host_matches`] (which `Host` is the tracking hostname).

use std::net::IpAddr;

use sha2::{Digest, Sha256};

use crate::state::TrackingRoute;

/// The only requests a tracking hostname forwards: (method, path), matched
/// exactly on the raw request path (no prefix, no case folding, no
/// decoding, no slash merging).
pub const EXPOSED: &[(&str, &str)] = &[
    ("GET", "/script.js"),
    ("POST", "/api/send"),
    ("OPTIONS", "/api/send"),
];

/// Whether (`method`, `raw_path`) is one of the [`EXPOSED`] requests.
/// `raw_path` is the path as the client sent it, without the query.
pub fn exposes(method: &str, raw_path: &str) -> bool {
    EXPOSED.iter().any(|(m, p)| *m == method && *p == raw_path)
}

/// The request headers a tracking hostname passes on to the provider (lower
/// case), and nothing else: what the tracker's two requests carry
/// (`Content-Type`, Umami's `x-umami-cache` session token), what the
/// provider counts (`User-Agent`, `Accept-Language`), CORS (`Origin`, the
/// preflight's request headers) and the script's revalidation. No cookie,
/// no `Authorization`, no `x-umami-api-key`, no method or URL override and
/// no client-sent address (`X-Forwarded-For`, `True-Client-IP`,
/// `CF-Connecting-IP`, `X-Real-IP`, `X-Client-IP`, `Forwarded`).
pub const FORWARDED_REQUEST_HEADERS: &[&str] = &[
    "user-agent",
    "accept-language",
    "content-type",
    "origin",
    "access-control-request-method",
    "access-control-request-headers",
    "x-umami-cache",
    "if-none-match",
    "if-modified-since",
];

/// The visitor's address as the provider sees it (the only entry of the
/// `X-Forwarded-For` the edge sets, replacing any the client sent): the
/// connection's `peer`, unless the peer is one of the operator's
/// `trusted` proxies; then, walking the received `X-Forwarded-For` from
/// the right, the first address that is not a trusted proxy (nginx's
/// `real_ip_header X-Forwarded-For` with `real_ip_recursive on`).
pub fn visitor_address(peer: IpAddr, forwarded_for: &[&str], trusted: &[IpAddr]) -> IpAddr {
    let mut address = peer;
    let entries = forwarded_for
        .iter()
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .collect::<Vec<_>>();
    for entry in entries.iter().rev() {
        if !trusted.contains(&address) {
            break;
        }
        match entry.parse::<IpAddr>() {
            Ok(next) => address = next,
            Err(_) => break,
        }
    }
    address
}

/// Whether a request's raw `Host` header names `hostname` (a normalised
/// tracking hostname): exactly the hostname, or it with the default port
/// `:443`. No case folding, no final dot, no other port: a browser sends
/// exactly this, and anything else is closed by the edge (nginx `return
/// 444`) and refused by `serve`.
pub fn host_matches(host_header: &str, hostname: &str) -> bool {
    host_header.strip_suffix(":443").unwrap_or(host_header) == hostname
}

/// [`host_matches`] as the nginx regular expression on `$http_host`.
fn host_pattern(hostname: &str) -> String {
    format!("^{}(:443)?$", hostname.replace('.', "\\."))
}

/// One change of a plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    Add {
        route: TrackingRoute,
    },
    Remove {
        route: TrackingRoute,
    },
    Replace {
        from: TrackingRoute,
        to: TrackingRoute,
    },
}

/// The routing to apply: the applied routes it was computed against, the
/// desired ones, the changes between them and an id naming the pair.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    pub id: String,
    pub applied: Vec<TrackingRoute>,
    pub desired: Vec<TrackingRoute>,
    pub changes: Vec<Change>,
}

impl Plan {
    /// The plan from the `applied` routes to the `desired` ones.
    pub fn new(mut applied: Vec<TrackingRoute>, mut desired: Vec<TrackingRoute>) -> Self {
        applied.sort();
        desired.sort();
        let mut changes = Vec::new();
        for route in &desired {
            match applied.iter().find(|a| a.hostname == route.hostname) {
                None => changes.push(Change::Add {
                    route: route.clone(),
                }),
                Some(old) if old != route => changes.push(Change::Replace {
                    from: old.clone(),
                    to: route.clone(),
                }),
                Some(_) => {}
            }
        }
        for route in &applied {
            if !desired.iter().any(|d| d.hostname == route.hostname) {
                changes.push(Change::Remove {
                    route: route.clone(),
                });
            }
        }
        let mut hash = Sha256::new();
        for (side, routes) in [("applied", &applied), ("desired", &desired)] {
            hash.update(side.as_bytes());
            for route in routes.iter() {
                for part in [&route.hostname, &route.project_id, &route.provider_origin] {
                    hash.update(part.as_bytes());
                    hash.update([0]);
                }
            }
        }
        let id = hex::encode(&hash.finalize()[..8]);
        Plan {
            id,
            applied,
            desired,
            changes,
        }
    }

    /// The plan for an operator to review, one line per change.
    pub fn render(&self) -> String {
        let exposed = EXPOSED
            .iter()
            .map(|(m, p)| format!("{m} {p}"))
            .collect::<Vec<_>>()
            .join(", ");
        let line = |sign: char, r: &TrackingRoute| {
            format!(
                "{sign} {} (project {}) → {}: {exposed} (exact), everything else 404\n",
                r.hostname, r.project_id, r.provider_origin
            )
        };
        let mut out = String::new();
        if self.changes.is_empty() {
            out.push_str("no changes: the applied routing is the desired one\n");
        }
        for change in &self.changes {
            match change {
                Change::Add { route } => out.push_str(&line('+', route)),
                Change::Remove { route } => out.push_str(&line('-', route)),
                Change::Replace { from, to } => {
                    out.push_str(&line('-', from));
                    out.push_str(&line('+', to));
                }
            }
        }
        out.push_str(&format!("plan {}\n", self.id));
        out
    }
}

/// How the nginx export listens and where it finds certificates.
#[derive(Debug, Clone)]
pub struct NginxOptions {
    /// The `listen` parameters, e.g. `443 ssl` or `127.0.0.1:8443`.
    pub listen: String,
    /// With `ssl` in `listen`: `<dir>/<hostname>/fullchain.pem` and
    /// `privkey.pem` (certificates are operator-managed).
    pub certificate_dir: String,
    /// Proxies in front of nginx whose `X-Forwarded-For` is believed
    /// (`set_real_ip_from`); none: the visitor is the connection's address.
    pub trusted_proxies: Vec<IpAddr>,
    /// Also export the `default_server` that closes connections for every
    /// other host on `listen` (leave it out only where the configuration
    /// already has a default server for that listen doing the same).
    pub default_server: bool,
}

impl Default for NginxOptions {
    fn default() -> Self {
        Self {
            listen: "443 ssl".into(),
            certificate_dir: "/etc/ssl/tracking".into(),
            trusted_proxies: Vec::new(),
            default_server: true,
        }
    }
}

/// `user-agent` → `User-Agent`.
fn header_case(name: &str) -> String {
    name.split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// An nginx server block per route, behind a `default_server` that closes
/// the connection (`return 444`, and no TLS handshake for unknown names)
/// for any other host, so an empty routing still listens and answers
/// nobody. Exactness at the edge: the raw `Host` must be the hostname
/// ([`host_matches`]); `location =` matches the normalised path, so each
/// location also requires the raw request URI to be the path itself (no
/// `%73`-style variant, no `..`), `merge_slashes off` keeps `//script.js`
/// apart, and other methods are 404. Only [`FORWARDED_REQUEST_HEADERS`]
/// reach the provider, with `X-Forwarded-For` set to the visitor's address
/// ([`visitor_address`]: `$remote_addr`, after `real_ip` when proxies are
/// trusted).
pub fn nginx(routes: &[TrackingRoute], options: &NginxOptions) -> String {
    let ssl = options.listen.split_whitespace().any(|word| word == "ssl");
    let mut out = String::from(
        "# Tracking domains, generated by `host-sim tracking-domain export nginx`\n\
         # from the applied routing: review, then include in the http block.\n",
    );
    if options.default_server {
        out.push_str(&format!(
            "\n# Any other host on this listen: the connection is closed unanswered.\n\
             server {{\n    listen {} default_server;\n    server_tokens off;\n",
            options.listen
        ));
        if ssl {
            out.push_str("    ssl_reject_handshake on;\n");
        }
        out.push_str("    return 444;\n}\n");
    }
    for route in routes {
        let host = &route.hostname;
        let origin = route.provider_origin.trim_end_matches('/');
        let provider_host = origin.split_once("://").map_or(origin, |(_, h)| h);
        out.push_str(&format!(
            "\n# {host} (project {}) → {origin}\nserver {{\n    listen {};\n    server_name {host};\n    server_tokens off;\n",
            route.project_id, options.listen
        ));
        if ssl {
            out.push_str(&format!(
                "    ssl_certificate {dir}/{host}/fullchain.pem;\n    ssl_certificate_key {dir}/{host}/privkey.pem;\n",
                dir = options.certificate_dir.trim_end_matches('/')
            ));
        }
        out.push_str(&format!(
            "    if ($http_host !~ \"{}\") {{ return 444; }}\n    merge_slashes off;\n",
            host_pattern(host)
        ));
        if !options.trusted_proxies.is_empty() {
            for proxy in &options.trusted_proxies {
                out.push_str(&format!("    set_real_ip_from {proxy};\n"));
            }
            out.push_str("    real_ip_header X-Forwarded-For;\n    real_ip_recursive on;\n");
        }
        let mut paths: Vec<&str> = EXPOSED.iter().map(|(_, p)| *p).collect();
        paths.dedup();
        for path in paths {
            let methods: Vec<&str> = EXPOSED
                .iter()
                .filter(|(_, p)| *p == path)
                .map(|(m, _)| *m)
                .collect();
            let escaped = path.replace('.', "\\.");
            out.push_str(&format!(
                "    location = {path} {{\n        \
                 if ($request_uri !~ \"^{escaped}(\\?.*)?$\") {{ return 404; }}\n        \
                 if ($request_method !~ \"^({})$\") {{ return 404; }}\n        \
                 proxy_pass {origin};\n        \
                 proxy_pass_request_headers off;\n        \
                 proxy_set_header Host {provider_host};\n        \
                 proxy_set_header X-Forwarded-For $remote_addr;\n",
                methods.join("|")
            ));
            for name in FORWARDED_REQUEST_HEADERS {
                out.push_str(&format!(
                    "        proxy_set_header {} $http_{};\n",
                    header_case(name),
                    name.replace('-', "_")
                ));
            }
            out.push_str("        proxy_hide_header Set-Cookie;\n        proxy_redirect off;\n");
            if origin.starts_with("https://") {
                out.push_str("        proxy_ssl_server_name on;\n");
            }
            out.push_str("    }\n");
        }
        out.push_str("    location / {\n        return 404;\n    }\n}\n");
    }
    out
}

/// Where the Kubernetes export sends the two paths.
#[derive(Debug, Clone)]
pub struct KubernetesOptions {
    /// The Service in front of the provider.
    pub service: String,
    pub port: u16,
    pub ingress_class: String,
}

/// A Kubernetes Ingress per route, both paths `pathType: Exact`. An Ingress
/// cannot restrict methods: the nginx export (or the provider) must refuse
/// other methods; this is said in the output.
pub fn kubernetes(routes: &[TrackingRoute], options: &KubernetesOptions) -> String {
    let mut out = String::from(
        "# Tracking domains, generated by `host-sim tracking-domain export kubernetes`\n\
         # from the applied routing. Paths are Exact; an Ingress cannot restrict\n\
         # methods, so only GET /script.js and POST|OPTIONS /api/send are meant.\n\
         # Nor can it express the edge's request-header allowlist, the visitor\n\
         # address rule (X-Forwarded-For set, never appended) or exact Host\n\
         # matching: configure the ingress controller to do the same.\n",
    );
    for route in routes {
        let name = format!("tracking-{}", route.hostname.replace('.', "-"));
        out.push_str(&format!(
            "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  labels:\n    host-sim/project: {project}\nspec:\n  ingressClassName: {class}\n  tls:\n    - hosts:\n        - {host}\n      secretName: {name}-tls\n  rules:\n    - host: {host}\n      http:\n        paths:\n",
            project = route.project_id,
            class = options.ingress_class,
            host = route.hostname,
        ));
        let mut paths: Vec<&str> = EXPOSED.iter().map(|(_, p)| *p).collect();
        paths.dedup();
        for path in paths {
            out.push_str(&format!(
                "          - path: {path}\n            pathType: Exact\n            backend:\n              service:\n                name: {}\n                port:\n                  number: {}\n",
                options.service, options.port
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(host: &str, project: &str, origin: &str) -> TrackingRoute {
        TrackingRoute {
            hostname: host.into(),
            project_id: project.into(),
            provider_origin: origin.into(),
        }
    }

    #[test]
    fn only_the_exact_requests_are_exposed() {
        assert!(exposes("GET", "/script.js"));
        assert!(exposes("POST", "/api/send"));
        assert!(exposes("OPTIONS", "/api/send"));
        for (method, path) in [
            ("POST", "/script.js"),
            ("HEAD", "/script.js"),
            ("GET", "/api/send"),
            ("GET", "/SCRIPT.JS"),
            ("GET", "/script.js/"),
            ("GET", "//script.js"),
            ("POST", "/api/send/x"),
            ("POST", "/api/%73end"),
            ("GET", "/script.js/../api/me"),
            ("GET", "/api/me"),
            ("GET", "/api/websites"),
        ] {
            assert!(!exposes(method, path), "{method} {path}");
        }
    }

    #[test]
    fn the_visitor_is_the_connection_unless_it_is_a_trusted_proxy() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let proxy = ip("10.0.0.7");
        let forged = ["198.51.100.1, 203.0.113.9"];
        assert_eq!(
            visitor_address(ip("192.0.2.5"), &forged, &[]),
            ip("192.0.2.5")
        );
        assert_eq!(
            visitor_address(ip("192.0.2.5"), &forged, &[proxy]),
            ip("192.0.2.5"),
            "a client that is not the proxy is believed about nothing"
        );
        assert_eq!(
            visitor_address(proxy, &forged, &[proxy]),
            ip("203.0.113.9"),
            "the proxy's own entry, not the client's forged first one"
        );
        assert_eq!(visitor_address(proxy, &["junk"], &[proxy]), proxy);
        assert_eq!(visitor_address(proxy, &[], &[proxy]), proxy);
    }

    #[test]
    fn the_host_must_be_the_hostname_exactly() {
        let host = "track.shop.example";
        assert!(host_matches(host, host));
        assert!(host_matches("track.shop.example:443", host));
        for variant in [
            "TRACK.shop.example",
            "track.shop.example.",
            "track.shop.example:8443",
            "track.shop.example.:443",
            "localhost",
            "x.track.shop.example",
        ] {
            assert!(!host_matches(variant, host), "{variant}");
        }
        assert_eq!(host_pattern(host), "^track\\.shop\\.example(:443)?$");
    }

    #[test]
    fn a_plan_is_the_diff_and_its_id_names_both_sides() {
        let a = route("a.shop.example", "p1", "https://umami.example");
        let b = route("b.shop.example", "p2", "https://umami.example");
        let b2 = route("b.shop.example", "p2", "https://other.example");
        let plan = Plan::new(vec![b.clone()], vec![a.clone(), b2.clone()]);
        assert_eq!(
            plan.changes,
            vec![
                Change::Add { route: a.clone() },
                Change::Replace {
                    from: b.clone(),
                    to: b2.clone()
                }
            ]
        );
        let none = Plan::new(vec![a.clone()], vec![a.clone()]);
        assert!(none.changes.is_empty());
        assert!(none.render().starts_with("no changes"));
        assert_ne!(none.id, plan.id);
        assert_eq!(plan.id, Plan::new(vec![b], vec![b2, a]).id, "order-free");
    }

    #[test]
    fn the_exports_are_snapshotted() {
        let routes = [
            route("track.shop.example", "p1", "https://umami.provider.example"),
            route("stats.bakery.example", "p2", "http://127.0.0.1:3300"),
        ];
        insta::assert_snapshot!("nginx", nginx(&routes, &NginxOptions::default()));
        insta::assert_snapshot!(
            "nginx_behind_a_proxy",
            nginx(
                &routes[..1],
                &NginxOptions {
                    listen: "127.0.0.1:8443".into(),
                    trusted_proxies: vec![
                        "10.0.0.7".parse().unwrap(),
                        "2001:db8::7".parse().unwrap()
                    ],
                    default_server: false,
                    ..NginxOptions::default()
                }
            )
        );
        insta::assert_snapshot!("nginx_empty", nginx(&[], &NginxOptions::default()));
        insta::assert_snapshot!(
            "kubernetes",
            kubernetes(
                &routes,
                &KubernetesOptions {
                    service: "umami".into(),
                    port: 3000,
                    ingress_class: "nginx".into(),
                }
            )
        );
    }
}

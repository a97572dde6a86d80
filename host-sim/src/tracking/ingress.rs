//! The reviewed routing of tracking domains: what a tracking hostname
//! exposes (exactly `GET /script.js`, `POST /api/send` and the CORS
//! preflight `OPTIONS /api/send`, nothing else of the provider), the plan
//! (a diff of the desired routes against the applied ones) and the same
//! routing exported for a real edge (an nginx server block, a Kubernetes
//! Ingress). `serve` applies the very same rule ([`exposes`]).

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
}

impl Default for NginxOptions {
    fn default() -> Self {
        Self {
            listen: "443 ssl".into(),
            certificate_dir: "/etc/ssl/tracking".into(),
        }
    }
}

/// An nginx server block per route. Exactness at the edge: `location =`
/// matches the normalised path, so each location also requires the raw
/// request URI to be the path itself (no `%73`-style variant, no `..`),
/// `merge_slashes off` keeps `//script.js` apart, and other methods are 404.
pub fn nginx(routes: &[TrackingRoute], options: &NginxOptions) -> String {
    let mut out = String::from(
        "# Tracking domains, generated by `host-sim tracking-domain export nginx`\n\
         # from the applied routing: review, then include in the http block.\n",
    );
    for route in routes {
        let host = &route.hostname;
        let origin = route.provider_origin.trim_end_matches('/');
        let provider_host = origin.split_once("://").map_or(origin, |(_, h)| h);
        out.push_str(&format!(
            "\n# {host} (project {}) → {origin}\nserver {{\n    listen {};\n    server_name {host};\n",
            route.project_id, options.listen
        ));
        if options.listen.split_whitespace().any(|word| word == "ssl") {
            out.push_str(&format!(
                "    ssl_certificate {dir}/{host}/fullchain.pem;\n    ssl_certificate_key {dir}/{host}/privkey.pem;\n",
                dir = options.certificate_dir.trim_end_matches('/')
            ));
        }
        out.push_str("    merge_slashes off;\n");
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
                 proxy_set_header Host {provider_host};\n        \
                 proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n        \
                 proxy_set_header User-Agent $http_user_agent;\n        \
                 proxy_set_header Authorization \"\";\n        \
                 proxy_set_header Cookie \"\";\n        \
                 proxy_redirect off;\n",
                methods.join("|")
            ));
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
         # methods, so only GET /script.js and POST|OPTIONS /api/send are meant.\n",
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

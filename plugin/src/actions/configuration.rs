//! The configuration answer: origins from the project's settings, the
//! tracking script with its domain restriction, and the dashboard link.

use serde::Serialize;
use uuid::Uuid;

use super::Mapping;
use crate::error::{ActionError, ErrorCode};
use crate::host::ProjectSettings;

/// The provider and tracking origins of the invoking project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origins {
    pub provider: String,
    pub tracking_override: Option<String>,
}

fn parse_origin(setting: &str, value: &str) -> Result<String, ActionError> {
    let origin = value.trim().trim_end_matches('/');
    let host = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    match host {
        Some(host)
            if !host.is_empty()
                && !host.contains(['/', '?', '#', '@', '"', '\'', '<', '>', '\\'])
                && !host.chars().any(|c| c.is_whitespace() || c.is_control()) =>
        {
            Ok(origin.to_owned())
        }
        _ => Err(ActionError::new(
            ErrorCode::ProviderUnavailable,
            format!(
                "the project's {setting} setting is not an http(s) origin; an operator must correct it"
            ),
        )),
    }
}

impl Origins {
    pub fn from_settings(settings: &ProjectSettings) -> Result<Self, ActionError> {
        let provider = match settings.provider_origin.as_deref().map(str::trim) {
            Some(origin) if !origin.is_empty() => parse_origin("provider-origin", origin)?,
            _ => {
                return Err(ActionError::new(
                    ErrorCode::ProviderUnavailable,
                    "the project's provider-origin setting is not set; an operator must configure the analytics provider",
                ));
            }
        };
        let tracking_override = match settings.tracking_origin.as_deref().map(str::trim) {
            Some(origin) if !origin.is_empty() => Some(parse_origin("tracking-origin", origin)?),
            _ => None,
        };
        Ok(Self {
            provider,
            tracking_override,
        })
    }

    /// Where the script is served and events are sent.
    pub fn tracking(&self) -> &str {
        self.tracking_override.as_deref().unwrap_or(&self.provider)
    }
}

/// The configuration output (`definitions.configuration` of the manifest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Configuration {
    pub project_id: String,
    pub website_id: Uuid,
    pub name: String,
    pub domain: String,
    pub revision: u64,
    pub tracking_script: String,
    pub script_url: String,
    pub domain_restriction: Vec<String>,
    pub tracking_origin: String,
    pub dashboard_url: String,
}

/// Escapes a value for a double-quoted HTML attribute.
fn attribute(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

impl Configuration {
    pub fn new(project_id: &str, mapping: &Mapping, revision: u64, origins: &Origins) -> Self {
        let tracking_origin = origins.tracking().to_owned();
        let script_url = format!("{tracking_origin}/script.js");
        let host_url = origins
            .tracking_override
            .as_deref()
            .map(|origin| format!(" data-host-url=\"{}\"", attribute(origin)))
            .unwrap_or_default();
        let tracking_script = format!(
            "<script defer src=\"{}\" data-website-id=\"{}\" data-domains=\"{}\"{host_url}></script>",
            attribute(&script_url),
            mapping.website_id,
            attribute(&mapping.domain),
        );
        Self {
            project_id: project_id.to_owned(),
            website_id: mapping.website_id,
            name: mapping.name.clone(),
            domain: mapping.domain.clone(),
            revision,
            tracking_script,
            script_url,
            domain_restriction: vec![mapping.domain.clone()],
            tracking_origin,
            dashboard_url: format!("{}/websites/{}", origins.provider, mapping.website_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_values_are_escaped() {
        assert_eq!(
            attribute(r#"a&b"c'd<e>f"#),
            "a&amp;b&quot;c&#39;d&lt;e&gt;f"
        );
        assert_eq!(attribute("www.example.com"), "www.example.com");
    }

    #[test]
    fn origins_come_from_the_project_settings() {
        let settings = |provider: Option<&str>, tracking: Option<&str>| ProjectSettings {
            provider_origin: provider.map(str::to_owned),
            tracking_origin: tracking.map(str::to_owned),
        };
        let plain =
            Origins::from_settings(&settings(Some("https://a.example.net/"), None)).unwrap();
        assert_eq!(plain.tracking(), "https://a.example.net");
        let blank_override =
            Origins::from_settings(&settings(Some("https://a.example.net"), Some(" "))).unwrap();
        assert_eq!(blank_override.tracking_override, None);
        let custom = Origins::from_settings(&settings(
            Some("https://a.example.net"),
            Some("https://t.example.com"),
        ))
        .unwrap();
        assert_eq!(
            (custom.provider.as_str(), custom.tracking()),
            ("https://a.example.net", "https://t.example.com")
        );
        for bad in [
            "",
            "ftp://a.example.net",
            "https://",
            "https://a.example.net/path",
            "https://user@a.example.net",
        ] {
            let err = Origins::from_settings(&settings(Some(bad), None)).unwrap_err();
            assert_eq!(err.code, ErrorCode::ProviderUnavailable, "{bad:?}");
        }
    }
}

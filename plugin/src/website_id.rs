//! The deterministic website id: UUIDv5 under the platform's namespace over
//! `"{project_id}/{normalized_domain}"`. Same project and domain, same website.

use uuid::Uuid;

/// The platform's fixed namespace for managed-analytics website ids. Changing
/// it would orphan every provisioned website.
pub const WEBSITE_NAMESPACE: Uuid = Uuid::from_u128(0x3c6e_8a4f_91d2_4b7e_a5c0_2f18_d9e6_7b41);

/// The website id of a project's normalized domain.
pub fn website_id(project_id: &str, normalized_domain: &str) -> Uuid {
    Uuid::new_v5(
        &WEBSITE_NAMESPACE,
        format!("{project_id}/{normalized_domain}").as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_a_stable_rfc4122_v5_uuid() {
        let id = website_id("proj-1", "www.example.com");
        assert_eq!(id.get_version_num(), 5);
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(id, website_id("proj-1", "www.example.com"));
        // Pinned: a change here would give every project a new website.
        assert_eq!(id.to_string(), "c06f73fa-f8ca-5a67-9ccf-4cdbcfaa8814");
    }

    #[test]
    fn differs_by_project_and_by_domain() {
        let a = website_id("proj-1", "example.com");
        assert_ne!(a, website_id("proj-2", "example.com"));
        assert_ne!(a, website_id("proj-1", "www.example.com"));
    }
}

//! Properties of the domain normalizer: it never panics, refuses only with
//! `invalid_input`, and what it accepts is a stable lowercase ASCII hostname.

use managed_analytics::ErrorCode;
use managed_analytics::domain::normalize_domain;
use proptest::prelude::*;

fn check(input: &str) -> Result<(), TestCaseError> {
    match normalize_domain(input) {
        Ok(domain) => {
            prop_assert!(domain.len() <= 253);
            prop_assert!(domain.is_ascii());
            prop_assert!(
                domain.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'-'
                    || b == b'.'),
                "{domain}"
            );
            prop_assert!(domain.split('.').count() >= 2);
            prop_assert!(domain.split('.').all(|l| !l.is_empty() && l.len() <= 63));
            prop_assert_eq!(
                normalize_domain(&domain).ok(),
                Some(domain.clone()),
                "idempotent"
            );
        }
        Err(e) => {
            prop_assert_eq!(e.code, ErrorCode::InvalidInput);
            prop_assert!(e.message.starts_with("domain: "));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hostname_like_input(input in "[ ]{0,2}[a-zA-Z0-9-]{1,20}(\\.[a-zA-Z0-9-]{1,20}){0,4}\\.?[ ]{0,2}") {
        check(&input)?;
    }

    #[test]
    fn unicode_labels(input in "\\PC{1,12}(\\.\\PC{1,12}){1,3}") {
        check(&input)?;
    }

    #[test]
    fn anything(input in "\\PC{0,300}") {
        check(&input)?;
    }

    #[test]
    fn case_and_surrounding_space_do_not_matter(label in "[a-z][a-z0-9]{0,15}", tld in "[a-z]{2,6}") {
        let plain = format!("{label}.{tld}");
        let noisy = format!("  {}.{}.  ", label.to_uppercase(), tld.to_uppercase());
        prop_assert_eq!(normalize_domain(&noisy).ok(), normalize_domain(&plain).ok());
    }
}

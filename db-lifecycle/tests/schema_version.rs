//! The words of the refusal both services give a schema newer than theirs.

use db_lifecycle::SchemaTooNew;

#[test]
fn a_newer_schema_is_refused_with_both_versions_and_what_to_do() {
    assert_eq!(SchemaTooNew::check("mail.db", 36, 36), Ok(()));
    assert_eq!(SchemaTooNew::check("mail.db", 12, 36), Ok(()));
    let e = SchemaTooNew::check("mail.db", 37, 36).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the database mail.db is at schema version 37, this binary knows up to 36: run a newer release, or restore the backup taken before the upgrade; refusing to start, nothing was changed"
    );
}

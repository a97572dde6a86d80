//! [`StateError`]: what the operator state refuses or fails at.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("state directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An install of an extension that already has a release.
    #[error("{extension} {version} is already installed; use `release upgrade`")]
    AlreadyInstalled { extension: String, version: String },
    /// An upgrade of an extension that has no release.
    #[error("{extension} is not installed; use `release install`")]
    NothingToUpgrade { extension: String },
    /// A change that needs the extension's installed release.
    #[error("{extension} is not installed")]
    NotInstalled { extension: String },
    /// A tracking-domain step refused (see `state::tracking`).
    #[error(transparent)]
    Tracking(#[from] super::tracking::TrackingRefusal),
    /// A stored value this host cannot read.
    #[error("the state holds an unreadable value: {0}")]
    Corrupt(String),
    /// The release an approval was meant for is no longer the installed one.
    #[error("the installed release of {extension} changed; approve again")]
    ReleaseChanged { extension: String },
}

pub(crate) type Result<T, E = StateError> = std::result::Result<T, E>;

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
    Tracking(#[from] super::steps::TrackingRefusal),
    /// A stored secret that does not open for its row (moved, truncated,
    /// altered, or sealed under a key this process cannot reach).
    #[error("{what}: {source}")]
    Sealed {
        what: String,
        source: secrets_at_rest::OpenError,
    },
    /// The master key file could not be read, or a stored copy of a key
    /// could not be unwrapped.
    #[error(transparent)]
    MasterKey(#[from] secrets_at_rest::KeyError),
    /// A start with a master key the state does not know.
    #[error(transparent)]
    WrongMasterKey(#[from] secrets_at_rest::UnknownMasterKey),
    #[error(transparent)]
    Rotation(#[from] secrets_at_rest::RotationRefused),
    #[error(transparent)]
    Forget(#[from] secrets_at_rest::ForgetRefused),
    /// A state a newer release migrated: refused before anything is
    /// written.
    #[error(transparent)]
    SchemaTooNew(#[from] db_lifecycle::SchemaTooNew),
    /// A stored value this host cannot read.
    #[error("the state holds an unreadable value: {0}")]
    Corrupt(String),
    /// The release an approval was meant for is no longer the installed one.
    #[error("the installed release of {extension} changed; approve again")]
    ReleaseChanged { extension: String },
}

pub(crate) type Result<T, E = StateError> = std::result::Result<T, E>;

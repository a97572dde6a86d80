//! The optional data file: websites and recorded page views survive a
//! restart (the demo's provider keeps its data across reruns).
//!
//! The file is JSON (`{"version":1,"websites":[...],"events":[...]}`),
//! loaded once at start and rewritten after every change: the new contents
//! go to a temporary file next to it, which then replaces the old one by
//! `rename`, so a crash leaves either the old or the new file, never half
//! of one. Counters, fault mode, shape and account kind are not saved; they
//! belong to one run.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::{Event, Store, Website};

const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Saved {
    version: u32,
    websites: Vec<Website>,
    events: Vec<Event>,
}

/// Where the fake keeps its data.
#[derive(Debug, Clone)]
pub(crate) struct DataFile {
    path: PathBuf,
}

impl DataFile {
    pub(crate) fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Fills `store` from the file; a missing file is an empty store.
    pub(crate) fn load_into(&self, store: &mut Store) -> io::Result<()> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(self.context(e, "cannot read")),
        };
        let saved: Saved = serde_json::from_str(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not an umami-fake data file ({e}); move it away to start empty",
                    self.path.display()
                ),
            )
        })?;
        if saved.version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} has data format version {}, this umami-fake reads version {VERSION}",
                    self.path.display(),
                    saved.version
                ),
            ));
        }
        store.websites = saved.websites.into_iter().map(|w| (w.id, w)).collect();
        store.events = saved.events;
        Ok(())
    }

    /// Writes the store's websites and events: temporary file, then rename.
    pub(crate) fn save(&self, store: &Store) -> io::Result<()> {
        let saved = Saved {
            version: VERSION,
            websites: store.websites.values().cloned().collect(),
            events: store.events.clone(),
        };
        let bytes = serde_json::to_vec(&saved).map_err(io::Error::other)?;
        let temporary = self.temporary_path();
        let write = || -> io::Result<()> {
            let mut file = fs::File::create(&temporary)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            fs::rename(&temporary, &self.path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&temporary);
            self.context(e, "cannot save")
        })
    }

    /// `.<name>.tmp` in the same directory, so the rename stays on one file system.
    fn temporary_path(&self) -> PathBuf {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "data".into());
        self.path
            .parent()
            .unwrap_or(Path::new("."))
            .join(format!(".{name}.tmp"))
    }

    fn context(&self, error: io::Error, what: &str) -> io::Error {
        io::Error::new(
            error.kind(),
            format!("{what} {}: {error}", self.path.display()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ACCOUNT_USER_ID, Fault, ResponseShape};
    use uuid::Uuid;

    fn empty() -> Store {
        Store::new(ResponseShape::V3, true, Fault::None)
    }

    #[test]
    fn a_saved_store_loads_back_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = DataFile::new(dir.path().join("provider.json"));
        let mut store = empty();
        let id = Uuid::from_u128(7);
        store.websites.insert(
            id,
            Website {
                id,
                name: "Shop".into(),
                domain: "shop.example.com".into(),
                owner: ACCOUNT_USER_ID,
                created_at_ms: 5,
                updated_at_ms: Some(9),
            },
        );
        store
            .record(id, "/a", 1_000, "Mozilla/5.0", "192.0.2.1")
            .unwrap();
        file.save(&store).unwrap();

        let mut loaded = empty();
        file.load_into(&mut loaded).unwrap();
        assert_eq!(loaded.websites, store.websites);
        assert_eq!(loaded.events, store.events);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["provider.json"]);
    }

    #[test]
    fn a_missing_file_is_an_empty_store_and_a_foreign_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("provider.json");
        let mut store = empty();
        DataFile::new(&path).load_into(&mut store).unwrap();
        assert!(store.websites.is_empty() && store.events.is_empty());

        fs::write(&path, "{\"websites\": 3}").unwrap();
        let error = DataFile::new(&path).load_into(&mut store).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("provider.json"), "{error}");

        fs::write(&path, r#"{"version":2,"websites":[],"events":[]}"#).unwrap();
        let error = DataFile::new(&path).load_into(&mut store).unwrap_err();
        assert!(error.to_string().contains("version 2"), "{error}");
    }

    #[test]
    fn a_failed_save_keeps_the_previous_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("provider.json");
        let file = DataFile::new(&path);
        file.save(&empty()).unwrap();
        let before = fs::read(&path).unwrap();
        // The temporary file's place is taken by a directory: the write fails.
        fs::create_dir(dir.path().join(".provider.json.tmp")).unwrap();
        let mut store = empty();
        let id = Uuid::from_u128(8);
        store.websites.insert(
            id,
            Website {
                id,
                name: "Other".into(),
                domain: "other.example.com".into(),
                owner: ACCOUNT_USER_ID,
                created_at_ms: 0,
                updated_at_ms: None,
            },
        );
        let error = file.save(&store).unwrap_err();
        assert!(error.to_string().contains("cannot save"), "{error}");
        assert_eq!(fs::read(&path).unwrap(), before);
    }
}

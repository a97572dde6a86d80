//! Every log line of a test process, kept in memory. The first call of
//! [`capture`] installs the process's one global subscriber with its filter
//! (`EnvFilter` directives); later calls keep it. [`captured`] is the text
//! logged so far, for assertions such as "no secret in any line".

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static LOG: OnceLock<Buffer> = OnceLock::new();

/// Captures every line `filter` lets through from now on (the first call's
/// filter holds for the process).
pub fn capture(filter: &str) {
    LOG.get_or_init(|| {
        use tracing_subscriber::util::SubscriberInitExt;
        let buffer = Buffer::default();
        let writer = buffer.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish()
            .try_init()
            .expect("the only subscriber of this test process");
        buffer
    });
}

/// Everything captured so far (empty before [`capture`]).
pub fn captured() -> String {
    LOG.get()
        .map(|buffer| {
            String::from_utf8_lossy(&buffer.0.lock().unwrap_or_else(|p| p.into_inner()))
                .into_owned()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_the_filter_lets_through_are_kept_and_others_not() {
        super::capture("info,noisy=warn");
        tracing::info!(target: "app", "a kept line");
        tracing::info!(target: "noisy", "a dropped line");
        let text = super::captured();
        assert!(text.contains("a kept line"), "{text}");
        assert!(!text.contains("a dropped line"), "{text}");
    }
}

//! [`SandboxLimits`]: what one invocation may use. Read by the capabilities
//! (host calls, responses, documents), the sandbox (memory, deadline) and
//! the pool (instances).

use std::time::Duration;

/// Limits of one invocation; every one of them is configurable.
#[derive(Debug, Clone)]
pub struct SandboxLimits {
    /// Linear memory of one instance.
    pub memory_bytes: usize,
    /// Wall time of one invocation, host calls included.
    pub deadline: Duration,
    /// How often the epoch ticker advances the engine's epoch.
    pub epoch_tick: Duration,
    /// Host calls (context, log, documents, binding) per invocation.
    pub max_host_calls: u32,
    /// Body of one binding response.
    pub max_response_bytes: usize,
    /// All binding responses of one invocation together.
    pub max_total_response_bytes: usize,
    /// JSON input of an action.
    pub max_input_bytes: usize,
    /// JSON output of an action.
    pub max_output_bytes: usize,
    /// One stored document.
    pub max_document_bytes: usize,
    /// Guest stdout and stderr kept for the log.
    pub max_guest_output_bytes: usize,
    /// Instances alive at once (pooling allocator slots).
    pub max_instances: u32,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            deadline: Duration::from_secs(2),
            epoch_tick: Duration::from_millis(5),
            max_host_calls: 100,
            max_response_bytes: 1 << 20,
            max_total_response_bytes: 4 << 20,
            max_input_bytes: 256 << 10,
            max_output_bytes: 1 << 20,
            max_document_bytes: 256 << 10,
            max_guest_output_bytes: 64 << 10,
            max_instances: 64,
        }
    }
}

impl SandboxLimits {
    /// Epoch ticks that make up the deadline (at least one).
    pub fn deadline_ticks(&self) -> u64 {
        let tick = self.epoch_tick.as_nanos().max(1);
        (self.deadline.as_nanos().div_ceil(tick)).max(1) as u64
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking a
/// cut with `…` (text shown to people: log lines, the developer view).
pub fn cut_with_ellipsis(text: &mut String, max: usize) {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
}

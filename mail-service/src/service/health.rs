//! Readiness and the queue gauges of `/metrics`.

use crate::error::Error;
use crate::metrics;

use super::MailService;

impl MailService {
    /// `Ok` when this node can serve: the database answers and has every
    /// migration; otherwise the reason (`/readyz` answers 503 with it).
    pub async fn readiness(&self) -> Result<(), String> {
        self.store.readiness().await
    }

    /// Reads the shared queues' depths into the gauges of `/metrics`.
    pub async fn record_queue_gauges(&self) -> Result<(), Error> {
        let now = self.clock.now_ms();
        let depths = self.store.queue_depths(now).await?;
        let age = |since: Option<i64>| since.map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0);
        ::metrics::gauge!(metrics::SCHEDULED_DUE).set(depths.scheduled_due as f64);
        ::metrics::gauge!(metrics::SCHEDULED_OLDEST_AGE).set(age(depths.oldest_due_at));
        ::metrics::gauge!(metrics::WEBHOOK_BACKLOG).set(depths.webhooks_pending as f64);
        ::metrics::gauge!(metrics::WEBHOOK_OLDEST_AGE).set(age(depths.oldest_pending_at));
        Ok(())
    }
}

//! DKIM signatures on threads of their own: one per core, started with the
//! first signature and shared by every transport of the process.
//!
//! An RSA-2048 signature is a quarter of a millisecond of one core, most of
//! a send's CPU. Made on a tokio worker, it held that worker for as long:
//! the requests whose writer units had committed, or whose answers were
//! ready, waited behind it, and the cores went idle while every request in
//! flight waited on the writer (`send_bound`: 89 % busy, 0.73–0.76 of the
//! CPU bound). On threads of their own, the workers pass answers on at once
//! and the signatures fill the cores (91 % busy, 0.79–0.86 of the bound);
//! a send's context switches did not grow (3.4 against 3.5). The threads
//! keep the default priority: below it (nice 5, 19) the signatures waited
//! behind everything else and the rate fell.

use std::sync::{Arc, OnceLock};

use tokio::sync::oneshot;

use super::DkimSigning;

/// A message to sign, with the key and where its signed bytes go.
struct Job {
    key: Arc<DkimSigning>,
    message: Vec<u8>,
    reply: oneshot::Sender<Result<Vec<u8>, String>>,
}

/// The queue of the process's signer threads.
fn queue() -> &'static crossbeam_channel::Sender<Job> {
    static QUEUE: OnceLock<crossbeam_channel::Sender<Job>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (queue, jobs) = crossbeam_channel::unbounded::<Job>();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        for n in 0..threads {
            let jobs = jobs.clone();
            let started = std::thread::Builder::new()
                .name(format!("dkim-signer-{n}"))
                .spawn(move || serve(jobs));
            if let Err(e) = started {
                // The threads that did start serve the queue; with none,
                // `sign` answers that no signer runs.
                tracing::error!(error = %e, "a DKIM signer thread could not be started");
            }
        }
        queue
    })
}

/// Signs until the process ends. A signature that panics (a fault in the
/// signer) answers its caller with an error and leaves the thread serving.
fn serve(jobs: crossbeam_channel::Receiver<Job>) {
    for Job {
        key,
        message,
        reply,
    } in jobs
    {
        let signed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| key.sign(&message)))
            .unwrap_or_else(|_| Err("the DKIM signer failed".to_string()));
        let _ = reply.send(signed);
    }
}

/// `message` signed with `key` (as [`DkimSigning::sign`]), on a signer
/// thread.
pub(super) async fn sign(key: &Arc<DkimSigning>, message: Vec<u8>) -> Result<Vec<u8>, String> {
    let (reply, signed) = oneshot::channel();
    let no_signer = || "no DKIM signer thread is running".to_string();
    queue()
        .send(Job {
            key: key.clone(),
            message,
            reply,
        })
        .map_err(|_| no_signer())?;
    signed.await.map_err(|_| no_signer())?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Arc<DkimSigning> {
        let b64 = super::super::tests::generated_key();
        Arc::new(DkimSigning::from_pkcs8_base64("shop.example", "mailservice", &b64).unwrap())
    }

    /// The `bh=` tag (the body's hash) of a signed message.
    fn body_hash(signed: &[u8]) -> String {
        let text = String::from_utf8_lossy(signed);
        let start = text.find(" bh=").expect("a bh= tag") + 4;
        text[start..].split(';').next().unwrap().to_string()
    }

    /// Many concurrent signatures through the pool: each caller gets its
    /// own message back, signed as the key signs it on the caller's thread
    /// (the same body hash; `t=` and so `b=` follow the clock).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_caller_gets_its_own_message_signed() {
        let key = key();
        let message = |n: usize| {
            format!("From: a@shop.example\r\nTo: b@example.com\r\nSubject: {n}\r\n\r\nBody {n}\r\n")
                .into_bytes()
        };
        let signing: Vec<_> = (0..24)
            .map(|n| {
                let key = key.clone();
                tokio::spawn(async move { (n, sign(&key, message(n)).await) })
            })
            .collect();
        for job in signing {
            let (n, signed) = job.await.unwrap();
            let signed = signed.expect("signed");
            assert!(signed.starts_with(b"DKIM-Signature:"));
            assert!(
                signed.ends_with(&message(n)),
                "message {n} came back to its caller"
            );
            let header = String::from_utf8_lossy(&signed);
            assert!(header.contains("d=shop.example") && header.contains("s=mailservice"));
            assert_eq!(
                body_hash(&signed),
                body_hash(&key.sign(&message(n)).unwrap())
            );
        }
    }
}

//! Sending domains: create (with a DKIM key pair), list, read, verify
//! against real DNS, delete; the background re-verification; and the rule
//! that mail is sent only from a verified domain of the tenant.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey};
use serde_json::Value;

use crate::error::Error;
use crate::model::{self, DKIM_SELECTOR, DnsRecord, Domain, RecordStatus, ValidatedEmail};
use crate::store::{DkimKey, NewDomain, SendingDomain};
use crate::transport::DkimSigning;

use super::page::{Page, PageRequest};
use super::{Caller, MailService};

/// Domains one background pass checks at most.
const CHECKS_PER_PASS: i64 = 50;

/// Raw query of `GET /domains`, before checks.
#[derive(Debug, Clone, Default)]
pub struct DomainQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

/// A new RSA-2048 key pair: (PKCS#8 DER of the private key, base64 of the
/// public key's SubjectPublicKeyInfo DER, the DKIM `p=` value).
fn dkim_key_pair() -> Result<(String, String), Error> {
    let unavailable = |what: &str| Error::Unavailable {
        detail: format!("the DKIM key could not be {what}"),
    };
    let private = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048)
        .map_err(|_| unavailable("generated"))?;
    let der = private.to_pkcs8_der().map_err(|_| unavailable("encoded"))?;
    let public = private
        .to_public_key()
        .to_public_key_der()
        .map_err(|_| unavailable("encoded"))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok((b64.encode(der.as_bytes()), b64.encode(public.as_bytes())))
}

impl MailService {
    /// `POST /domains {name, custom_return_path?}`.
    pub async fn create_domain(&self, caller: &Caller, body: &Value) -> Result<Domain, Error> {
        let obj = super::body_object(body, &["name", "custom_return_path", "region"])?;
        let name = match obj.get("name") {
            None | Some(Value::Null) => {
                return Err(Error::MissingField {
                    field: "name".into(),
                });
            }
            Some(Value::String(s)) => model::normalize_domain_name("name", s)?,
            Some(_) => return Err(Error::validation("name", "must be a string")),
        };
        let return_path = match obj.get("custom_return_path") {
            None | Some(Value::Null) => model::DEFAULT_RETURN_PATH.to_string(),
            Some(Value::String(s)) => model::validate_return_path("custom_return_path", s)?,
            Some(_) => return Err(Error::validation("custom_return_path", "must be a string")),
        };
        match obj.get("region") {
            None | Some(Value::Null) => {}
            Some(Value::String(r)) if r == "us-east-1" => {}
            Some(_) => {
                return Err(Error::validation(
                    "region",
                    "must be `us-east-1` (the only region this service has)",
                ));
            }
        }
        self.add_domain(caller.principal.tenant_id, &name, &return_path)
            .await
    }

    /// Creates a domain for a tenant: a new key pair and the records.
    async fn add_domain(
        &self,
        tenant_id: i64,
        name: &str,
        return_path: &str,
    ) -> Result<Domain, Error> {
        let (private, public) =
            tokio::task::spawn_blocking(dkim_key_pair)
                .await
                .map_err(|_| Error::Unavailable {
                    detail: "the DKIM key could not be generated".into(),
                })??;
        let records = model::records_for(
            return_path,
            DKIM_SELECTOR,
            &public,
            &self.settings.sending_host,
        );
        let id = self.ids.next();
        self.store
            .create_domain(&NewDomain {
                id,
                tenant_id,
                name: name.to_string(),
                return_path: return_path.to_string(),
                dkim_selector: DKIM_SELECTOR.to_string(),
                dkim_private_key: private,
                records: serde_json::to_string(&records).unwrap_or_default(),
                created_at: self.clock.now_ms(),
            })
            .await?;
        self.store
            .domain(tenant_id, id)
            .await?
            .ok_or_else(|| Error::Unavailable {
                detail: "the domain was written but could not be read back".into(),
            })
    }

    pub async fn list_domains(
        &self,
        caller: &Caller,
        query: &DomainQuery,
    ) -> Result<Page<Domain>, Error> {
        let page = PageRequest::parse("domains", query.limit.as_deref(), query.cursor.as_deref())?;
        let rows = self
            .store
            .list_domains(caller.principal.tenant_id, page.before_id, page.fetch())
            .await?;
        Ok(page.page(rows, |d| d.id))
    }

    pub async fn domain(&self, caller: &Caller, id: i64) -> Result<Domain, Error> {
        self.store
            .domain(caller.principal.tenant_id, id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "domain".into(),
            })
    }

    /// `DELETE /domains/{id}`: mail is no longer sent from it; emails
    /// already accepted keep their records.
    pub async fn delete_domain(&self, caller: &Caller, id: i64) -> Result<(), Error> {
        if self
            .store
            .delete_domain(caller.principal.tenant_id, id)
            .await?
        {
            Ok(())
        } else {
            Err(Error::NotFound {
                what: "domain".into(),
            })
        }
    }

    /// `POST /domains/{id}/verify`: answers at once (as Resend's does);
    /// the records are checked in the background now (the lookups at the
    /// same time, under one deadline) and again for the verification
    /// period. The outcome shows on `GET /domains/{id}` and as a
    /// `domain.updated` event.
    pub async fn verify_domain(&self, caller: &Caller, id: i64) -> Result<Domain, Error> {
        let tenant = caller.principal.tenant_id;
        let until = self.clock.now_ms() + self.settings.domain_verify_period.as_millis() as i64;
        if !self.store.request_verification(tenant, id, until).await? {
            return Err(Error::NotFound {
                what: "domain".into(),
            });
        }
        let domain = self.domain(caller, id).await?;
        if self
            .store
            .take_domain_check(id, domain.checked_at, self.clock.now_ms())
            .await?
        {
            self.spawn_domain_check(tenant, domain.clone());
        }
        Ok(domain)
    }

    /// How often the background task looks for domains to re-check: the
    /// re-check interval, at most a minute, at least a second.
    pub fn domain_recheck_tick(&self) -> std::time::Duration {
        self.settings.domain_recheck_interval.clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(60),
        )
    }

    /// One background pass: checks the domains under verification whose
    /// last check is older than the interval (and once more when their
    /// period ended). Several nodes may run it: each check is taken by one.
    pub async fn recheck_domains(&self) -> Result<usize, Error> {
        let now = self.clock.now_ms();
        let interval = self.settings.domain_recheck_interval.as_millis() as i64;
        let due = self
            .store
            .domains_to_check(now, now - interval, CHECKS_PER_PASS)
            .await?;
        let mut checked = 0;
        for (tenant_id, domain) in due {
            if self
                .store
                .take_domain_check(domain.id, domain.checked_at, now)
                .await?
            {
                self.check_domain(tenant_id, &domain, false).await?;
                checked += 1;
            }
        }
        Ok(checked)
    }

    /// Refuses an email whose `from` is not on a domain of the tenant that
    /// may send (403); otherwise answers the domain's key, which its handoff
    /// signs with (one read serves the check and the signature).
    pub(super) async fn check_sender(
        &self,
        tenant_id: i64,
        email: &ValidatedEmail,
    ) -> Result<DkimKey, Error> {
        Ok(self.check_sender_screened(tenant_id, email, &[]).await?.0)
    }

    /// [`Self::check_sender`], with those of `recipients` on the tenant's
    /// suppression list, read with the domain.
    pub(super) async fn check_sender_screened(
        &self,
        tenant_id: i64,
        email: &ValidatedEmail,
        recipients: &[String],
    ) -> Result<(DkimKey, Vec<String>), Error> {
        let name = domain_of(email);
        match self
            .store
            .sending_domain_screened(tenant_id, &name, recipients)
            .await?
        {
            Some((d, listed)) if d.status.may_send(d.verified_at) => Ok((d.key, listed)),
            Some((SendingDomain { id, status, .. }, _)) => Err(Error::DomainNotVerified {
                field: "from".into(),
                domain: name,
                detail: format!(
                    "its status is {status}; verify it first (POST /domains/{id}/verify)"
                ),
            }),
            None => Err(Error::DomainNotVerified {
                field: "from".into(),
                domain: name,
                detail: "add it (POST /domains) and verify it first".into(),
            }),
        }
    }

    /// How mail from a domain that passed `check_sender` leaves: its signer
    /// (built once per stored key) and its return-path domain
    /// (`send.example.com`).
    pub(super) fn sending_identity(
        &self,
        tenant_id: i64,
        key: &DkimKey,
    ) -> Result<SendingIdentity, String> {
        Ok(SendingIdentity {
            signing: self.dkim_signers.get_or_build(tenant_id, key)?,
            return_path_domain: format!("{}.{}", key.return_path, key.name),
        })
    }

    /// The identity an email leaves with when it can leave as it is: its
    /// sender has one and none of its recipients is on the suppression list
    /// (`listed`, from [`Self::check_sender_screened`]). None otherwise: its
    /// handoff then screens and marks on its own, and reports what it found.
    pub(super) fn cleared_identity(
        &self,
        tenant_id: i64,
        sender: &DkimKey,
        listed: &[String],
    ) -> Option<SendingIdentity> {
        match listed.is_empty() {
            true => self.sending_identity(tenant_id, sender).ok(),
            false => None,
        }
    }

    /// The operator's command for local use: creates the domain if it is
    /// missing and marks it verified **without looking at DNS**.
    pub async fn mark_domain_verified(&self, tenant: &str, name: &str) -> Result<Domain, Error> {
        let tenant = self
            .store
            .find_tenant(tenant)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: format!("tenant `{tenant}`"),
            })?;
        let name = model::normalize_domain_name("domain", name)?;
        let domain = match self.store.domain_by_name(tenant.id, &name).await? {
            Some(d) => d,
            None => {
                self.add_domain(tenant.id, &name, model::DEFAULT_RETURN_PATH)
                    .await?
            }
        };
        let records: Vec<DnsRecord> = domain
            .records
            .0
            .iter()
            .cloned()
            .map(|mut r| {
                r.status = RecordStatus::Verified;
                r
            })
            .collect();
        self.store
            .mark_domain_verified(
                domain.id,
                &serde_json::to_string(&records).unwrap_or_default(),
                self.clock.now_ms(),
            )
            .await?;
        self.store
            .domain(tenant.id, domain.id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "domain".into(),
            })
    }
}

/// The sending domain of an email: its `from` domain, lower-case IDNA ASCII.
pub(super) fn domain_of(email: &ValidatedEmail) -> String {
    let domain = email.from.email.domain();
    idna::domain_to_ascii(domain).unwrap_or_else(|_| domain.to_ascii_lowercase())
}

/// How a domain's mail leaves: signed by its key, with its return path.
pub(super) struct SendingIdentity {
    pub signing: Arc<DkimSigning>,
    pub return_path_domain: String,
}

/// The DKIM signers built from stored keys, one per (tenant, domain). An
/// entry is used only while the stored key and selector are the ones it was
/// built from, so a domain deleted and added again (a new key) gets a new
/// signer.
#[derive(Default)]
pub(super) struct DkimSigners(std::sync::Mutex<HashMap<(i64, String), CachedSigner>>);

struct CachedSigner {
    selector: String,
    stored_key: String,
    signing: Arc<DkimSigning>,
}

/// More domains than this in the cache: it starts over (a bound, not a policy).
const MAX_CACHED_SIGNERS: usize = 4096;

impl DkimSigners {
    fn get_or_build(&self, tenant_id: i64, key: &DkimKey) -> Result<Arc<DkimSigning>, String> {
        let id = (tenant_id, key.name.clone());
        {
            let cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(cached) = cache.get(&id)
                && cached.selector == key.dkim_selector
                && cached.stored_key == key.dkim_private_key
            {
                return Ok(cached.signing.clone());
            }
        }
        let signing = Arc::new(DkimSigning::from_pkcs8_base64(
            &key.name,
            &key.dkim_selector,
            &key.dkim_private_key,
        )?);
        let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED_SIGNERS {
            cache.clear();
        }
        cache.insert(
            id,
            CachedSigner {
                selector: key.dkim_selector.clone(),
                stored_key: key.dkim_private_key.clone(),
                signing: signing.clone(),
            },
        );
        Ok(signing)
    }
}
